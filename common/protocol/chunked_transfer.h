// Large payloads (checkpoint bytes) between head and worker, in bounded CHUNKs
// with credit-based flow control (docs/protocol.md, "Large payloads").
//
// Why: a payload sent as one frame occupies the connection until its last
// byte arrives, and every heartbeat queued behind it waits as long; a 64 MiB
// checkpoint on a loaded machine took longer than a 300 ms liveness window and
// the head declared a healthy worker dead. In chunks, with at most `window`
// bytes unacknowledged, a heartbeat waits behind one window at most, whatever
// the payload's size.
//
// The header message (REPLY to SAVE, or RESTORE) announces `payload_bytes`;
// CHUNKs follow in offset order on the same connection; the receiver answers
// each with CREDIT{received}. A payload up to kInlinePayloadBytes travels
// inline as the header's payload frame, as before.
//
// Both classes are pure bookkeeping (no sockets, no clock): the socket owner
// sends what they return. Not thread-safe: each lives on its owner's loop
// thread. Transfers are keyed by (peer, rid); `peer` is the worker id on the
// head and empty on the worker.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/protocol/messages.h"
#include "common/protocol/payload_source.h"
#include "common/status.h"

namespace ztune::protocol {

inline constexpr uint64_t kInlinePayloadBytes = 256 << 10;
inline constexpr uint64_t kChunkBytes = 1 << 20;
// 16 MiB: with 4 MiB, a 1 GiB checkpoint reached the head at 364 MB/s (the
// sender waited for credits); with 16 MiB, 490 MB/s (bench/
// checkpoint_transfer.py, 2026-12-03). A heartbeat waits behind one window
// at most: about 15 ms at the 1.1 GB/s that benchmark measured.
inline constexpr uint64_t kWindowBytes = 16 * kChunkBytes;

// The payload size a header announces (REPLY and RESTORE), 0 for others.
uint64_t AnnouncedPayloadBytes(const Body& body);
// Sets the announced size on a REPLY or RESTORE; CHECKs the kind.
void SetAnnouncedPayloadBytes(Body& body, uint64_t bytes);
// The request id of a REPLY or RESTORE header; CHECKs the kind.
uint64_t HeaderRid(const Body& body);

class ChunkSender {
 public:
  struct Outgoing {
    std::string peer;
    Message message;  // a CHUNK with its payload frame
  };

  explicit ChunkSender(uint64_t chunk_bytes = kChunkBytes, uint64_t window_bytes = kWindowBytes);

  struct Failure {
    std::string peer;
    uint64_t rid = 0;
    Status error;
  };

  // Starts streaming `payload` for request `rid` to `peer`; the caller has
  // sent the header that announces its size. CHECK: not empty and no
  // transfer of (peer, rid) in progress.
  void Start(const std::string& peer, uint64_t rid, std::unique_ptr<PayloadSource> payload);
  void Start(const std::string& peer, uint64_t rid, std::string payload) {
    Start(peer, rid, std::make_unique<StringPayloadSource>(std::move(payload)));
  }
  // The receiver holds `received` bytes. A credit for an unknown transfer
  // (finished or cancelled) is ignored; one beyond what was sent, or going
  // backwards, is refused (InvalidArgument) and changes nothing. A transfer
  // whose last byte is credited, or that the receiver cancelled, is finished
  // and forgotten.
  Status OnCredit(const std::string& peer, const Credit& credit);
  // Appends to `out` every chunk the windows allow now, in offset order per
  // transfer. A source that cannot be read ends its transfer and is reported
  // in `failures` (CHECK: given, if any source can fail).
  void TakeSendable(std::vector<Outgoing>& out, std::vector<Failure>* failures = nullptr);
  // Ends one transfer (its request was answered or abandoned). True if known.
  bool Cancel(const std::string& peer, uint64_t rid);
  bool Contains(const std::string& peer, uint64_t rid) const {
    return transfers_.count({peer, rid}) > 0;
  }
  // Ends every transfer to `peer` and returns (rid, payload) of each, in rid
  // order, so that the caller can send them again after a reconnection.
  std::vector<std::pair<uint64_t, std::unique_ptr<PayloadSource>>> TakePeer(
      const std::string& peer);
  // Peers with a transfer in progress.
  std::vector<std::string> Peers() const;
  bool empty() const { return transfers_.empty(); }
  size_t size() const { return transfers_.size(); }

 private:
  struct Transfer {
    std::unique_ptr<PayloadSource> payload;
    uint64_t sent = 0;      // bytes handed out as chunks
    uint64_t credited = 0;  // bytes the receiver confirmed
  };
  const uint64_t chunk_bytes_;
  const uint64_t window_bytes_;
  std::map<std::pair<std::string, uint64_t>, Transfer> transfers_;
};

class ChunkAssembler {
 public:
  explicit ChunkAssembler(uint64_t max_payload_bytes) : max_payload_bytes_(max_payload_bytes) {}

  // `header` (a REPLY or RESTORE from `peer`) announced its payload: keeps it
  // until the payload is complete. InvalidArgument, and nothing kept, if the
  // size is 0 or above the limit, or (peer, rid) is already pending. With a
  // `sink`, the chunks go there and the header's payload stays empty.
  Status Expect(const std::string& peer, Message header,
                std::unique_ptr<PayloadSink> sink = nullptr);

  struct Progress {
    Credit credit;                  // to send back to the peer
    std::optional<Message> done;    // the header, with the whole payload unless it had a sink
    std::unique_ptr<PayloadSink> sink;  // with `done`: the sink that holds the payload
  };
  struct Refusal {
    Status error;
    std::optional<Message> header;  // the transfer it ended, if it was pending
  };
  // One chunk from `peer`. NotFound (no header: an unknown, finished or
  // cancelled transfer) changes nothing. A chunk out of order or beyond the
  // announced size, or one its sink refuses, ends its transfer: the Refusal carries the header so
  // that the caller can fail the request.
  std::variant<Progress, Refusal> OnChunk(const std::string& peer, const Chunk& chunk,
                                          std::string_view bytes);
  // Ends one transfer; returns its header if it was pending.
  std::optional<Message> Cancel(const std::string& peer, uint64_t rid);
  // Ends every transfer from `peer` and returns their headers in rid order.
  std::vector<Message> TakePeer(const std::string& peer);
  std::vector<std::string> Peers() const;
  uint64_t max_payload_bytes() const { return max_payload_bytes_; }
  bool empty() const { return pending_.empty(); }
  size_t size() const { return pending_.size(); }

 private:
  struct Pending {
    Message header;
    uint64_t total = 0;
    uint64_t received = 0;
    std::unique_ptr<PayloadSink> sink;
  };
  const uint64_t max_payload_bytes_;
  std::map<std::pair<std::string, uint64_t>, Pending> pending_;
};

}  // namespace ztune::protocol
