// WorkerRuntime, actors: creating them, routing head commands to their runner
// threads, turning runner events into replies and result batches (kept in the
// outbox until acknowledged), and stopping or abandoning them.
#include "worker/worker_runtime.h"

#include <signal.h>

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "common/sha256.h"
#include "worker/actor_command_info.h"
#include "worker/submitted_code_trainable.h"
#include "worker/trial_log.h"
#include "worker/trial_output_index.h"

namespace ztune::worker {
namespace {

protocol::Reply MakeReply(uint64_t rid, const ActorKey& key, bool ok, std::string error,
                          Json data) {
  protocol::Reply r;
  r.rid = rid;
  r.trial_id = key.trial_id;
  r.attempt = key.attempt;
  r.ok = ok;
  r.error = std::move(error);
  r.data = data.is_null() ? Json::object() : std::move(data);
  return r;
}

}  // namespace

bool WorkerRuntime::AcceptOnce(CommandKind kind, uint64_t rid, const ActorKey& key) {
  if (rid == 0) return true;  // no answer wanted: nothing to deduplicate
  switch (recent_.Accept(rid, key)) {
    case RecentRequests::Seen::kNew:
      return true;
    case RecentRequests::Seen::kOwed:
      spdlog::debug("request {} for {} again: still being worked on", rid, key.ToString());
      return false;
    case RecentRequests::Seen::kAnswered:
      if (const protocol::Message* answer = recent_.AnswerOf(rid)) {
        spdlog::debug("request {} for {} again: answering it again", rid, key.ToString());
        SendOrHold(*answer);
        return false;
      }
      // A TRAIN's results wait in the outbox until acknowledged.
      if (kind == CommandKind::kTrain) return false;
      // A SAVE (its checkpoint is not kept): save again.
      recent_.Reopen(rid);
      return true;
  }
  return true;
}

Result<std::unique_ptr<Trainable>> WorkerRuntime::MakeTrainable(const protocol::CreateActor& m) {
  if (m.trainable != protocol::kSubmittedPythonTrainable) return registry_.Create(m.trainable);
  if (!options_.allow_submitted_code) {
    return Status::PermissionDenied("worker " + options_.worker_id +
                                    " does not run submitted code (ztune-worker "
                                    "--allow-submitted-code turns it on)");
  }
  if (!IsSha256Hex(m.code) || m.entry.empty()) {
    return Status::InvalidArgument("submitted code needs an entry and a sha256 code address");
  }
  code_cache_->Want(m.code);
  SendCodeRequests(clock_.NowMs());
  return std::unique_ptr<Trainable>(std::make_unique<SubmittedCodeTrainable>(
      code_cache_, m.code, m.entry,
      SubmittedCodeOptions{options_.python, options_.python_path,
                           options_.submitted_code_stop_grace_ms}));
}

void WorkerRuntime::HandleCreateActor(const protocol::CreateActor& m) {
  ActorKey key{m.trial_id, m.attempt};
  if (!AcceptOnce(CommandKind::kSetup, m.rid, key)) return;
  if (actors_.count(key) > 0) {
    SendReply(m.rid, key, false,
              "actor for " + key.ToString() + " already exists on worker " + options_.worker_id);
    return;
  }
  auto trainable = MakeTrainable(m);
  if (!trainable.ok()) {
    SendReply(m.rid, key, false, trainable.status().message());
    return;
  }
  std::shared_ptr<ProcessGroup> group = (*trainable)->process_group();
  uint64_t serial = ++next_serial_;
  auto runner = std::make_shared<ActorRunner>(serial, m, std::move(trainable).value(), host_,
                                              events_);
  ActorSlot slot;
  slot.serial = serial;
  slot.runner = runner;
  slot.trainable = m.trainable;
  slot.group = std::move(group);
  if (!runner->runs_inline()) {
    try {
      slot.thread = std::thread([runner] { runner->Run(); });
    } catch (const std::system_error& e) {
      SendReply(m.rid, key, false, std::string("cannot start the actor thread: ") + e.what());
      return;
    }
  }
  slot.pending.push_back({m.rid, CommandKind::kSetup, key});
  serial_keys_[serial] = key;
  actors_.emplace(key, std::move(slot));
  spdlog::debug("created actor {} ({}{}) serial {}", key.ToString(), m.trainable,
                runner->runs_inline() ? ", inline" : "", serial);
  if (runner->runs_inline()) RunInline(runner);
}

void WorkerRuntime::RunInline(std::shared_ptr<ActorRunner> runner) {
  for (RunnerEvent& event : runner->RunQueuedInline()) HandleRunnerEvent(std::move(event));
}

void WorkerRuntime::HandleActorCommand(protocol::Message message) {
  const auto [kind, rid, key] = DescribeActorCommand(message);
  auto it = actors_.find(key);
  if (it == actors_.end()) {
    SendFailure(kind, rid, key, NoActorError(key));
    return;
  }
  ActorSlot& slot = it->second;
  if (slot.stop_deadline && kind != CommandKind::kStop) {
    SendFailure(kind, rid, key, "actor for " + key.ToString() + " is stopping");
    return;
  }
  if (kind == CommandKind::kReset) {
    const auto& reset = std::get<protocol::Reset>(message.body);
    ActorKey new_key{reset.new_trial_id, reset.new_attempt};
    if (new_key != key && actors_.count(new_key) > 0) {
      SendFailure(kind, rid, key,
                  "cannot reset to " + new_key.ToString() + ": that actor already exists");
      return;
    }
  }
  if (kind == CommandKind::kStop && !slot.stop_deadline) {
    const auto& stop = std::get<protocol::Stop>(message.body);
    slot.kill_after_ms = std::max<int64_t>(0, stop.kill_after_ms);
    slot.stop_deadline = clock_.NowMs() + slot.kill_after_ms;
  }
  slot.pending.push_back({rid, kind, key});
  slot.runner->Enqueue(std::move(message));
  if (slot.runner->runs_inline()) RunInline(slot.runner);
}

void WorkerRuntime::HandleAck(const protocol::Ack& m) {
  protocol::ForEachAck(m, [&](const protocol::AckEntry& e) { HandleAckEntry(e); });
}

void WorkerRuntime::HandleAckEntry(const protocol::AckEntry& m) {
  ActorKey key{m.trial_id, m.attempt};
  // An actor that ended (or never was): nothing to track, and a key made for
  // it here would never be erased.
  if (actors_.count(key) == 0 && outbox_.count(key) == 0) return;
  uint64_t& acked = acked_seq_[key];
  acked = std::max(acked, m.seq);
  auto it = outbox_.find(key);
  if (it == outbox_.end()) return;
  auto& entries = it->second;
  while (!entries.empty() && entries.front().watermark <= acked) entries.pop_front();
  for (auto& entry : entries) {
    auto& results = entry.batch.results;
    results.erase(std::remove_if(results.begin(), results.end(),
                                 [&](const protocol::ResultRecord& r) { return r.seq <= acked; }),
                  results.end());
  }
  if (entries.empty()) outbox_.erase(it);
}

void WorkerRuntime::HandleRunnerEvents() {
  for (auto& event : events_->Drain()) HandleRunnerEvent(std::move(event));
}

void WorkerRuntime::HandleRunnerEvent(RunnerEvent event) {
  auto sk = serial_keys_.find(event.actor_serial);
  if (sk == serial_keys_.end()) return;  // an abandoned actor: its output is dropped
  ActorKey slot_key = sk->second;
  auto it = actors_.find(slot_key);
  if (it == actors_.end()) return;
  ActorSlot& slot = it->second;
  for (auto p = slot.pending.begin(); p != slot.pending.end(); ++p) {
    if (p->rid == event.rid && p->kind == event.kind) {
      slot.pending.erase(p);
      break;
    }
  }
  slot.iteration = event.iteration;
  const ActorKey& key = event.key;

  switch (event.kind) {
    case CommandKind::kTrain: {
      protocol::ResultBatch batch;
      batch.rid = event.rid;
      batch.trial_id = key.trial_id;
      batch.attempt = key.attempt;
      batch.failed = !event.ok;
      batch.error = event.error;
      // A fenced TRAIN (the actor was re-keyed) has no results and no seq.
      if (key == slot_key) {
        for (auto& r : event.results) {
          batch.results.push_back({slot.next_seq++, std::move(r)});
        }
        auto& entries = outbox_[key];
        entries.push_back(OutboxEntry{std::move(batch), slot.next_seq - 1});
        recent_.Answered(event.rid, nullptr);  // the outbox keeps it
        SendBatch(entries.back().batch);
      } else {
        protocol::Message message{batch, {}};
        recent_.Answered(event.rid, &message);
        SendBatch(batch);
      }
      break;
    }
    case CommandKind::kReset: {
      if (event.new_key && key == slot_key) {
        ActorKey new_key = *event.new_key;
        if (new_key != slot_key && actors_.count(new_key) > 0) {
          // A CREATE_ACTOR for the new key raced the RESET: keep the created
          // actor, give up on this one (it is no longer the old trial's).
          std::string error = "reset to " + new_key.ToString() + " collided with a live actor";
          SendReply(event.rid, key, false, error);
          slot.kill_after_ms = 0;
          KillActor(slot_key);
          return;
        }
        auto node = actors_.extract(it);
        node.key() = new_key;
        node.mapped().next_seq = 1;
        node.mapped().iteration = 0;
        // A STOP queued for the old key behind this RESET is fenced by the
        // runner ("no actor"); it must not kill the actor under its new key.
        bool stop_for_new_key = false;
        for (const auto& p : node.mapped().pending) {
          if (p.kind == CommandKind::kStop && p.key == new_key) stop_for_new_key = true;
        }
        if (!stop_for_new_key) node.mapped().stop_deadline.reset();
        actors_.insert(std::move(node));
        serial_keys_[event.actor_serial] = new_key;
        outbox_.erase(new_key);
        acked_seq_.erase(new_key);
        SendReply(event.rid, new_key, true, "", event.data);
        return;
      }
      SendReply(event.rid, key, event.ok, event.error, event.data);
      break;
    }
    case CommandKind::kStop:
      // A STOP that ended the actor is answered by FinishActor below; one
      // that did not was fenced (queued for a key the actor gave up in a RESET).
      if (!event.exited) SendReply(event.rid, key, event.ok, event.error);
      break;
    default:
      if (event.large_payload != nullptr) {
        SendLargeReply(event.rid, key, std::move(event.data), std::move(event.large_payload));
      } else {
        SendReply(event.rid, key, event.ok, event.error, event.data, std::move(event.payload));
      }
      break;
  }
  if (event.exited) FinishActor(slot_key, event);
}

void WorkerRuntime::FinishActor(ActorKey key, const RunnerEvent& last) {
  auto it = actors_.find(key);
  if (it == actors_.end()) return;
  ActorSlot slot = std::move(it->second);
  actors_.erase(it);
  serial_keys_.erase(slot.serial);
  // The runner posted its last event and is returning: this join is short.
  if (slot.thread.joinable()) slot.thread.join();
  const bool stopped = last.kind == CommandKind::kStop;
  if (stopped) SendReply(last.rid, key, true, "", Json::object());
  for (const auto& p : slot.pending) {
    if (stopped && p.kind == CommandKind::kStop) {
      SendReply(p.rid, key, true, "", Json::object());
    } else {
      SendFailure(p.kind, p.rid, key,
                  "actor for " + key.ToString() + " is gone: " +
                      (stopped ? std::string("it was stopped") : last.error));
    }
  }
  if (stopped) {
    // The head is done with this actor: unacknowledged results will never be.
    outbox_.erase(key);
    acked_seq_.erase(key);
  }
  spdlog::debug("actor {} ended ({})", key.ToString(), stopped ? "stopped" : last.error);
}

void WorkerRuntime::KillActor(ActorKey key) {
  auto it = actors_.find(key);
  if (it == actors_.end()) return;
  ActorSlot slot = std::move(it->second);
  actors_.erase(it);
  serial_keys_.erase(slot.serial);
  std::string error = "actor did not stop within " + std::to_string(slot.kill_after_ms) +
                      " ms; killed";
  spdlog::warn("{}: {}", key.ToString(), error);
  slot.runner->CurrentLog()->Write("Failure: " + error);
  slot.runner->Abandon();
  if (slot.thread.joinable()) slot.thread.detach();
  outbox_.erase(key);
  acked_seq_.erase(key);
  if (slot.group != nullptr && !slot.group->Empty()) {
    // The runner thread is abandoned, but the trainable's processes are ours
    // to end: SIGTERM now, SIGKILL after the grace period, and the head hears
    // of the kill (and frees the actor's resources) once none is left.
    // It had its grace since the SIGTERM (CheckStopDeadlines); a kill that
    // came without one (a RESET collision, shutdown) gets it now.
    DyingActor dying;
    dying.key = key;
    dying.group = slot.group;
    dying.pending = std::move(slot.pending);
    dying.error = error;
    dying.iteration = slot.iteration;
    dying.kill_at = clock_.NowMs() + (slot.sigterm_sent ? 0 : slot.group->grace_ms());
    if (!slot.sigterm_sent) slot.group->Signal(SIGTERM);
    dying_.push_back(std::move(dying));
    CheckDyingActors(clock_.NowMs());
    return;
  }
  AnswerKilled(key, slot.pending, error);
}

void WorkerRuntime::AnswerKilled(const ActorKey& key, const std::deque<PendingCommand>& pending,
                                 const std::string& error) {
  for (const auto& p : pending) {
    if (p.kind == CommandKind::kStop) {
      SendReply(p.rid, key, false, error);
    } else {
      SendFailure(p.kind, p.rid, key, "actor for " + key.ToString() + " was killed: " + error);
    }
  }
}

void WorkerRuntime::CheckDyingActors(TimeMs now) {
  constexpr int64_t kGiveUpMs = 10000;
  for (auto it = dying_.begin(); it != dying_.end();) {
    DyingActor& d = *it;
    if (d.group->Empty()) {
      AnswerKilled(d.key, d.pending, d.error);
      it = dying_.erase(it);
      continue;
    }
    if (!d.killed && now >= d.kill_at) {
      spdlog::warn("{}: its processes outlived the grace period after SIGTERM; SIGKILL",
                   d.key.ToString());
      d.group->Signal(SIGKILL);
      d.killed = true;
    }
    if (now >= d.kill_at + kGiveUpMs) {
      spdlog::error(
          "{}: process group {} still has members {} ms after SIGKILL; reporting the "
          "actor gone anyway",
          d.key.ToString(), d.group->pgid(), kGiveUpMs);
      AnswerKilled(d.key, d.pending, d.error + "; some of its processes could not be ended");
      it = dying_.erase(it);
      continue;
    }
    ++it;
  }
}

void WorkerRuntime::CheckStopDeadlines(TimeMs now) {
  std::vector<ActorKey> expired;
  for (auto& [key, slot] : actors_) {
    if (!slot.stop_deadline) continue;
    if (now >= *slot.stop_deadline) {
      expired.push_back(key);
    } else if (slot.group != nullptr && !slot.sigterm_sent &&
               now >= *slot.stop_deadline - slot.group->grace_ms()) {
      // The head frees the actor's resources shortly after the STOP's
      // deadline: its processes get SIGTERM one grace period before it, so
      // that the SIGKILL at the deadline leaves nothing behind.
      slot.group->Signal(SIGTERM);
      slot.sigterm_sent = true;
    }
  }
  for (const auto& key : expired) KillActor(key);
}

std::string WorkerRuntime::NoActorError(const ActorKey& key) const {
  return "no actor for " + key.ToString() + " on worker " + options_.worker_id;
}

void WorkerRuntime::HandleReadLog(const protocol::ReadLog& m) {
  if (m.rid == 0) return;
  const ActorKey key{m.trial_id, m.attempt};
  const uint64_t limit =
      std::min(m.limit == 0 ? protocol::kMaxReadLogBytes : m.limit, protocol::kMaxReadLogBytes);
  // Liveness before the read: an actor that ends in between has written
  // everything by the time the file is read, so "not live" means complete.
  bool live = actors_.count(key) > 0;
  for (const DyingActor& d : dying_) live = live || d.key == key;
  auto slice = ReadOutputSection(TrialDir(options_.work_dir, m.trial_id), m.stream, m.attempt,
                                 m.offset, limit);
  protocol::Reply r;
  r.rid = m.rid;
  r.trial_id = m.trial_id;
  r.attempt = m.attempt;
  r.ok = slice.ok();
  if (!slice.ok()) {
    r.error = slice.status().message();
    r.data = Json{{"code", StatusCodeName(slice.status().code())}, {"live", live}};
    SendOrHold(protocol::Message{std::move(r), {}});
    return;
  }
  r.data = Json{{"size", slice->size}, {"live", live}};
  SendOrHold(protocol::Message{std::move(r), std::move(slice->bytes)});
}

void WorkerRuntime::SendReply(uint64_t rid, const ActorKey& key, bool ok, std::string error,
                              Json data, std::string payload) {
  if (rid == 0) return;  // internal command (shutdown)
  protocol::Message message{MakeReply(rid, key, ok, std::move(error), std::move(data)),
                            std::move(payload)};
  recent_.Answered(rid, message.payload.empty() ? &message : nullptr);
  SendOrHold(std::move(message));
}

void WorkerRuntime::SendLargeReply(uint64_t rid, const ActorKey& key, Json data,
                                   std::unique_ptr<protocol::PayloadSource> payload) {
  if (rid == 0) return;
  // Answered, its checkpoint not kept (as SendReply does for any payload).
  recent_.Answered(rid, nullptr);
  SendOrHold(HeldReply{protocol::Message{MakeReply(rid, key, true, {}, std::move(data)), {}},
                       std::move(payload)});
}

void WorkerRuntime::SendFailure(CommandKind kind, uint64_t rid, const ActorKey& key,
                                std::string error) {
  if (rid == 0) return;
  if (kind != CommandKind::kTrain) {
    SendReply(rid, key, false, std::move(error));
    return;
  }
  protocol::ResultBatch b;
  b.rid = rid;
  b.trial_id = key.trial_id;
  b.attempt = key.attempt;
  b.failed = true;
  b.error = std::move(error);
  protocol::Message message{std::move(b), {}};
  recent_.Answered(rid, &message);  // a refusal is not kept in the outbox
  SendOrHold(std::move(message));
}

void WorkerRuntime::SendBatch(const protocol::ResultBatch& batch) {
  // Batches with results live in the outbox until ACKed and are re-sent after
  // registration; only send now when the link is up.
  if (shutting_down_) return;
  if (link_ == Link::kRegistered) QueueBatch(batch);
}

void WorkerRuntime::ResendOutbox() {
  size_t n = 0;
  // Actors in key order, each actor's batches in order.
  for (const auto* actor : InKeyOrder(outbox_)) {
    for (const auto& entry : actor->second) {
      QueueBatch(entry.batch);
      ++n;
    }
  }
  FlushResults();
  if (n > 0) spdlog::info("re-sent {} unacknowledged result batch(es)", n);
}

}  // namespace ztune::worker
