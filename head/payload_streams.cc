#include "head/payload_streams.h"

#include <spdlog/spdlog.h>

#include "common/check.h"

namespace ztune::head {

PayloadStreams::PayloadStreams(uint64_t max_save_payload_bytes, SendFn send, DeliverFn deliver)
    : saves_(max_save_payload_bytes), send_(std::move(send)), deliver_(std::move(deliver)) {}

std::unique_ptr<protocol::PayloadSource> PayloadStreams::SplitLargeRestore(
    protocol::Message& message) {
  if (!std::holds_alternative<protocol::Restore>(message.body)) return nullptr;
  std::unique_ptr<protocol::PayloadSource> payload;
  auto ref = DecodeCheckpointFileRef(message.payload);
  if (ref.ok() && ref->has_value()) {
    Result<std::unique_ptr<protocol::FilePayloadSource>> file =
        files_ != nullptr ? files_->Open(**ref)
                          : Status::FailedPrecondition("this head keeps no checkpoint files");
    message.payload.clear();
    if (!file.ok()) {
      spdlog::error("RESTORE of trial {}: checkpoint file {} unreadable: {}",
                    std::get<protocol::Restore>(message.body).trial_id, (*ref)->name,
                    file.status().ToString());
      return nullptr;
    }
    payload = std::move(*file);
  } else if (!ref.ok()) {
    spdlog::error("RESTORE of trial {}: {}", std::get<protocol::Restore>(message.body).trial_id,
                  ref.status().ToString());
    message.payload.clear();
    return nullptr;
  } else if (message.payload.size() > protocol::kInlinePayloadBytes) {
    payload = std::make_unique<protocol::StringPayloadSource>(std::move(message.payload));
    message.payload.clear();
  } else {
    return nullptr;
  }
  protocol::SetAnnouncedPayloadBytes(message.body, payload->size());
  return payload;
}

void PayloadStreams::StartRestore(const WorkerId& worker_id, uint64_t rid,
                                  std::unique_ptr<protocol::PayloadSource> payload) {
  if (restores_.Contains(worker_id, rid)) {
    spdlog::error("RESTORE {} to {} is already streaming; not sent twice", rid, worker_id);
    return;
  }
  restores_.Start(worker_id, rid, std::move(payload));
  Pump();
}

void PayloadStreams::OnReply(const WorkerId& worker_id, protocol::Message message) {
  const auto& reply = std::get<protocol::Reply>(message.body);
  restores_.Cancel(worker_id, reply.rid);
  if (reply.payload_bytes == 0) {
    deliver_(worker_id, reply, std::move(message.payload));
    return;
  }
  protocol::Reply header = reply;
  Status s = Status::Ok();
  if (payload_filter_ && !payload_filter_(worker_id, reply.rid)) {
    s = Status::InvalidArgument("a payload of " + std::to_string(reply.payload_bytes) +
                                " bytes for request " + std::to_string(reply.rid) +
                                ", which is not a SAVE this head sent that worker");
  } else if (files_ != nullptr && reply.payload_bytes <= saves_.max_payload_bytes()) {
    // To a file as it arrives (the size is checked before the space is
    // reserved: Expect refuses an oversized one with its own message).
    Result<std::unique_ptr<CheckpointUpload>> upload = files_->Begin(reply.payload_bytes);
    s = upload.ok() ? saves_.Expect(worker_id, std::move(message), std::move(*upload))
                    : upload.status();
  } else {
    s = saves_.Expect(worker_id, std::move(message));
  }
  if (s.ok()) return;
  // Chunks already on their way find no header and are dropped.
  Cancel(worker_id, header.rid);
  Fail(worker_id, std::move(header), "checkpoint transfer refused: " + s.message());
}

void PayloadStreams::OnChunk(const WorkerId& worker_id, const protocol::Chunk& chunk,
                             std::string_view bytes) {
  auto outcome = saves_.OnChunk(worker_id, chunk, bytes);
  if (auto* refusal = std::get_if<protocol::ChunkAssembler::Refusal>(&outcome)) {
    if (!refusal->header) {
      spdlog::debug("chunk from {} dropped: {}", worker_id, refusal->error.message());
      return;
    }
    Cancel(worker_id, chunk.rid);
    Fail(worker_id, std::get<protocol::Reply>(refusal->header->body),
         "checkpoint transfer failed: " + refusal->error.message());
    return;
  }
  auto& progress = std::get<protocol::ChunkAssembler::Progress>(outcome);
  send_(worker_id, protocol::Message{progress.credit, {}});
  if (!progress.done) return;
  auto& reply = std::get<protocol::Reply>(progress.done->body);
  if (progress.sink != nullptr) {
    Finish(worker_id, std::move(reply), std::move(progress.sink));
    return;
  }
  deliver_(worker_id, reply, std::move(progress.done->payload));
}

void PayloadStreams::Finish(const WorkerId& worker_id, protocol::Reply reply,
                            std::unique_ptr<protocol::PayloadSink> sink) {
  // Only OnReply makes sinks, and they are uploads.
  auto* upload = dynamic_cast<CheckpointUpload*>(sink.get());
  CHECK(upload != nullptr);
  Result<CheckpointFileRef> ref = Status::Internal("not finished");
  Status s = blocking_([&] {
    ref = upload->Finish();
    return ref.status();
  });
  if (!s.ok()) {
    Fail(worker_id, std::move(reply), "checkpoint could not be made durable: " + s.message());
    return;
  }
  files_->Delivered(ref->name);
  deliver_(worker_id, reply, EncodeCheckpointFileRef(*ref));
}

Status PayloadStreams::OnCredit(const WorkerId& worker_id, const protocol::Credit& credit) {
  RETURN_IF_ERROR(restores_.OnCredit(worker_id, credit));
  Pump();
  return Status::Ok();
}

void PayloadStreams::DropWorker(const WorkerId& worker_id) {
  restores_.TakePeer(worker_id);
  saves_.TakePeer(worker_id);
}

std::vector<WorkerId> PayloadStreams::Workers() const {
  std::vector<WorkerId> all;
  for (auto& id : restores_.Peers()) all.emplace_back(std::move(id));
  for (auto& id : saves_.Peers()) all.emplace_back(std::move(id));
  return all;
}

void PayloadStreams::Pump() {
  if (restores_.empty()) return;
  std::vector<protocol::ChunkSender::Outgoing> out;
  std::vector<protocol::ChunkSender::Failure> failures;
  restores_.TakeSendable(out, &failures);
  for (const auto& f : failures) {
    // The worker waits for chunks that do not come: the RESTORE's deadline
    // fails it, and the trial's restore fails as for a bad checkpoint.
    spdlog::error("RESTORE {} to {}: checkpoint unreadable mid-stream: {}", f.rid, f.peer,
                  f.error.ToString());
  }
  for (const auto& o : out) send_(WorkerId(o.peer), o.message);  // peers are the workers' ids
}

void PayloadStreams::Cancel(const WorkerId& worker_id, uint64_t rid) {
  protocol::Credit cancel;
  cancel.rid = rid;
  cancel.cancel = true;
  send_(worker_id, protocol::Message{cancel, {}});
}

void PayloadStreams::Fail(const WorkerId& worker_id, protocol::Reply reply,
                          const std::string& error) {
  spdlog::warn("worker {}: request {}: {}", worker_id, reply.rid, error);
  reply.ok = false;
  reply.error = error;
  reply.payload_bytes = 0;
  deliver_(worker_id, reply, {});
}

}  // namespace ztune::head
