// PayloadStreams: the head's half of chunked payloads (docs/protocol.md §7.1):
// RESTORE payloads streamed to workers within their credit windows, and SAVE
// payloads assembled from workers' CHUNKs, answered with CREDITs. A payload
// that completes, or fails (refused header, chunk out of order), becomes one
// Reply handed to the runner as if it had arrived inline.
//
// With CheckpointFiles, a SAVE payload goes to a file as its chunks arrive
// and is delivered as the file's reference once durable; a RESTORE of a
// reference streams the file. Memory stays bounded by the credit windows,
// whatever the checkpoint's size.
//
// No sockets: messages go out through `send`, replies in through `deliver`.
// Loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/ids.h"
#include "common/protocol/chunked_transfer.h"
#include "common/protocol/messages.h"
#include "common/status.h"
#include "head/checkpoint_files.h"

namespace ztune::head {

class PayloadStreams {
 public:
  using SendFn = std::function<void(const WorkerId& worker_id, const protocol::Message&)>;
  // The payload is handed over (moved), not copied: a checkpoint may be
  // hundreds of megabytes and the loop thread must not copy it.
  using DeliverFn =
      std::function<void(const WorkerId& worker_id, const protocol::Reply&, std::string payload)>;

  // Runs a blocking job (a checkpoint file's fdatasync) off the loop thread
  // while heartbeats go on, and returns its status.
  using BlockingFn = std::function<Status(const std::function<Status()>& job)>;

  PayloadStreams(uint64_t max_save_payload_bytes, SendFn send, DeliverFn deliver);
  // Not owned; nullptr (the default): SAVE payloads are assembled in memory.
  void set_files(CheckpointFiles* files, BlockingFn blocking) {
    files_ = files;
    blocking_ = std::move(blocking);
  }

  // A RESTORE whose payload is too large to go inline, or a file reference:
  // moves the payload out of `message` and announces its size in the
  // header. Returns the payload to pass to StartRestore() once the header is
  // sent; nullptr if `message` goes inline as it is. A file that cannot be
  // opened is logged and the RESTORE goes without a payload: the worker
  // refuses it and the trial's restore fails as for any bad checkpoint.
  std::unique_ptr<protocol::PayloadSource> SplitLargeRestore(protocol::Message& message);
  // Streams `payload` after the RESTORE header of `rid` that was just sent.
  void StartRestore(const WorkerId& worker_id, uint64_t rid,
                    std::unique_ptr<protocol::PayloadSource> payload);

  // Which REPLYs may announce a payload: the answers to the SAVEs the head
  // sent that worker (nothing is set aside, on disk or in memory, for a
  // payload no request asked for). Unset: every REPLY may (unit tests).
  void set_payload_filter(std::function<bool(const WorkerId&, uint64_t rid)> filter) {
    payload_filter_ = std::move(filter);
  }

  // A REPLY from a worker. One that announces a payload is kept until the
  // payload is complete; others are delivered at once. Either way it ends
  // our RESTORE stream for that request, if one is still going.
  void OnReply(const WorkerId& worker_id, protocol::Message message);
  void OnChunk(const WorkerId& worker_id, const protocol::Chunk& chunk, std::string_view bytes);
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

  void Finish(const WorkerId& worker_id, protocol::Reply reply,
              std::unique_ptr<protocol::PayloadSink> sink);

  protocol::ChunkSender restores_;
  protocol::ChunkAssembler saves_;
  SendFn send_;
  DeliverFn deliver_;
  CheckpointFiles* files_ = nullptr;
  BlockingFn blocking_;
  std::function<bool(const WorkerId&, uint64_t rid)> payload_filter_;
};

}  // namespace ztune::head
