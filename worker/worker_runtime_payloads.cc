// WorkerRuntime, large payloads (docs/protocol.md §7.1): SAVE replies sent in
// chunks within the head's credit window, RESTORE payloads assembled from the
// head's chunks with the actor's later commands waiting behind them.
#include "worker/worker_runtime.h"

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "worker/actor_command_info.h"

namespace ztune::worker {

bool WorkerRuntime::SendChunked(protocol::Message header,
                                std::unique_ptr<protocol::PayloadSource>& payload) {
  const uint64_t size = payload->size();
  protocol::SetAnnouncedPayloadBytes(header.body, size);
  const uint64_t rid = protocol::HeaderRid(header.body);
  if (chunk_sender_.Contains("", rid)) {
    // A second reply to one request cannot happen (the head's rids are
    // unique); refuse it rather than mix two payloads.
    spdlog::error("a second chunked reply to request {}; dropped", rid);
    return true;
  }
  if (!Send(header)) return false;
  spdlog::debug("sending {} bytes for request {} in chunks", size, rid);
  chunk_sender_.Start("", rid, std::move(payload));
  sending_[rid] = std::move(header);
  PumpChunks();
  return true;
}

void WorkerRuntime::PumpChunks() {
  if (chunk_sender_.empty() || link_ != Link::kRegistered) return;
  std::vector<protocol::ChunkSender::Outgoing> out;
  chunk_sender_.TakeSendable(out);
  // A chunk that cannot be queued (no connection) is not retried here: the
  // head-silence timer resets the link and ResetTransfers sends it all again.
  for (auto& o : out) Send(o.message);
}

void WorkerRuntime::ResetTransfers(const std::string& reason) {
  // Again from their first byte, ahead of the other held replies, in
  // request order; the payloads stay the sources they were (no copy).
  std::vector<HeldReply> again;
  for (auto& [rid, payload] : chunk_sender_.TakePeer("")) {
    auto it = sending_.find(rid);
    if (it == sending_.end()) continue;
    protocol::Message header{std::move(it->second.body), {}};
    protocol::SetAnnouncedPayloadBytes(header.body, 0);
    again.push_back({std::move(header), std::move(payload)});
  }
  sending_.clear();
  held_.insert(held_.begin(), std::make_move_iterator(again.begin()),
               std::make_move_iterator(again.end()));
  // Every wait holds a RESTORE still arriving: all of them fail.
  std::vector<ActorKey> waiting;
  for (const auto& [key, queue] : payload_waits_) waiting.push_back(key);
  std::sort(waiting.begin(), waiting.end());  // in key order, whatever the table's
  for (const auto& key : waiting) FailPayloadWait(key, "RESTORE payload incomplete: " + reason);
  restore_payloads_.TakePeer("");
}

void WorkerRuntime::RouteActorCommand(protocol::Message message) {
  const auto [kind, rid, key] = DescribeActorCommand(message);
  if (!AcceptOnce(kind, rid, key)) return;
  const auto* restore = std::get_if<protocol::Restore>(&message.body);
  const bool chunked = restore != nullptr && restore->payload_bytes > 0;
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end() && !chunked) {
    HandleActorCommand(std::move(message));
    return;
  }
  if (wait != payload_waits_.end() && kind == CommandKind::kStop) {
    FailPayloadWait(key, "cancelled by a STOP while its checkpoint was arriving");
    HandleActorCommand(std::move(message));
    return;
  }
  if (!chunked) {
    wait->second.push_back({0, std::move(message)});
    return;
  }
  // A RESTORE whose chunks follow: registered at once, even behind another
  // one, so that every chunk is credited as it arrives.
  std::string refused;
  const uint64_t announced = restore->payload_bytes;
  if (wait == payload_waits_.end() && actors_.count(key) == 0) {
    refused = NoActorError(key);
  } else if (Status s = restore_payloads_.Expect("", std::move(message)); !s.ok()) {
    refused = s.message();
  }
  if (!refused.empty()) {
    CancelIncomingPayload(rid);
    SendFailure(CommandKind::kRestore, rid, key, refused);
    // Commands already waiting for an earlier RESTORE would otherwise run
    // past this failed one.
    if (wait != payload_waits_.end()) FailPayloadWait(key, "a later RESTORE failed: " + refused);
    return;
  }
  payload_waits_[key].push_back({rid, std::nullopt});
  spdlog::debug("receiving {} bytes for RESTORE {} of {} in chunks", announced, rid,
                key.ToString());
}

void WorkerRuntime::HandleChunk(const protocol::Chunk& chunk, const std::string& bytes) {
  auto outcome = restore_payloads_.OnChunk("", chunk, bytes);
  if (auto* refusal = std::get_if<protocol::ChunkAssembler::Refusal>(&outcome)) {
    if (!refusal->header) {
      // Cancelled (a STOP came first, or the RESTORE was refused) or never
      // announced; the head was told to stop when it was cancelled.
      spdlog::debug("dropped a chunk: {}", refusal->error.message());
      return;
    }
    CancelIncomingPayload(chunk.rid);
    const auto& restore = std::get<protocol::Restore>(refusal->header->body);
    const ActorKey key{restore.trial_id, restore.attempt};
    // FailPayloadWait answers every RESTORE still in the wait; this one has
    // left the assembler already, so it is answered here.
    auto wait = payload_waits_.find(key);
    if (wait != payload_waits_.end()) {
      for (auto& w : wait->second) {
        if (w.arriving_rid == chunk.rid) w.arriving_rid = 0;
      }
    }
    const std::string error = "RESTORE payload refused: " + refusal->error.message();
    SendFailure(CommandKind::kRestore, chunk.rid, key, error);
    FailPayloadWait(key, error);
    return;
  }
  auto& progress = std::get<protocol::ChunkAssembler::Progress>(outcome);
  Send(protocol::Message{progress.credit, {}});
  if (!progress.done) return;
  const auto& restore = std::get<protocol::Restore>(progress.done->body);
  const ActorKey key{restore.trial_id, restore.attempt};
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end()) return;  // cannot happen: the wait outlives its assemblies
  for (auto& w : wait->second) {
    if (w.arriving_rid == chunk.rid) {
      w.arriving_rid = 0;
      w.message = std::move(progress.done);
      break;
    }
  }
  DrainPayloadWait(key);
}

void WorkerRuntime::HandleCredit(const protocol::Credit& credit) {
  Status s = chunk_sender_.OnCredit("", credit);
  if (!s.ok()) {
    WarnDropped(s.message());
    return;
  }
  if (!chunk_sender_.Contains("", credit.rid)) {
    if (credit.cancel && sending_.count(credit.rid) > 0) {
      spdlog::warn("the head refused the checkpoint of request {}", credit.rid);
    }
    sending_.erase(credit.rid);
  }
  PumpChunks();
}

void WorkerRuntime::CancelIncomingPayload(uint64_t rid) {
  protocol::Credit cancel;
  cancel.rid = rid;
  cancel.cancel = true;
  Send(protocol::Message{cancel, {}});
}

void WorkerRuntime::DrainPayloadWait(const ActorKey& key) {
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end()) return;
  std::deque<WaitingCommand> ready;
  auto& queue = wait->second;
  while (!queue.empty() && queue.front().message) {
    ready.push_back(std::move(queue.front()));
    queue.pop_front();
  }
  if (queue.empty()) payload_waits_.erase(wait);
  // After the bookkeeping: HandleActorCommand does not touch the waits.
  for (auto& w : ready) HandleActorCommand(std::move(*w.message));
}

void WorkerRuntime::FailPayloadWait(const ActorKey& key, const std::string& error) {
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end()) return;
  std::deque<WaitingCommand> queue = std::move(wait->second);
  payload_waits_.erase(wait);
  for (auto& w : queue) {
    if (w.arriving_rid != 0) {
      restore_payloads_.Cancel("", w.arriving_rid);
      CancelIncomingPayload(w.arriving_rid);
      SendFailure(CommandKind::kRestore, w.arriving_rid, key, error);
    } else if (w.message) {
      const ActorCommandInfo info = DescribeActorCommand(*w.message);
      SendFailure(info.kind, info.rid, key, "after a failed RESTORE: " + error);
    }
  }
}

}  // namespace ztune::worker
