#include "head/payload_streams.h"

#include <spdlog/spdlog.h>

namespace ztune::head {

PayloadStreams::PayloadStreams(uint64_t max_save_payload_bytes, SendFn send, DeliverFn deliver)
    : saves_(max_save_payload_bytes), send_(std::move(send)), deliver_(std::move(deliver)) {}

std::string PayloadStreams::SplitLargeRestore(protocol::Message& message) {
  if (message.payload.size() <= protocol::kInlinePayloadBytes ||
      !std::holds_alternative<protocol::Restore>(message.body)) {
    return {};
  }
  std::string payload = std::move(message.payload);
  message.payload.clear();
  protocol::SetAnnouncedPayloadBytes(message.body, payload.size());
  return payload;
}

void PayloadStreams::StartRestore(const WorkerId& worker_id, uint64_t rid, std::string payload) {
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
  Status s = saves_.Expect(worker_id, std::move(message));
  if (s.ok()) return;
  // Chunks already on their way find no header and are dropped.
  Cancel(worker_id, header.rid);
  Fail(worker_id, std::move(header), "checkpoint transfer refused: " + s.message());
}

void PayloadStreams::OnChunk(const WorkerId& worker_id, const protocol::Chunk& chunk,
                             const std::string& bytes) {
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
  deliver_(worker_id, std::get<protocol::Reply>(progress.done->body),
           std::move(progress.done->payload));
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
  restores_.TakeSendable(out);
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
