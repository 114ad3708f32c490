#include "bench/fleet/sim_worker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "common/checkpoint/checkpoint_envelope.h"
#include "common/check.h"
#include "common/protocol/result_fields.h"

namespace ztune::fleet {
namespace {

constexpr size_t kMaxHeld = 10'000;
constexpr size_t kMaxAccepted = 65'536;
constexpr size_t kRidsPerActor = 16;
constexpr uint64_t kMaxRestorePayloadBytes = 4ULL << 30;
// A RESULTS holds at most this many result bytes (ztune-worker's bound).
constexpr size_t kCoalescedBytes = 1 << 20;

std::string HexId(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(v & 0xffffffffULL));
  return buf;
}

}  // namespace

void SimStats::Add(const SimStats& o) {
  connections += o.connections;
  registrations += o.registrations;
  silence_reconnects += o.silence_reconnects;
  connection_cuts += o.connection_cuts;
  disconnects_received += o.disconnects_received;
  epoch_changes += o.epoch_changes;
  for (const auto& [name, n] : o.commands) commands[name] += n;
  coalesced_trains += o.coalesced_trains;
  trains_in_acks += o.trains_in_acks;
  results_sent += o.results_sent;
  results_replayed += o.results_replayed;
  results_acked += o.results_acked;
  result_messages += o.result_messages;
  step_failures += o.step_failures;
  refusals += o.refusals;
  checkpoint_bytes_saved += o.checkpoint_bytes_saved;
  restores += o.restores;
  max_head_silence_ms = std::max(max_head_silence_ms, o.max_head_silence_ms);
  ack_latency_ms.insert(ack_latency_ms.end(), o.ack_latency_ms.begin(), o.ack_latency_ms.end());
}

SimWorker::SimWorker(SimWorkerOptions options, uint64_t seed)
    : options_(std::move(options)),
      rng_(seed),
      heartbeat_ms_(options_.heartbeat_ms),
      liveness_(options_.liveness),
      chunks_in_(kMaxRestorePayloadBytes) {
  worker_id_ = options_.name + "-" + HexId(options_.id_bits != 0 ? options_.id_bits : rng_());
  backoff_ms_ = heartbeat_ms_;
}

int64_t SimWorker::live_iterations() const {
  int64_t sum = 0;
  for (const auto& [key, a] : actors_) sum += a.iteration;
  return sum;
}

// ---- link ----

void SimWorker::OnConnected(TimeMs now, std::vector<protocol::Message>& out) {
  ++stats_.connections;
  last_heard_ = now;  // the silence clock starts with the connection
  SendRegister(now, out);
}

void SimWorker::SendRegister(TimeMs now, std::vector<protocol::Message>& out) {
  if (link_ != Link::kRegistering) {
    link_ = Link::kRegistering;
    ++incarnation_;
    // A new incarnation restarts every transfer (docs/protocol.md §7.1): our
    // unfinished SAVE replies go again after REGISTERED, the head's RESTORE
    // payloads fail.
    for (auto& [rid, source] : chunks_out_.TakePeer("")) {
      auto it = large_headers_.find(rid);
      if (it == large_headers_.end()) continue;
      protocol::Message again = std::move(it->second);
      if (source->ReadAt(0, source->size(), again.payload).ok()) {
        interrupted_.push_back(std::move(again));
      }
    }
    large_headers_.clear();
    for (protocol::Message& header : chunks_in_.TakePeer("")) {
      auto& r = std::get<protocol::Restore>(header.body);
      ActorKey key{r.trial_id, r.attempt};
      auto it = actors_.find(key);
      if (it == actors_.end() || it->second.queue.empty()) continue;
      // The RESTORE fails; the commands behind it run.
      EraseQueuedRestore(it->second, r.rid);
      Refuse(false, r.rid, key, "RESTORE payload refused: the connection was reset", out);
      Drain(key, now, out);
    }
  }
  protocol::Register m;
  m.worker_id = worker_id_;
  m.incarnation = incarnation_;
  m.name = options_.name;
  m.host = options_.host;
  m.pid = options_.pid;
  m.resources = options_.resources;
  const auto gpus = options_.resources.find("GPU");
  if (gpus != options_.resources.end()) {
    for (int64_t i = 0; i < static_cast<int64_t>(gpus->second); ++i) m.gpu_ids.push_back(i);
  }
  m.trainables = options_.trainables;
  if (options_.coalesce) m.features = {protocol::kFeatureTrains};
  if (options_.coalesce && options_.ack_trains) m.features.push_back(protocol::kFeatureAckTrains);
  if (options_.one_frame) m.features.push_back(protocol::kFeatureOneFrame);
  head_takes_one_frame_ = false;  // a REGISTER goes split, which every head reads
  for (const auto& [key, a] : actors_) {
    protocol::LiveActor live;
    live.trial_id = key.first;
    live.attempt = key.second;
    live.acked_seq = a.acked_seq;
    live.iteration = a.iteration;
    live.training =
        !a.queue.empty() && std::holds_alternative<protocol::Train>(a.queue.front().body);
    live.rids.assign(a.rids.begin(), a.rids.end());
    m.live_actors.push_back(std::move(live));
  }
  last_register_ = now;
  last_sent_ = now;
  out.push_back(protocol::Message{std::move(m), {}});
}

void SimWorker::HandleRegistered(const protocol::Registered& m, TimeMs now,
                                 std::vector<protocol::Message>& out) {
  if (m.worker_id != worker_id_ || link_ != Link::kRegistering) return;  // a duplicate
  link_ = Link::kRegistered;
  ++stats_.registrations;
  if (m.heartbeat_ms > 0) heartbeat_ms_ = m.heartbeat_ms;
  if (m.liveness > 0) liveness_ = m.liveness;
  backoff_ms_ = heartbeat_ms_;
  const bool head_restarted = have_epoch_ && m.head_epoch != head_epoch_;
  if (head_restarted) ++stats_.epoch_changes;
  head_epoch_ = m.head_epoch;
  have_epoch_ = true;
  head_takes_results_ =
      options_.coalesce && std::find(m.features.begin(), m.features.end(),
                                     protocol::kFeatureResults) != m.features.end();
  head_takes_one_frame_ =
      options_.one_frame && std::find(m.features.begin(), m.features.end(),
                                      protocol::kFeatureOneFrame) != m.features.end();
  // SAVE replies cut off by the reconnect start over, unless the head
  // restarted: a new head never asked for them (docs/protocol.md §7.1).
  if (!head_restarted) {
    for (protocol::Message& reply : interrupted_) EmitNow(std::move(reply), out);
  }
  interrupted_.clear();
  while (!held_.empty()) {
    protocol::Message held = std::move(held_.front());
    held_.pop_front();
    EmitNow(std::move(held), out);
  }
  for (auto& [key, entries] : outbox_) {
    for (OutboxEntry& e : entries) SendBatch(e, now, /*replay=*/true, out);
  }
}

SimWorker::LinkAction SimWorker::OnTimer(TimeMs now, std::vector<protocol::Message>& out) {
  const size_t sent_before = out.size();
  const LinkAction action = Timers(now, out);
  if (out.size() > sent_before) last_sent_ = now;
  Coalesce(out, sent_before);
  return action;
}

SimWorker::LinkAction SimWorker::Timers(TimeMs now, std::vector<protocol::Message>& out) {
  if (link_ == Link::kDisconnected) {
    if (now < reconnect_at_) return LinkAction::kNone;
    return LinkAction::kOpen;
  }
  // Steps first: a result due now goes out before a heartbeat would.
  if (NextStepMs() <= now) {
    std::vector<ActorKey> due;
    for (const auto& [key, a] : actors_) {
      if (a.step_due && *a.step_due <= now) due.push_back(key);
    }
    for (const ActorKey& key : due) Step(key, now, out);
  }

  if (now - last_heard_ >= heartbeat_ms_ * liveness_) {
    // Paranoid Pirate: the head is presumed dead; a new connection after the
    // backoff, which doubles up to the cap until a REGISTERED resets it.
    ++stats_.silence_reconnects;
    link_ = Link::kDisconnected;
    BackOff(now);
    return LinkAction::kClose;
  }
  if (link_ == Link::kRegistering) {
    if (now - last_register_ >= heartbeat_ms_) SendRegister(now, out);
  } else if (now - last_sent_ >= heartbeat_ms_) {
    out.push_back(protocol::Message{protocol::Heartbeat{}, {}});
  }
  return LinkAction::kNone;
}

SimWorker::LinkAction SimWorker::OnConnectionCut(TimeMs now) {
  if (link_ == Link::kDisconnected) return LinkAction::kNone;
  ++stats_.connection_cuts;
  if (link_ == Link::kRegistered) {
    reconnect_at_ = now;
  } else {
    // Cut before REGISTERED: a head that accepts connections and drops them
    // is not hammered.
    BackOff(now);
  }
  link_ = Link::kDisconnected;
  return LinkAction::kClose;
}

void SimWorker::BackOff(TimeMs now) {
  reconnect_at_ = now + backoff_ms_;
  backoff_ms_ = std::min(backoff_ms_ * 2, options_.max_backoff_ms);
}

TimeMs SimWorker::NextTimerMs() const {
  if (link_ == Link::kDisconnected) return reconnect_at_;
  TimeMs next = last_heard_ + heartbeat_ms_ * liveness_;
  next =
      std::min(next, (link_ == Link::kRegistering ? last_register_ : last_sent_) + heartbeat_ms_);
  return std::min(next, NextStepMs());
}

TimeMs SimWorker::NextStepMs() const {
  if (next_step_stale_) {
    next_step_ = std::numeric_limits<TimeMs>::max();
    for (const auto& [key, a] : actors_) {
      if (a.step_due) next_step_ = std::min(next_step_, *a.step_due);
    }
    next_step_stale_ = false;
  }
  return next_step_;
}

void SimWorker::Leave(std::vector<protocol::Message>& out) {
  out.push_back(protocol::Message{protocol::Disconnect{"fleet simulator stopping"}, {}});
  link_ = Link::kDisconnected;
}

// ---- sending ----

void SimWorker::Emit(protocol::Message message, std::vector<protocol::Message>& out) {
  if (link_ != Link::kRegistered) {
    if (held_.size() >= kMaxHeld) held_.pop_front();
    held_.push_back(std::move(message));
    return;
  }
  EmitNow(std::move(message), out);
}

void SimWorker::EmitNow(protocol::Message message, std::vector<protocol::Message>& out) {
  if (message.payload.size() > protocol::kInlinePayloadBytes &&
      std::holds_alternative<protocol::Reply>(message.body)) {
    auto& reply = std::get<protocol::Reply>(message.body);
    reply.payload_bytes = message.payload.size();
    const uint64_t rid = reply.rid;
    std::string payload = std::move(message.payload);
    message.payload.clear();
    out.push_back(std::move(message));
    chunks_out_.Cancel("", rid);  // a resend restarts its transfer
    // The header, to start over after a reconnect (its bytes are in the
    // sender's source until the transfer ends).
    protocol::Message header = out.back();
    std::get<protocol::Reply>(header.body).payload_bytes = 0;
    large_headers_[rid] = std::move(header);
    chunks_out_.Start("", rid, std::move(payload));
    PumpChunks(out);
  } else {
    out.push_back(std::move(message));
  }
}

void SimWorker::PumpChunks(std::vector<protocol::Message>& out) {
  std::vector<protocol::ChunkSender::Outgoing> chunks;
  chunks_out_.TakeSendable(chunks);
  for (auto& c : chunks) {
    stats_.checkpoint_bytes_saved += c.message.payload.size();
    out.push_back(std::move(c.message));
  }
  // Transfers the head credited in full are over.
  std::erase_if(large_headers_,
                [&](const auto& kv) { return !chunks_out_.Contains("", kv.first); });
}

void SimWorker::SendBatch(OutboxEntry& entry, TimeMs now, bool replay,
                          std::vector<protocol::Message>& out) {
  if (link_ != Link::kRegistered) return;  // replayed after REGISTERED
  if (!entry.first_sent) entry.first_sent = now;
  (replay ? stats_.results_replayed : stats_.results_sent) += entry.batch.results.size();
  out.push_back(protocol::Message{entry.batch, {}});
}

// ---- request ids ----

bool SimWorker::AcceptOnce(uint64_t rid, const ActorKey& key, bool is_train,
                           std::vector<protocol::Message>& out) {
  if (rid == 0) return true;  // no answer wanted: nothing to deduplicate
  auto it = accepted_.find(rid);
  if (it != accepted_.end()) {
    // A resend after a reconnect: a request still running is answered when
    // it ends; an answered one gets its kept answer again (a TRAIN's batch
    // is in the outbox; a SAVE is saved again).
    if (!it->second.answered || is_train) return false;
    if (it->second.answer) {
      Emit(*it->second.answer, out);
      return false;
    }
    it->second.answered = false;
    return true;
  }
  accepted_.emplace(rid, Accepted{});
  accepted_order_.push_back(rid);
  while (accepted_order_.size() > kMaxAccepted) {
    accepted_.erase(accepted_order_.front());
    accepted_order_.pop_front();
  }
  auto a = actors_.find(key);
  if (a != actors_.end()) {
    a->second.rids.push_back(rid);
    if (a->second.rids.size() > kRidsPerActor) a->second.rids.pop_front();
  }
  return true;
}

void SimWorker::Answered(uint64_t rid, const protocol::Message* kept) {
  auto it = accepted_.find(rid);
  if (it == accepted_.end()) return;
  it->second.answered = true;
  if (kept != nullptr) it->second.answer = std::make_unique<protocol::Message>(*kept);
}

std::string SimWorker::NoActorError(const ActorKey& key) const {
  return "no actor for trial " + key.first + " attempt " + std::to_string(key.second) +
         " on worker " + worker_id_;
}

std::string SimWorker::ExistsError(const ActorKey& key) const {
  return "actor for trial " + key.first + " attempt " + std::to_string(key.second) +
         " already exists on worker " + worker_id_;
}

void SimWorker::Reply(uint64_t rid, const ActorKey& key, bool ok, std::string error, Json data,
                      std::string payload, bool keep, std::vector<protocol::Message>& out) {
  if (rid == 0) return;
  if (!ok) ++stats_.refusals;
  protocol::Message m{protocol::Reply{rid, key.first, key.second, ok, std::move(error),
                                      data.is_null() ? Json::object() : std::move(data), 0},
                      std::move(payload)};
  Answered(rid, keep ? &m : nullptr);
  Emit(std::move(m), out);
}

void SimWorker::Refuse(bool is_train, uint64_t rid, const ActorKey& key, std::string error,
                       std::vector<protocol::Message>& out) {
  if (!is_train) {
    Reply(rid, key, false, std::move(error), Json::object(), {}, /*keep=*/true, out);
    return;
  }
  // A refused TRAIN is a failed batch, sent once, not kept in the outbox.
  ++stats_.refusals;
  protocol::ResultBatch batch;
  batch.rid = rid;
  batch.trial_id = key.first;
  batch.attempt = key.second;
  batch.failed = true;
  batch.error = std::move(error);
  protocol::Message m{std::move(batch), {}};
  Answered(rid, &m);
  Emit(std::move(m), out);
}

// ---- messages from the head ----

void SimWorker::OnMessage(protocol::Message message, TimeMs now,
                          std::vector<protocol::Message>& out) {
  const size_t sent_before = out.size();
  HandleMessage(std::move(message), now, out);
  if (out.size() > sent_before) last_sent_ = now;
  Coalesce(out, sent_before);
}

void SimWorker::Coalesce(std::vector<protocol::Message>& out, size_t from) {
  auto is_batch = [&](size_t i) {
    return std::holds_alternative<protocol::ResultBatch>(out[i].body);
  };
  uint64_t batches = 0;
  bool adjacent = false;  // most calls send no two batches in a row
  for (size_t i = from; i < out.size(); ++i) {
    if (!is_batch(i)) continue;
    ++batches;
    adjacent = adjacent || (i > from && is_batch(i - 1));
  }
  if (!head_takes_results_ || !adjacent) {
    stats_.result_messages += batches;
    return;
  }
  std::vector<protocol::Message> merged;
  std::vector<protocol::ResultBatch> run;
  size_t run_bytes = 0;
  auto flush = [&] {
    if (!run.empty()) ++stats_.result_messages;
    if (run.size() == 1) {
      merged.push_back(protocol::Message{std::move(run[0]), {}});
    } else if (!run.empty()) {
      merged.push_back(protocol::Message{protocol::Results{std::move(run)}, {}});
    }
    run.clear();
    run_bytes = 0;
  };
  for (size_t i = from; i < out.size(); ++i) {
    auto* batch = std::get_if<protocol::ResultBatch>(&out[i].body);
    if (batch == nullptr) {
      flush();
      merged.push_back(std::move(out[i]));
      continue;
    }
    size_t bytes = 0;
    for (const protocol::ResultRecord& r : batch->results) bytes += r.result.bytes.size();
    if (!run.empty() &&
        (run.size() == protocol::kMaxCoalesced || run_bytes + bytes > kCoalescedBytes)) {
      flush();
    }
    run_bytes += bytes;
    run.push_back(std::move(*batch));
  }
  flush();
  out.resize(from);
  for (protocol::Message& m : merged) out.push_back(std::move(m));
}

void SimWorker::HandleMessage(protocol::Message message, TimeMs now,
                              std::vector<protocol::Message>& out) {
  if (link_ == Link::kRegistered) {
    stats_.max_head_silence_ms = std::max(stats_.max_head_silence_ms, now - last_heard_);
  }
  last_heard_ = now;
  ++stats_.commands[protocol::CommandName(message.body)];
  std::visit(
      [&](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, protocol::Registered>) {
          HandleRegistered(m, now, out);
        } else if constexpr (std::is_same_v<T, protocol::Disconnect>) {
          // "I do not know you": register again at once on this connection.
          ++stats_.disconnects_received;
          link_ = Link::kDisconnected;
          SendRegister(now, out);
        } else if constexpr (std::is_same_v<T, protocol::CreateActor>) {
          HandleCreate(m, out);
        } else if constexpr (protocol::kIsActorCommand<T>) {
          HandleActorCommand(std::move(message), now, out);
        } else if constexpr (std::is_same_v<T, protocol::Trains>) {
          // Each entry as if it had come alone, in order.
          stats_.commands["TRAIN"] += m.trains.size();
          stats_.coalesced_trains += m.trains.size();
          for (protocol::Train& train : m.trains) {
            HandleActorCommand(protocol::Message{std::move(train), {}}, now, out);
          }
        } else if constexpr (std::is_same_v<T, protocol::Ack>) {
          protocol::ForEachAck(m, [&](const protocol::AckEntry& e) { HandleAck(e, now); });
          // TRAINs that waited for this commit (kFeatureAckTrains), after it.
          stats_.commands["TRAIN"] += m.trains.size();
          stats_.trains_in_acks += m.trains.size();
          for (protocol::Train& train : m.trains) {
            HandleActorCommand(protocol::Message{std::move(train), {}}, now, out);
          }
        } else if constexpr (std::is_same_v<T, protocol::Chunk>) {
          HandleChunk(m, std::move(message.payload), now, out);
        } else if constexpr (std::is_same_v<T, protocol::Credit>) {
          if (m.cancel) {
            chunks_out_.Cancel("", m.rid);
          } else if (chunks_out_.OnCredit("", m).ok()) {
            PumpChunks(out);
          }
        } else if constexpr (std::is_same_v<T, protocol::ReadLog>) {
          if (m.rid == 0) return;
          const bool live = actors_.count({m.trial_id, m.attempt}) > 0;
          Reply(m.rid, {m.trial_id, m.attempt}, false,
                "no output for trial " + m.trial_id + ": a simulated worker writes no logs",
                Json{{"code", "NotFound"}, {"live", live}}, {}, /*keep=*/false, out);
        }
        // HEARTBEAT: a sign of life, nothing else. CODE: a simulated worker
        // fetches no code (it never advertises @python). Worker -> head
        // commands from the head are dropped.
      },
      message.body);
}

void SimWorker::HandleCreate(const protocol::CreateActor& m, std::vector<protocol::Message>& out) {
  const ActorKey key{m.trial_id, m.attempt};
  if (!AcceptOnce(m.rid, key, false, out)) return;
  if (std::find(options_.trainables.begin(), options_.trainables.end(), m.trainable) ==
      options_.trainables.end()) {
    std::string hosted;
    for (const std::string& name : options_.trainables) {
      hosted += (hosted.empty() ? "" : ", ") + name;
    }
    Refuse(false, m.rid, key,
           "unknown trainable '" + m.trainable + "' (this worker has: " + hosted + ")", out);
    return;
  }
  if (actors_.count(key) > 0) {
    Refuse(false, m.rid, key, ExistsError(key), out);
    return;
  }
  Actor& a = actors_[key];
  a.trainable = m.trainable;
  a.config = m.config.is_null() ? Json::object() : m.config;
  if (m.rid != 0) a.rids.push_back(m.rid);
  Reply(m.rid, key, true, {}, Json::object(), {}, /*keep=*/true, out);
}

void SimWorker::HandleActorCommand(protocol::Message message, TimeMs now,
                                   std::vector<protocol::Message>& out) {
  uint64_t rid = 0;
  ActorKey key;
  bool is_train = false;
  bool is_stop = false;
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (protocol::kIsActorCommand<T>) {
          rid = m.rid;
          key = {m.trial_id, m.attempt};
          is_train = std::is_same_v<T, protocol::Train>;
          is_stop = std::is_same_v<T, protocol::Stop>;
        }
      },
      message.body);
  if (!AcceptOnce(rid, key, is_train, out)) return;
  auto it = actors_.find(key);
  if (it == actors_.end()) {
    Refuse(is_train, rid, key, NoActorError(key), out);
    return;
  }
  Actor& a = it->second;
  if (a.stopping) {
    Refuse(
        is_train, rid, key,
        "actor for trial " + key.first + " attempt " + std::to_string(key.second) + " is stopping",
        out);
    return;
  }
  if (is_stop) {
    a.stopping = true;
    // A STOP cancels a RESTORE whose checkpoint is still arriving, and the
    // commands waiting behind it; then it runs.
    if (!a.queue.empty() && WaitsForPayload(a.queue.front())) {
      const std::string error = "cancelled by a STOP while its checkpoint was arriving";
      while (!a.queue.empty()) {
        protocol::Message m = std::move(a.queue.front());
        a.queue.pop_front();
        if (const auto* r = std::get_if<protocol::Restore>(&m.body); r && r->payload_bytes > 0) {
          chunks_in_.Cancel("", r->rid);
          Emit(protocol::Message{protocol::Credit{r->rid, 0, /*cancel=*/true}, {}}, out);
        }
        RefuseQueued(m, key, error, out);
      }
    }
  }
  if (auto* r = std::get_if<protocol::Restore>(&message.body); r && r->payload_bytes > 0) {
    protocol::Message header = message;  // the assembler keeps a copy until the payload is whole
    const Status st = chunks_in_.Expect("", std::move(header));
    if (!st.ok()) {
      Refuse(false, rid, key, "RESTORE payload refused: " + st.message(), out);
      return;
    }
  }
  a.queue.push_back(std::move(message));
  if (a.queue.size() == 1) Drain(key, now, out);
}

void SimWorker::HandleChunk(const protocol::Chunk& m, std::string bytes, TimeMs now,
                            std::vector<protocol::Message>& out) {
  auto result = chunks_in_.OnChunk("", m, bytes);
  if (auto* refusal = std::get_if<protocol::ChunkAssembler::Refusal>(&result)) {
    if (!refusal->header) return;  // no such transfer: dropped
    const auto& r = std::get<protocol::Restore>(refusal->header->body);
    Emit(protocol::Message{protocol::Credit{r.rid, 0, /*cancel=*/true}, {}}, out);
    ActorKey key{r.trial_id, r.attempt};
    auto it = actors_.find(key);
    if (it == actors_.end()) return;
    EraseQueuedRestore(it->second, r.rid);
    Refuse(false, r.rid, key, "RESTORE payload refused: " + refusal->error.message(), out);
    Drain(key, now, out);
    return;
  }
  auto& progress = std::get<protocol::ChunkAssembler::Progress>(result);
  Emit(protocol::Message{progress.credit, {}}, out);
  if (!progress.done) return;
  const auto& r = std::get<protocol::Restore>(progress.done->body);
  ActorKey key{r.trial_id, r.attempt};
  auto it = actors_.find(key);
  if (it == actors_.end()) return;
  for (protocol::Message& queued : it->second.queue) {
    auto* qr = std::get_if<protocol::Restore>(&queued.body);
    if (qr != nullptr && qr->rid == r.rid) {
      queued.payload = std::move(progress.done->payload);
      qr->payload_bytes = 0;  // whole now
      break;
    }
  }
  Drain(key, now, out);
}

void SimWorker::HandleAck(const protocol::AckEntry& m, TimeMs now) {
  const ActorKey key{m.trial_id, m.attempt};
  auto a = actors_.find(key);
  if (a != actors_.end()) a->second.acked_seq = std::max(a->second.acked_seq, m.seq);
  auto it = outbox_.find(key);
  if (it == outbox_.end()) return;
  auto& entries = it->second;
  while (!entries.empty() && entries.front().watermark <= m.seq) {
    const OutboxEntry& e = entries.front();
    stats_.results_acked += e.batch.results.size();
    if (e.first_sent) {
      const float ms = static_cast<float>(now - *e.first_sent);
      for (size_t i = 0; i < e.batch.results.size(); ++i) stats_.ack_latency_ms.push_back(ms);
    }
    entries.pop_front();
  }
  // A live actor's entry stays, empty, for its next batch: erased and made
  // again per result it was a map node and a deque per result, 5% of the
  // fleet's CPU. A gone actor's (stopped, or RESET to a new key) goes.
  if (entries.empty() && a == actors_.end()) outbox_.erase(it);
}

// ---- actors ----

bool SimWorker::WaitsForPayload(const protocol::Message& m) {
  const auto* r = std::get_if<protocol::Restore>(&m.body);
  return r != nullptr && r->payload_bytes > 0;
}

void SimWorker::EraseQueuedRestore(Actor& a, uint64_t rid) {
  for (auto qi = a.queue.begin(); qi != a.queue.end(); ++qi) {
    const auto* queued = std::get_if<protocol::Restore>(&qi->body);
    if (queued != nullptr && queued->rid == rid) {
      a.queue.erase(qi);
      return;
    }
  }
}

void SimWorker::RefuseQueued(const protocol::Message& m, const ActorKey& key,
                             const std::string& error, std::vector<protocol::Message>& out) {
  std::visit(
      [&](const auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (protocol::kIsActorCommand<T>) {
          Refuse(std::is_same_v<T, protocol::Train>, c.rid, key, error, out);
        }
      },
      m.body);
}

void SimWorker::Drain(const ActorKey& key, TimeMs now, std::vector<protocol::Message>& out) {
  auto it = actors_.find(key);
  if (it == actors_.end()) return;
  Actor& a = it->second;
  while (!a.queue.empty()) {
    protocol::Message& front = a.queue.front();
    if (std::holds_alternative<protocol::Train>(front.body)) {
      if (!a.step_due) {
        a.train_started = now;
        a.batch.clear();
        a.step_due = now + StepDuration();
        StepsChanged();
      }
      return;  // stepping; Step() pops it when the batch is done
    }
    if (WaitsForPayload(front)) return;

    protocol::Message m = std::move(front);
    a.queue.pop_front();
    if (auto* s = std::get_if<protocol::Save>(&m.body)) {
      checkpoint::CheckpointEnvelope env;
      env.trainable = a.trainable;
      env.trial_id = key.first;
      env.iteration = a.iteration;
      env.time_total_s = a.time_total_s;
      // Deterministic bytes: the head stores them opaque; a RESTORE checks them.
      env.data.assign(options_.checkpoint_bytes, static_cast<char>('a' + a.iteration % 26));
      std::string bytes = checkpoint::EncodeEnvelope(env);
      Json data{{"iteration", a.iteration}, {"bytes", bytes.size()}, {"storage", s->storage}};
      if (bytes.size() <= protocol::kInlinePayloadBytes) {
        stats_.checkpoint_bytes_saved += bytes.size();
      }
      Reply(s->rid, key, true, {}, std::move(data), std::move(bytes), /*keep=*/false, out);
    } else if (auto* r = std::get_if<protocol::Restore>(&m.body)) {
      auto env = checkpoint::DecodeEnvelopeView(m.payload);
      if (m.payload.empty()) {
        Refuse(false, r->rid, key, "restore failed: RESTORE carries no checkpoint payload", out);
      } else if (!env.ok()) {
        Refuse(false, r->rid, key, "restore failed: " + env.status().message(), out);
      } else if (env->trainable != a.trainable) {
        Refuse(false, r->rid, key,
               "restore failed: checkpoint is of trainable '" + env->trainable +
                   "', this actor runs '" + a.trainable + "'",
               out);
      } else {
        ++stats_.restores;
        a.iteration = env->iteration;
        a.time_total_s = env->time_total_s;
        a.iterations_since_restore = 0;
        a.time_since_restore = 0;
        Reply(r->rid, key, true, {}, Json{{"iteration", a.iteration}}, {}, /*keep=*/true, out);
      }
    } else if (auto* reset = std::get_if<protocol::Reset>(&m.body)) {
      const ActorKey new_key{reset->new_trial_id, reset->new_attempt};
      if (options_.refuse_reset) {
        Reply(reset->rid, key, true, {}, Json{{"reset", false}}, {}, /*keep=*/true, out);
      } else if (actors_.count(new_key) > 0) {
        Refuse(false, reset->rid, key, ExistsError(new_key), out);
      } else {
        // The actor becomes the new key with zeroed counters; the old key's
        // unacknowledged results stay in the outbox under the old key.
        // Commands queued behind the RESET named the old key: no actor now.
        std::deque<protocol::Message> behind = std::move(a.queue);
        Actor moved;
        moved.trainable = a.trainable;
        moved.config = reset->config.is_null() ? Json::object() : reset->config;
        moved.rids = std::move(a.rids);
        const uint64_t rid = reset->rid;
        actors_.erase(it);
        StepsChanged();
        if (auto o = outbox_.find(key); o != outbox_.end() && o->second.empty()) outbox_.erase(o);
        CHECK(actors_.emplace(new_key, std::move(moved)).second);
        Reply(rid, new_key, true, {}, Json{{"reset", true}}, {}, /*keep=*/true, out);
        for (const protocol::Message& later : behind)
          RefuseQueued(later, key, NoActorError(key), out);
        return;
      }
    } else if (auto* stop = std::get_if<protocol::Stop>(&m.body)) {
      const uint64_t rid = stop->rid;
      // Later commands were refused ("is stopping"); the outbox goes with it.
      outbox_.erase(key);
      actors_.erase(it);
      StepsChanged();
      Reply(rid, key, true, {}, Json::object(), {}, /*keep=*/true, out);
      return;
    } else if (auto* e = std::get_if<protocol::Export>(&m.body)) {
      Refuse(false, e->rid, key, "export failed: the simulated trainable exports no formats", out);
    }
  }
}

TimeMs SimWorker::StepDuration() {
  const double jitter = std::uniform_real_distribution<double>(-1, 1)(rng_) * options_.step_jitter;
  return std::max<TimeMs>(0, std::llround(static_cast<double>(options_.step_ms) * (1 + jitter)));
}

protocol::RawResult SimWorker::MakeResult(const ActorKey& key, Actor& a, double step_s,
                                          bool& done) const {
  if (!a.base_score) {
    // A score that depends on the config and improves with iterations, so that
    // schedulers have something to compare: numeric config values near 0.5 are best.
    double base = 0;
    if (a.config.is_object()) {
      for (const auto& [k, v] : a.config.items()) {
        if (v.is_number()) base -= (v.get<double>() - 0.5) * (v.get<double>() - 0.5);
      }
      auto iters = a.config.find("iterations");
      if (iters != a.config.end() && iters->is_number()) a.iterations_cap = iters->get<double>();
    }
    a.base_score = base;
  }
  const double score = *a.base_score + 1.0 - 1.0 / static_cast<double>(1 + a.iteration);
  done = a.iterations_cap && static_cast<double>(a.iteration) >= *a.iterations_cap;
  // Packed without a JSON document (as a worker packs its auto-filled
  // fields); sorted by key, as PackWithAutoFields requires.
  using Field = protocol::AutoField;
  const Field fields[] = {
      {"done", done},
      {"hostname", std::string_view(options_.host)},
      {"iterations_since_restore", a.iterations_since_restore},
      {"loss", -score},
      {"pid", static_cast<int64_t>(options_.pid)},
      {"score", score},
      {"time_since_restore", a.time_since_restore},
      {"time_this_iter_s", step_s},
      {"time_total_s", a.time_total_s},
      {"timestamp", static_cast<int64_t>(WallSeconds())},
      {"training_iteration", a.iteration},
      {"trial_id", std::string_view(key.first)},
  };
  static const Json kEmpty = Json::object();
  return protocol::PackWithAutoFields(kEmpty, fields);
}

void SimWorker::Step(const ActorKey& key, TimeMs now, std::vector<protocol::Message>& out) {
  auto it = actors_.find(key);
  CHECK(it != actors_.end());
  Actor& a = it->second;
  CHECK(!a.queue.empty());
  const auto& train = std::get<protocol::Train>(a.queue.front().body);
  // The nominal step time goes into the result; the jitter only moves when
  // the step ends.
  const double step_s = static_cast<double>(options_.step_ms) / 1000.0;
  bool failed = false;
  bool batch_over = false;
  if (options_.step_failure_rate > 0 &&
      std::uniform_real_distribution<double>(0, 1)(rng_) < options_.step_failure_rate) {
    failed = true;
    batch_over = true;
    ++stats_.step_failures;
  } else {
    ++a.iteration;
    ++a.iterations_since_restore;
    a.time_total_s += step_s;
    a.time_since_restore += step_s;
    bool done = false;
    protocol::RawResult result = MakeResult(key, a, step_s, done);
    a.batch.push_back(protocol::ResultRecord{a.next_seq++, std::move(result)});
    const double elapsed_s = static_cast<double>(now - a.train_started) / 1000.0;
    batch_over =
        done || a.stopping ||
        static_cast<int64_t>(a.batch.size()) >= std::max<int64_t>(1, train.buffer_length) ||
        train.buffer_time_s <= 0 || elapsed_s >= train.buffer_time_s;
  }
  StepsChanged();
  if (!batch_over) {
    a.step_due = now + StepDuration();
    return;
  }
  a.step_due.reset();
  OutboxEntry entry;
  entry.batch.rid = train.rid;
  entry.batch.trial_id = key.first;
  entry.batch.attempt = key.second;
  entry.batch.results = std::move(a.batch);
  a.batch.clear();
  if (failed) {
    entry.batch.failed = true;
    entry.batch.error = "step of iteration " + std::to_string(a.iteration + 1) +
                        " failed: simulated failure (fleet --step-failure-rate)";
  }
  entry.watermark = a.next_seq - 1;
  const uint64_t rid = train.rid;
  a.queue.pop_front();
  Answered(rid, nullptr);  // its batch is in the outbox
  auto& entries = outbox_[key];
  entries.push_back(std::move(entry));
  SendBatch(entries.back(), now, /*replay=*/false, out);
  Drain(key, now, out);
}

}  // namespace ztune::fleet
