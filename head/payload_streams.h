// PayloadStreams: the head's half of chunked payloads (docs/protocol.md §7.1):
// RESTORE payloads streamed to workers within their credit windows, and SAVE
// payloads assembled from workers' CHUNKs, answered with CREDITs. A payload
// that completes, or fails (refused header, chunk out of order), becomes one
// Reply handed to the runner as if it had arrived inline.
//
// No sockets: messages go out through `send`, replies in through `deliver`.
// Loop thread only.
#pragma once

#include <functional>
#include <string>

#include "common/ids.h"
#include "common/protocol/chunked_transfer.h"
#include "common/protocol/messages.h"
#include "common/status.h"

namespace ztune::head {

class PayloadStreams {
 public:
  using SendFn = std::function<void(const WorkerId& worker_id, const protocol::Message&)>;
  // The payload is handed over (moved), not copied: a checkpoint may be
  // hundreds of megabytes and the loop thread must not copy it.
  using DeliverFn =
      std::function<void(const WorkerId& worker_id, const protocol::Reply&, std::string payload)>;

  PayloadStreams(uint64_t max_save_payload_bytes, SendFn send, DeliverFn deliver);

  // A RESTORE whose payload is too large to go inline: moves the payload out
  // of `message` and announces its size in the header. Returns the payload
  // to pass to StartRestore() once the header is sent; empty if `message`
  // goes inline as it is.
  static std::string SplitLargeRestore(protocol::Message& message);
  // Streams `payload` after the RESTORE header of `rid` that was just sent.
  void StartRestore(const WorkerId& worker_id, uint64_t rid, std::string payload);

  // A REPLY from a worker. One that announces a payload is kept until the
  // payload is complete; others are delivered at once. Either way it ends
  // our RESTORE stream for that request, if one is still going.
  void OnReply(const WorkerId& worker_id, protocol::Message message);
  void OnChunk(const WorkerId& worker_id, const protocol::Chunk& chunk,
               const std::string& bytes);
  // A refused credit (beyond what was sent, going backwards) is returned.
  Status OnCredit(const WorkerId& worker_id, const protocol::Credit& credit);

  // Forgets every stream with a worker (it died, or registered anew).
  void DropWorker(const WorkerId& worker_id);
  // Workers with a stream in progress, either way.
  std::vector<WorkerId> Workers() const;

 private:
  void Pump();
  void Cancel(const WorkerId& worker_id, uint64_t rid);
  void Fail(const WorkerId& worker_id, protocol::Reply reply, const std::string& error);

  protocol::ChunkSender restores_;
  protocol::ChunkAssembler saves_;
  SendFn send_;
  DeliverFn deliver_;
};

}  // namespace ztune::head
