#include "head/trial_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>

#include <spdlog/spdlog.h>

#include "storage/keys.h"

namespace ztune::head {
namespace {

std::string DateString() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H-%M-%S", &tm);
  return buf;
}

// Score of a checkpoint for retention: (valid, signed score, id), higher is better.
bool BetterCheckpoint(const CheckpointRecord& a, const CheckpointRecord& b) {
  if (a.score_valid != b.score_valid) return a.score_valid;
  if (a.score_valid && a.score != b.score) return a.score > b.score;
  return a.id > b.id;  // ties go to the newer
}

}  // namespace

TrialRunner::TrialRunner(storage::Store& store, CommandSink& sink, const Clock& clock,
                         RunnerOptions options)
    : store_(store),
      sink_(sink),
      clock_(clock),
      options_(options),
      registry_(clock, options.heartbeat_ms * options.liveness),
      groups_(ledger_, clock, PlacementGroupOptions{16, options.pg_removal_delay_ms}),
      executor_(sink, clock) {
  RecomputeMaxPending();
}

// ---------------------------------------------------------------- loading

namespace {

// Reads every record of `family` as T::FromJson(JSON text), in key order.
template <class T>
Result<std::vector<T>> LoadRecords(storage::Store& store, storage::Family family) {
  std::vector<T> out;
  Status inner;
  RETURN_IF_ERROR(store.Scan(family, "", [&](std::string_view key, std::string_view v) {
    Json j = Json::parse(v, nullptr, false);
    auto record = j.is_discarded()
                      ? Result<T>(Status::Corruption("record is not JSON"))
                      : T::FromJson(j);
    if (!record.ok()) {
      inner = Status::Corruption(std::string(storage::FamilyName(family)) + " record '" +
                                 std::string(key) + "': " + record.status().message());
      return false;
    }
    out.push_back(std::move(record).value());
    return true;
  }));
  RETURN_IF_ERROR(inner);
  return out;
}

}  // namespace

Status TrialRunner::Load() {
  ASSIGN_OR_RETURN(std::vector<Experiment> experiments,
                   LoadRecords<Experiment>(store_, storage::Family::kExperiments));
  for (Experiment& e : experiments) {
    auto space = SearchSpace::Parse(e.spec.param_space);
    if (!space.ok()) {
      return Status::Corruption("experiment " + e.experiment_id + ": " + space.status().message());
    }
    spaces_.emplace(e.experiment_id, std::move(space).value());
    uint64_t n = std::strtoull(e.experiment_id.c_str() + 1, nullptr, 10);
    next_experiment_ = std::max(next_experiment_, n + 1);
    std::string id = e.experiment_id;
    experiments_.emplace(id, std::move(e));
  }
  ASSIGN_OR_RETURN(std::vector<Trial> loaded, LoadRecords<Trial>(store_, storage::Family::kTrials));
  std::sort(loaded.begin(), loaded.end(), [](const Trial& a, const Trial& b) { return a.seq < b.seq; });
  for (Trial& t : loaded) {
    auto eit = experiments_.find(t.experiment_id);
    if (eit == experiments_.end()) {
      return Status::Corruption("trial " + t.trial_id + " belongs to unknown experiment " +
                                t.experiment_id);
    }
    Experiment& e = eit->second;
    next_seq_ = std::max(next_seq_, t.seq + 1);
    const TrialStatus stored_status = t.status;
    // A RUNNING trial's actor is gone with the old head, and a PAUSED trial's
    // memory checkpoint too: both restart from their newest persistent
    // checkpoint (Ray's resume of RUNNING trials).
    t.status = TrialStatus::kPending;  // SetStatus below does the accounting
    std::string id = t.trial_id;
    e.trial_ids.push_back(id);
    Trial& stored = trials_.emplace(id, std::move(t)).first->second;
    e.counts[TrialStatus::kPending]++;
    e.live_trials++;
    num_pending_++;
    if (IsFinished(stored_status)) {
      SetStatus(stored, stored_status);
      dirty_trials_.erase(id);
    } else if (stored_status == TrialStatus::kRunning && !stored.actor_worker.empty()) {
      // Its worker may still host the live actor: wait for it to re-attach.
      SetStatus(stored, TrialStatus::kRunning);
      dirty_trials_.erase(id);
      TimeMs grace = options_.reattach_grace_ms > 0
                         ? options_.reattach_grace_ms
                         : 2 * options_.heartbeat_ms * options_.liveness;
      stored.reattach_deadline = clock_.NowMs() + grace;
      awaiting_reattach_.insert(id);
    } else if (stored_status == TrialStatus::kPaused && stored.held) {
      SetStatus(stored, TrialStatus::kPaused);  // a user's pause outlives the head
      dirty_trials_.erase(id);
    } else {
      Enqueue(stored);
      if (stored_status != TrialStatus::kPending) MarkDirty(stored);
    }
  }
  for (auto& [id, e] : experiments_) {
    request_key_of_experiment_[id] = e.spec.resources.Key();
    if (!e.finished && !e.SearchFinished()) searching_.insert(id);
    MaybeFinishExperiment(e);
  }
  spdlog::info("loaded {} experiments and {} trials from the store", experiments_.size(),
               trials_.size());
  return Status::Ok();
}

// ---------------------------------------------------------------- workers

bool TrialRunner::IsKnownWorker(const std::string& worker_id) const {
  return registry_.FindAlive(worker_id) != nullptr;
}

void TrialRunner::HandleRegister(const protocol::Register& reg) {
  bool fresh = registry_.Register(reg);
  protocol::Registered registered;
  registered.worker_id = reg.worker_id;
  registered.heartbeat_ms = options_.heartbeat_ms;
  registered.liveness = options_.liveness;
  // Sent before anything below (re-attach TRAINs, STOPs): the worker holds
  // its replies and replays its outbox once it has this.
  sink_.SendToWorker(reg.worker_id, protocol::Message{registered, {}}, SendTiming::kAfterCommit);
  if (fresh) {
    ledger_.AddWorker(reg.worker_id, ResourceSet::FromDoubles(reg.resources), reg.gpu_ids);
    groups_.NotifyCapacityChanged();
    RecomputeMaxPending();
    spdlog::info("worker {} registered ({} on {}, pid {}): {}, {} live actors", reg.worker_id,
                 reg.name, reg.host, reg.pid, ResourceSet::FromDoubles(reg.resources).ToString(),
                 reg.live_actors.size());
  }
  for (const auto& a : reg.live_actors) {
    auto it = trials_.find(a.trial_id);
    Trial* t = it == trials_.end() ? nullptr : &it->second;
    bool ours = t != nullptr && t->has_actor && t->attempt == a.attempt &&
                t->worker_id == reg.worker_id;
    ours = ours || IsCachedActor(reg.worker_id, a.trial_id, a.attempt);
    if (!ours && t != nullptr && awaiting_reattach_.count(t->trial_id) &&
        t->attempt == a.attempt && t->actor_worker == reg.worker_id) {
      ours = Reattach(*t, reg.worker_id, a);
    }
    if (!ours && t != nullptr && !t->has_actor && a.attempt > t->attempt) {
      // An attempt the store never saw: a head that crashed between sending
      // CREATE_ACTOR (or RESET) and committing it. Never name it again, or
      // the worker, still holding or stopping that actor, refuses the new
      // one ("already exists") and a healthy trial fails.
      spdlog::info("trial {}: worker {} holds attempt {}, which was never stored; the next "
                   "start uses a later one", t->trial_id, reg.worker_id, a.attempt);
      t->attempt = a.attempt;
      MarkDirty(*t);
    }
    if (!ours) {
      // An actor the head does not own (its trial moved on, finished, or is
      // unknown after a restart): it must not keep running.
      protocol::Stop stop;  // rid 0: no reply wanted
      stop.trial_id = a.trial_id;
      stop.attempt = a.attempt;
      stop.kill_after_ms = options_.force_cleanup_ms;
      sink_.SendToWorker(reg.worker_id, protocol::Message{stop, {}}, SendTiming::kAfterCommit);
    }
  }
}

bool TrialRunner::Reattach(Trial& t, const std::string& worker_id,
                           const protocol::LiveActor& live) {
  const int64_t live_iteration = live.iteration;
  awaiting_reattach_.erase(t.trial_id);
  t.reattach_deadline = 0;
  const Experiment& e = experiments_.at(t.experiment_id);
  t.group_id = groups_.AdoptInUse(e.spec.resources, t.placement, t.trial_id);
  t.has_actor = true;
  t.worker_id = worker_id;
  actors_by_worker_[worker_id].insert(t.trial_id);
  spdlog::info("re-attached trial {} attempt {} on {} at iteration {} (actor at {})", t.trial_id,
               t.attempt, worker_id, t.iteration, live_iteration);
  // A user's pause that the crash interrupted still applies.
  if (t.held) t.pause_requested = true;
  if (live_iteration > t.iteration || live.training) {
    // The actor is ahead (its unacknowledged results come back from its
    // outbox right after REGISTERED) or mid-TRAIN (its batch will follow):
    // decide once they are stored, as the TRAIN's own reply would have.
    t.replay_until = std::max(live_iteration, t.iteration + (live.training ? 1 : 0));
    t.replay_deadline = clock_.NowMs() + 2 * options_.heartbeat_ms * options_.liveness;
    awaiting_replay_.insert(t.trial_id);
    return true;
  }
  // After the commit, so that everything follows REGISTERED.
  DriveAfterReattach(t, SendTiming::kAfterCommit);
  return true;
}

bool TrialRunner::CheckpointDue(const Trial& t) const {
  if (t.last_result.is_null() || t.iteration == 0) return false;
  const CheckpointRecord* c = t.NewestCheckpoint();
  if (c != nullptr && c->iteration >= t.iteration) return false;  // already taken
  const CheckpointPolicy& policy = experiments_.at(t.experiment_id).spec.checkpoint;
  bool done = t.last_result.value("done", false);
  return (policy.frequency > 0 && t.iteration % policy.frequency == 0) ||
         (done && policy.at_end) || t.last_result.value("should_checkpoint", false);
}

void TrialRunner::DriveAfterReattach(Trial& t, SendTiming timing) {
  awaiting_replay_.erase(t.trial_id);
  t.replay_until = 0;
  t.replay_deadline = 0;
  bool done = !t.last_result.is_null() && t.last_result.value("done", false);
  if (CheckpointDue(t)) {
    t.saving = true;
    t.stop_after_save = done;
    executor_.Save(t, "persistent", timing);
  } else if (done) {
    FinishTrial(t, TrialStatus::kTerminated);
  } else if (t.pause_requested) {
    t.pause_requested = false;
    t.pausing = true;
    executor_.Save(t, "memory", timing);
  } else {
    executor_.ContinueTraining(t, BufferFor(t), timing);
  }
}

void TrialRunner::ExpireReattachWaits() {
  if (awaiting_reattach_.empty() && awaiting_replay_.empty()) return;
  TimeMs now = clock_.NowMs();
  for (auto it = awaiting_reattach_.begin(); it != awaiting_reattach_.end();) {
    Trial& t = trials_.at(*it);
    if (t.reattach_deadline > now) {
      ++it;
      continue;
    }
    it = awaiting_reattach_.erase(it);
    spdlog::info("trial {}: worker {} did not re-attach its actor; restarting it from its "
                 "newest checkpoint", t.trial_id, t.actor_worker);
    t.reattach_deadline = 0;
    t.actor_worker.clear();
    t.placement = Placement{};
    if (t.held) {
      SetStatus(t, TrialStatus::kPaused);  // an acknowledged pause outlives the lost actor
    } else {
      SetStatus(t, TrialStatus::kPending);
      Enqueue(t);
    }
  }
  for (auto it = awaiting_replay_.begin(); it != awaiting_replay_.end();) {
    Trial& t = trials_.at(*it);
    ++it;
    if (t.replay_deadline <= now) DriveAfterReattach(t, SendTiming::kNow);
  }
}

void TrialRunner::HandleHeartbeat(const std::string& worker_id) { registry_.Touch(worker_id); }

void TrialRunner::HandleDisconnect(const std::string& worker_id, const std::string& reason) {
  if (registry_.FindAlive(worker_id) == nullptr) return;
  registry_.MarkDead(worker_id);
  OnWorkerDead(worker_id, "worker disconnected" + (reason.empty() ? "" : ": " + reason));
}

void TrialRunner::HandleUnreachable(const std::string& worker_id) {
  if (registry_.FindAlive(worker_id) == nullptr) return;
  registry_.MarkDead(worker_id);
  OnWorkerDead(worker_id, "worker unreachable");
}

Trial* TrialRunner::MutableTrial(const std::string& trial_id) {
  auto it = trials_.find(trial_id);
  return it == trials_.end() ? nullptr : &it->second;
}

Trial* TrialRunner::CurrentTrial(const std::string& trial_id, uint64_t attempt) {
  Trial* t = MutableTrial(trial_id);
  if (t == nullptr || t->attempt != attempt || !t->has_actor) return nullptr;
  return t;
}

void TrialRunner::HandleReply(const std::string& worker_id, const protocol::Reply& reply,
                              const std::string& payload) {
  registry_.Touch(worker_id);
  auto f = executor_.Take(reply.rid);
  if (!f) {
    spdlog::debug("reply to unknown or dropped request {} from {}", reply.rid, worker_id);
    return;
  }
  if (f->worker_id != worker_id) {
    spdlog::warn("reply to request {} came from {} but was sent to {}; dropped", reply.rid,
                 worker_id, f->worker_id);
    return;
  }
  if (f->type == FutureType::kStop) {
    if (!reply.ok) spdlog::warn("stop of trial {}: {}", f->trial_id, reply.error);
    OnStopDone(*f);
    return;
  }
  if (f->type == FutureType::kExport) {
    Trial* owner = MutableTrial(f->trial_id);
    if (owner == nullptr) return;
    if (!reply.ok) {
      spdlog::warn("export of trial {} failed: {}", f->trial_id, reply.error);
      owner->exports = Json{{"error", reply.error}};
    } else {
      owner->exports = reply.data.is_object() && reply.data.contains("exports")
                           ? reply.data["exports"]
                           : Json::object();
    }
    MarkDirty(*owner);
    return;
  }
  Trial* t = CurrentTrial(f->trial_id, f->attempt);
  if (t == nullptr) return;  // stale attempt: fenced
  switch (f->type) {
    case FutureType::kCreate: OnCreateReply(*t, reply); break;
    case FutureType::kRestore: OnRestoreReply(*t, reply); break;
    case FutureType::kReset: OnResetReply(*t, reply); break;
    case FutureType::kSave:
      if (f->storage == "memory") {
        if (!reply.ok || payload.empty()) {
          FailTrial(*t, "pause checkpoint failed: " + reply.error, true);
        } else {
          OnPauseSaved(*t, payload);
        }
      } else {
        OnSaveReply(*t, reply, payload);
      }
      break;
    case FutureType::kTrain:
      // TRAIN is answered by a RESULT batch; a REPLY means it was refused.
      FailTrial(*t, reply.error.empty() ? "TRAIN refused by worker" : reply.error, true);
      break;
    default: break;
  }
}

void TrialRunner::OnCreateReply(Trial& t, const protocol::Reply& reply) {
  if (reply.ok) return;
  // A start that fails (unknown trainable, setup raising) is an ERROR, as Ray.
  FailTrial(t, "failed to start: " + reply.error, false);
}

void TrialRunner::OnRestoreReply(Trial& t, const protocol::Reply& reply) {
  if (reply.ok) return;
  FailTrial(t, "failed to restore from checkpoint: " + reply.error, true);
}

void TrialRunner::OnStopDone(const Future& f) {
  if (f.group_id != 0) groups_.ReturnInUse(f.group_id);
}

// ---------------------------------------------------------------- results

void TrialRunner::HandleResultBatch(const std::string& worker_id,
                                    const protocol::ResultBatch& batch) {
  registry_.Touch(worker_id);
  uint64_t max_seq = 0;
  for (const auto& r : batch.results) max_seq = std::max(max_seq, r.seq);
  Trial* t = CurrentTrial(batch.trial_id, batch.attempt);
  if (t == nullptr || t->worker_id != worker_id) {
    // A stale attempt (fenced) or a replay for a finished trial: nothing is
    // stored; ACK so the worker's outbox does not replay it forever.
    if (max_seq > 0) acks_[{worker_id, batch.trial_id, batch.attempt}] = max_seq;
    const Trial* known = FindTrial(batch.trial_id);
    bool stale_actor = known != nullptr && !IsCachedActor(worker_id, batch.trial_id, batch.attempt) &&
                       (known->attempt != batch.attempt ||
                        (known->has_actor && known->worker_id != worker_id));
    if (stale_actor) {
      // An actor of an attempt the head gave up on (its worker was declared
      // dead, then woke up): it must not keep running.
      spdlog::warn("dropped results of {} attempt {} from {} (current attempt {}); stopping "
                   "that stale actor", batch.trial_id, batch.attempt, worker_id, known->attempt);
      protocol::Stop stop;  // rid 0: no reply wanted
      stop.trial_id = batch.trial_id;
      stop.attempt = batch.attempt;
      stop.kill_after_ms = options_.force_cleanup_ms;
      sink_.SendToWorker(worker_id, protocol::Message{stop, {}}, SendTiming::kAfterCommit);
    }
    return;
  }
  auto f = executor_.Take(batch.rid);  // replays after a reconnect have no future
  Experiment& e = experiments_.at(t->experiment_id);
  const ExperimentSpec& spec = e.spec;
  bool stop = false;
  bool checkpoint = false;
  std::string error;
  for (const auto& rec : batch.results) {
    const Json& in = rec.result;
    auto it_iter = in.is_object() ? in.find("training_iteration") : in.end();
    if (!in.is_object() || it_iter == in.end() || !it_iter->is_number_integer()) {
      error = "result without an integer training_iteration";
      break;
    }
    int64_t iteration = it_iter->get<int64_t>();
    if (iteration <= t->iteration) continue;  // already stored (replay or re-run)
    // A trainable's own result: the flags the runner acts on must be booleans
    // (a number or string here aborted the head, on every replay).
    for (const char* flag : {"done", "should_checkpoint"}) {
      auto it = in.find(flag);
      if (it != in.end() && !it->is_boolean()) {
        error = "result of iteration " + std::to_string(iteration) + ": '" + flag +
                "' must be true or false, got a " + it->type_name();
        break;
      }
    }
    if (!error.empty()) break;
    Json result = in;
    result["trial_id"] = t->trial_id;
    bool done = result.value("done", false);
    for (const auto& [key, threshold] : spec.stop) {
      const Json* v = FindFlatKey(result, key);
      if (v == nullptr || !(v->is_number() || v->is_boolean())) {
        error = "stopping criterion '" + key + "' not found (or not a number) in the result of "
                "iteration " + std::to_string(iteration);
        break;
      }
      double x = v->is_boolean() ? (v->get<bool>() ? 1.0 : 0.0) : v->get<double>();
      if (x >= threshold) done = true;
    }
    if (!error.empty()) break;
    result["done"] = done;
    batch_.Put(storage::Family::kResults, storage::ResultKey(t->trial_id, iteration),
               result.dump());
    bool user_ckpt = result.value("should_checkpoint", false);
    t->iteration = iteration;
    t->last_result = std::move(result);
    MarkDirty(*t);
    checkpoint = (spec.checkpoint.frequency > 0 && iteration % spec.checkpoint.frequency == 0) ||
                 (done && spec.checkpoint.at_end) || user_ckpt;
    if (done) {
      stop = true;
      break;  // a STOP ignores the rest of a buffered batch
    }
    if (checkpoint) break;
  }
  if (max_seq > 0) acks_[{worker_id, t->trial_id, t->attempt}] = max_seq;
  if (!error.empty()) {
    FailTrial(*t, error, false);
    return;
  }
  if (batch.failed) {
    FailTrial(*t, batch.error.empty() ? "step failed" : batch.error, true);
    return;
  }
  if (!f) {
    if (t->replay_until > 0 && t->iteration >= t->replay_until) {
      // The outbox replay of a re-attached actor is in: drive it from here.
      DriveAfterReattach(*t, SendTiming::kNow);
      return;
    }
    // A replay (after a reconnect or a head restart): the live TRAIN's own
    // batch drives the trial, but a replayed stop ends it here, so that no
    // iteration past the stop is ever stored.
    if (stop) FinishTrial(*t, TrialStatus::kTerminated);
    return;
  }
  if (checkpoint) {
    t->saving = true;
    t->stop_after_save = stop;
    executor_.Save(*t, "persistent");
    return;
  }
  if (stop) {
    FinishTrial(*t, TrialStatus::kTerminated);
  } else {
    ContinueOrPause(*t);
  }
}

void TrialRunner::OnSaveReply(Trial& t, const protocol::Reply& reply, const std::string& payload) {
  t.saving = false;
  if (!reply.ok) {
    FailTrial(t, "checkpoint save failed: " + reply.error, true);
    return;
  }
  if (payload.empty()) {
    FailTrial(t, "checkpoint save returned no bytes", true);
    return;
  }
  int64_t iteration = t.iteration;
  if (reply.data.is_object() && reply.data.contains("iteration") &&
      reply.data["iteration"].is_number_integer()) {
    iteration = reply.data["iteration"].get<int64_t>();
  }
  AddCheckpoint(t, payload, iteration);
  if (t.stop_after_save) {
    FinishTrial(t, TrialStatus::kTerminated);
  } else {
    ContinueOrPause(t);
  }
}

void TrialRunner::AddCheckpoint(Trial& t, const std::string& bytes, int64_t iteration) {
  const CheckpointPolicy& policy = experiments_.at(t.experiment_id).spec.checkpoint;
  CheckpointRecord c;
  c.id = t.next_checkpoint_id++;
  c.iteration = iteration;
  const Json* v = t.last_result.is_null() ? nullptr : FindFlatKey(t.last_result, policy.score_attribute);
  if (v != nullptr && v->is_number() && !std::isnan(v->get<double>())) {
    c.score_valid = true;
    c.score = (policy.score_max ? 1.0 : -1.0) * v->get<double>();
  } else if (v == nullptr) {
    spdlog::error("trial {}: checkpoint score attribute '{}' missing from the result",
                  t.trial_id, policy.score_attribute);
  }
  batch_.Put(storage::Family::kCheckpoints, storage::CheckpointKey(t.trial_id, c.id), bytes);
  t.checkpoints.push_back(c);
  if (policy.num_to_keep > 0 && static_cast<int64_t>(t.checkpoints.size()) > policy.num_to_keep) {
    // Keep the best num_to_keep by score, and always the newest.
    std::vector<CheckpointRecord> sorted = t.checkpoints;
    std::sort(sorted.begin(), sorted.end(), BetterCheckpoint);
    std::set<uint64_t> keep;
    for (int64_t i = 0; i < policy.num_to_keep; ++i) keep.insert(sorted[i].id);
    keep.insert(c.id);
    std::vector<CheckpointRecord> kept;
    for (const auto& r : t.checkpoints) {
      if (keep.count(r.id)) {
        kept.push_back(r);
      } else {
        batch_.Delete(storage::Family::kCheckpoints, storage::CheckpointKey(t.trial_id, r.id));
      }
    }
    t.checkpoints = std::move(kept);
  }
  MarkDirty(t);
}

// ---------------------------------------------------------------- lifecycle

Trial& TrialRunner::NewTrial(Experiment& e, Json config) {
  Trial t;
  t.trial_id = TrialIdFor(e.experiment_id, e.next_trial_index++);
  t.experiment_id = e.experiment_id;
  t.seq = next_seq_++;
  t.config = std::move(config);
  t.status = TrialStatus::kPending;
  std::string id = t.trial_id;
  Trial& stored = trials_.emplace(id, std::move(t)).first->second;
  e.trial_ids.push_back(id);
  e.counts[TrialStatus::kPending]++;
  e.live_trials++;
  num_pending_++;
  Enqueue(stored);
  MarkDirty(stored);
  MarkDirty(e);
  return stored;
}

void TrialRunner::SetStatus(Trial& t, TrialStatus s) {
  if (t.status == s) return;
  Experiment& e = experiments_.at(t.experiment_id);
  e.counts[t.status]--;
  e.counts[s]++;
  if (t.status == TrialStatus::kPending) num_pending_--;
  if (s == TrialStatus::kPending) num_pending_++;
  if (t.status == TrialStatus::kRunning) num_running_--;
  if (s == TrialStatus::kRunning) num_running_++;
  if (!IsFinished(t.status) && IsFinished(s)) e.live_trials--;
  if (IsFinished(t.status) && !IsFinished(s)) e.live_trials++;
  t.status = s;
  MarkDirty(t);
}

const std::string& TrialRunner::RequestKeyOf(const Trial& t) {
  auto it = request_key_of_experiment_.find(t.experiment_id);
  if (it != request_key_of_experiment_.end()) return it->second;
  return request_key_of_experiment_[t.experiment_id] =
             experiments_.at(t.experiment_id).spec.resources.Key();
}

void TrialRunner::Enqueue(Trial& t) {
  const std::string& key = RequestKeyOf(t);
  RequestQueue& q = queues_[key];
  if (q.request.bundles.empty()) q.request = experiments_.at(t.experiment_id).spec.resources;
  t.queued_paused = t.status == TrialStatus::kPaused;
  q.waiting.insert({t.queued_paused, t.seq, t.trial_id});
}

void TrialRunner::Dequeue(Trial& t) {
  auto qit = queues_.find(RequestKeyOf(t));
  if (qit != queues_.end()) qit->second.waiting.erase({t.queued_paused, t.seq, t.trial_id});
}

int64_t TrialRunner::KillAfterMs(const Experiment& e) const {
  if (e.spec.force_cleanup_s > 0) return static_cast<int64_t>(e.spec.force_cleanup_s * 1000);
  return options_.force_cleanup_ms;
}

TrainBuffer TrialRunner::BufferFor(const Trial& t) const {
  const ExperimentSpec& spec = experiments_.at(t.experiment_id).spec;
  TrainBuffer b;
  b.length = spec.result_buffer_length;
  if (b.length > 1 && spec.checkpoint.at_end) b.length = 1;
  if (b.length > 1 && spec.checkpoint.frequency > 0) {
    b.length = std::min(b.length, spec.checkpoint.frequency);
  }
  b.time_s = executor_.BufferTime(spec.result_buffer_min_time_s, spec.result_buffer_max_time_s);
  return b;
}

void TrialRunner::ContinueTraining(Trial& t) { executor_.ContinueTraining(t, BufferFor(t)); }

void TrialRunner::StartTrial(Trial& t, uint64_t group_id) {
  const auto* g = groups_.Find(group_id);
  Experiment& e = experiments_.at(t.experiment_id);
  Dequeue(t);
  t.attempt++;
  t.group_id = group_id;
  t.has_actor = true;
  // The actor lives on the worker of bundle 0 (or of the first worker bundle
  // when the head bundle is empty: then the actor itself takes nothing).
  const BundlePlacement& host = g->placement.bundles.front();
  t.worker_id = host.worker_id;
  t.actor_worker = host.worker_id;
  t.placement = g->placement;
  actors_by_worker_[t.worker_id].insert(t.trial_id);
  std::map<std::string, double> bundle0;
  if (!g->request.head_bundle_empty) bundle0 = host.resources.ToDoubles();
  std::vector<int64_t> gpu_ids;
  for (const auto& b : g->placement.bundles) {
    if (b.worker_id == host.worker_id) gpu_ids.insert(gpu_ids.end(), b.gpu_ids.begin(), b.gpu_ids.end());
  }
  std::string checkpoint_bytes;
  std::string* checkpoint = CheckpointFor(t, checkpoint_bytes);
  if (t.start_time == 0) t.start_time = WallSeconds();
  SetStatus(t, TrialStatus::kRunning);
  executor_.StartTrial(t, e.spec.trainable, t.worker_id, bundle0, gpu_ids, checkpoint, BufferFor(t));
}

std::string* TrialRunner::CheckpointFor(Trial& t, std::string& storage) {
  std::string* checkpoint = nullptr;
  // Reads checkpoint `c` of trial `owner` into `storage`.
  auto read = [&](const std::string& owner, const CheckpointRecord& c) {
    Result<std::optional<std::string>> bytes = Status::Internal("not read");
    // Megabytes from disk: off the loop thread, heartbeats keep going.
    sink_.RunLongStoreOperation([&] {
      bytes = store_.Get(storage::Family::kCheckpoints, storage::CheckpointKey(owner, c.id));
    });
    if (bytes.ok() && bytes->has_value()) {
      storage = std::move(**bytes);
      checkpoint = &storage;
    } else {
      spdlog::error("trial {}: checkpoint {} of {} unreadable ({}); starting from scratch",
                    t.trial_id, c.id, owner, bytes.ok() ? "missing" : bytes.status().ToString());
    }
  };
  const Trial* source = t.restore_from.empty() ? nullptr : FindTrial(t.restore_from);
  if (!t.memory_checkpoint.empty()) {
    storage = std::move(t.memory_checkpoint);
    t.memory_checkpoint.clear();
    checkpoint = &storage;
  } else if (const CheckpointRecord* c = t.NewestCheckpoint()) {
    read(t.trial_id, *c);
  } else if (source != nullptr && source->NewestCheckpoint() != nullptr) {
    read(source->trial_id, *source->NewestCheckpoint());
  }
  if (checkpoint != nullptr) {
    t.num_restores++;
  } else if (t.iteration > 0) {
    // From scratch: iterations are recomputed; stored ones are not rewritten.
    spdlog::info("trial {} restarts from scratch (no checkpoint)", t.trial_id);
  }
  return checkpoint;
}

void TrialRunner::StartTrialOnCachedActor(Trial& t, const CachedActor& actor) {
  Dequeue(t);
  t.attempt++;
  t.group_id = actor.group_id;
  t.has_actor = true;
  t.worker_id = actor.worker_id;
  t.actor_worker = actor.worker_id;
  if (const auto* g = groups_.Find(actor.group_id)) t.placement = g->placement;
  actors_by_worker_[t.worker_id].insert(t.trial_id);
  groups_.AssignCached(actor.group_id, t.trial_id);
  resetting_[t.trial_id] = actor;
  if (t.start_time == 0) t.start_time = WallSeconds();
  SetStatus(t, TrialStatus::kRunning);
  executor_.Reset(t, actor.trial_id, actor.attempt);
}

void TrialRunner::OnResetReply(Trial& t, const protocol::Reply& reply) {
  auto it = resetting_.find(t.trial_id);
  if (it == resetting_.end()) return;
  CachedActor old = it->second;
  resetting_.erase(it);
  bool accepted = reply.ok && reply.data.is_object() && reply.data.value("reset", false);
  if (accepted) {
    std::string bytes;
    std::string* checkpoint = CheckpointFor(t, bytes);
    executor_.ResumeOnActor(t, checkpoint, BufferFor(t));
    return;
  }
  // The actor kept its old key (or is gone): stop it under that key.
  executor_.StopActorKey(old.worker_id, old.trial_id, old.attempt, old.group_id,
                         KillAfterMs(experiments_.at(t.experiment_id)));
  ClearActor(t);
  std::string why = reply.ok ? std::string("Trainable runner reuse requires reset_config() to be "
                                           "implemented and return True.")
                             : "actor reuse failed: " + reply.error;
  FailTrial(t, why, false);
}

void TrialRunner::ReleaseActor(Trial& t, bool reusable) {
  if (!t.has_actor) return;
  const int64_t kill = KillAfterMs(experiments_.at(t.experiment_id));
  if (!(reusable && TryCacheActor(t))) executor_.StopActor(t, kill);
  if (auto r = resetting_.find(t.trial_id); r != resetting_.end()) {
    // Whichever key the actor has when the RESET settles, one STOP finds it.
    executor_.StopActorKey(r->second.worker_id, r->second.trial_id, r->second.attempt, 0, kill);
    resetting_.erase(r);
  }
  ClearActor(t);
}

void TrialRunner::ClearActor(Trial& t) {
  auto it = actors_by_worker_.find(t.worker_id);
  if (it != actors_by_worker_.end()) it->second.erase(t.trial_id);
  t.has_actor = false;
  t.worker_id.clear();
  t.group_id = 0;
  t.actor_worker.clear();
  t.placement = Placement{};
  MarkDirty(t);
}

bool TrialRunner::TryCacheActor(Trial& t) {
  if (resetting_.count(t.trial_id)) return false;
  const std::string& key = RequestKeyOf(t);
  auto qit = queues_.find(key);
  size_t demand = qit == queues_.end() ? 0 : qit->second.waiting.size();
  auto& cache = cached_[key];
  // Ray caches only with pending demand for the same request, and at most
  // max_pending_trials actors.
  if (cache.size() >= demand || static_cast<int64_t>(num_cached_) >= max_pending_) return false;
  executor_.ForgetTrial(t.trial_id);
  groups_.MarkCached(t.group_id);
  cache.push_back(CachedActor{t.worker_id, t.trial_id, t.attempt, t.group_id});
  ++num_cached_;
  return true;
}

void TrialRunner::ReconcileCachedActors() {
  for (auto& [key, cache] : cached_) {
    auto qit = queues_.find(key);
    size_t demand = qit == queues_.end() ? 0 : qit->second.waiting.size();
    while (cache.size() > demand) {
      CachedActor a = cache.front();
      cache.pop_front();
      --num_cached_;
      const Trial* owner = FindTrial(a.trial_id);
      int64_t kill = owner == nullptr ? options_.force_cleanup_ms
                                      : KillAfterMs(experiments_.at(owner->experiment_id));
      executor_.StopActorKey(a.worker_id, a.trial_id, a.attempt, a.group_id, kill);
    }
  }
}

Status TrialRunner::PauseTrial(const std::string& trial_id, bool hold) {
  Trial* t = MutableTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  switch (t->status) {
    case TrialStatus::kTerminated:
    case TrialStatus::kError:
      return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status));
    case TrialStatus::kRunning:
      t->pause_requested = true;
      t->held = hold;
      MarkDirty(*t);
      return Status::Ok();
    case TrialStatus::kPending:
    case TrialStatus::kPaused:
      if (!hold) return Status::Ok();
      Dequeue(*t);
      SetStatus(*t, TrialStatus::kPaused);
      t->held = true;
      MarkDirty(*t);
      return Status::Ok();
  }
  return Status::Ok();
}

Status TrialRunner::Resume(const std::string& trial_id) {
  Trial* t = MutableTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  if (t->status == TrialStatus::kRunning && t->pause_requested) {
    t->pause_requested = false;  // not paused yet: carry on
    t->held = false;
    return Status::Ok();
  }
  if (t->status != TrialStatus::kPaused) {
    return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status) +
                                      ", not PAUSED");
  }
  if (t->held) {
    t->held = false;
    MarkDirty(*t);
    Enqueue(*t);
  }
  return Status::Ok();
}

Result<Json> TrialRunner::ResumeExperiment(const std::string& experiment_id,
                                           const std::string& errored, bool unfinished) {
  auto eit = experiments_.find(experiment_id);
  if (eit == experiments_.end()) {
    return Status::NotFound("unknown experiment '" + experiment_id + "'");
  }
  if (!errored.empty() && errored != "retry" && errored != "restart") {
    return Status::InvalidArgument("errored must be \"retry\" or \"restart\", got '" + errored +
                                   "'");
  }
  Experiment& e = eit->second;
  Json retried = Json::array(), restarted = Json::array(), terminated = Json::array();
  if (!unfinished) {
    std::vector<std::string> stopped;
    StopExperiment(e, &stopped);
    for (const auto& id : stopped) terminated.push_back(id);
  }
  const std::vector<std::string> ids = e.trial_ids;  // NewTrial appends
  for (const auto& id : ids) {
    Trial& t = trials_.at(id);
    if (t.status != TrialStatus::kError || errored.empty()) continue;
    if (errored == "retry") {
      t.error.clear();
      t.end_time = 0;
      t.memory_checkpoint.clear();
      t.seq = next_seq_++;
      SetStatus(t, TrialStatus::kPending);
      Enqueue(t);
      retried.push_back(id);
    } else {
      Trial& fresh = NewTrial(e, t.config);
      e.total_variants++;
      e.next_variant++;
      restarted.push_back(Json{{"from", id}, {"trial_id", fresh.trial_id}});
    }
  }
  if (!retried.empty() || !restarted.empty()) {
    e.finished = false;
    if (!e.stopped && !e.SearchFinished()) searching_.insert(e.experiment_id);
  }
  MarkDirty(e);
  MaybeFinishExperiment(e);
  return Json{{"experiment_id", experiment_id},
              {"retried", retried},
              {"restarted", restarted},
              {"terminated", terminated}};
}

void TrialRunner::StartPause(Trial& t) {
  t.pause_requested = false;
  t.pausing = true;
  executor_.Save(t, "memory");
}

void TrialRunner::OnPauseSaved(Trial& t, const std::string& payload) {
  t.pausing = false;
  const Experiment& e = experiments_.at(t.experiment_id);
  ReleaseActor(t, e.spec.reuse_actors);
  t.memory_checkpoint = payload;
  SetStatus(t, TrialStatus::kPaused);
  if (!t.held) Enqueue(t);
}

void TrialRunner::ContinueOrPause(Trial& t) {
  if (t.pause_requested) {
    StartPause(t);
  } else {
    ContinueTraining(t);
  }
}

void TrialRunner::FinishTrial(Trial& t, TrialStatus final_status) {
  if (IsFinished(t.status)) return;
  const Experiment& spec_owner = experiments_.at(t.experiment_id);
  if (t.has_actor) {
    bool ok = final_status == TrialStatus::kTerminated;
    if (ok && !spec_owner.spec.export_formats.empty() && !resetting_.count(t.trial_id)) {
      executor_.Export(t, spec_owner.spec.export_formats);
    }
    ReleaseActor(t, ok && spec_owner.spec.reuse_actors);
  } else if (t.status == TrialStatus::kPending || t.status == TrialStatus::kPaused) {
    Dequeue(t);
  }
  t.saving = false;
  t.pausing = false;
  t.pause_requested = false;
  t.memory_checkpoint.clear();
  t.end_time = WallSeconds();
  SetStatus(t, final_status);
  Experiment& e = experiments_.at(t.experiment_id);
  MaybeFinishExperiment(e);
}

void TrialRunner::FailTrial(Trial& t, const std::string& error, bool retry) {
  if (IsFinished(t.status)) return;
  Experiment& e = experiments_.at(t.experiment_id);
  t.num_failures++;
  t.error = error;
  t.error_log.push_back("Failure # " + std::to_string(t.num_failures) + " (occurred at " +
                        DateString() + ")\n" + error);
  spdlog::warn("trial {} attempt {} failed (failure #{}): {}", t.trial_id, t.attempt,
               t.num_failures, error);
  int64_t max_failures = e.spec.max_failures;
  bool recover = retry && (max_failures < 0 || t.num_failures <= max_failures);
  if (!recover) {
    FinishTrial(t, TrialStatus::kError);
    if (e.spec.fail_fast) StopExperiment(e, nullptr);
    return;
  }
  ReleaseActor(t, false);  // an actor is never reused after an error
  t.saving = false;
  t.pausing = false;
  t.pause_requested = false;
  t.memory_checkpoint.clear();  // retry from the newest persistent checkpoint
  // Ray requeues a retried trial at the end of the queue.
  t.seq = next_seq_++;
  SetStatus(t, TrialStatus::kPending);
  Enqueue(t);
}

void TrialRunner::OnWorkerDead(const std::string& worker_id, const std::string& cause) {
  const WorkerInfo* w = registry_.Find(worker_id);
  std::string who = worker_id + (w != nullptr && !w->host.empty() ? " on " + w->host : "");
  spdlog::warn("worker {} is gone: {}", who, cause);
  // Stops sent there will never be answered: their groups die with the worker.
  executor_.TakeStopsOnWorker(worker_id);
  for (auto& [key, cache] : cached_) {
    size_t before = cache.size();
    cache.erase(std::remove_if(cache.begin(), cache.end(),
                               [&](const CachedActor& a) { return a.worker_id == worker_id; }),
                cache.end());
    num_cached_ -= before - cache.size();
  }
  groups_.OnWorkerRemoved(worker_id);
  ledger_.RemoveWorker(worker_id);
  RecomputeMaxPending();
  auto it = actors_by_worker_.find(worker_id);
  if (it == actors_by_worker_.end()) return;
  std::vector<std::string> victims(it->second.begin(), it->second.end());
  actors_by_worker_.erase(it);
  for (const auto& id : victims) {
    Trial* t = MutableTrial(id);
    if (t == nullptr || !t->has_actor) continue;
    ClearActor(*t);  // nothing to stop: the worker is gone
    FailTrial(*t, "worker " + who + " died: " + cause, true);
  }
}

void TrialRunner::MaybeFinishExperiment(Experiment& e) {
  if (e.finished) return;
  if (e.live_trials == 0 && e.SearchFinished()) {
    e.finished = true;
    searching_.erase(e.experiment_id);
    MarkDirty(e);
    spdlog::info("experiment {} ({}) finished: {} trials, {} TERMINATED, {} ERROR",
                 e.experiment_id, e.spec.name, e.trial_ids.size(), e.counts[TrialStatus::kTerminated],
                 e.counts[TrialStatus::kError]);
  }
}

void TrialRunner::StopExperiment(Experiment& e, std::vector<std::string>* stopped) {
  e.stopped = true;
  searching_.erase(e.experiment_id);
  MarkDirty(e);
  for (const auto& id : e.trial_ids) {
    Trial& t = trials_.at(id);
    if (IsFinished(t.status)) continue;
    FinishTrial(t, TrialStatus::kTerminated);
    if (stopped != nullptr) stopped->push_back(id);
  }
  MaybeFinishExperiment(e);
}

// ---------------------------------------------------------------- client API

Result<Json> TrialRunner::Submit(const Json& spec_json) {
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  auto spec = ExperimentSpec::Parse(spec_json, seed % 1'000'000'007ULL);
  if (!spec.ok()) return spec.status();
  auto space = SearchSpace::Parse(spec->param_space);
  if (!space.ok()) return space.status();
  if (registry_.NumAlive() > 0) {
    std::string offered;
    if (!registry_.AnyHosts(spec->trainable, &offered)) {
      return Status::InvalidArgument("spec.trainable: no registered worker hosts trainable '" +
                                     spec->trainable + "' (workers offer: " + offered + ")");
    }
    RETURN_IF_ERROR(ledger_.CheckFeasible(spec->resources));
  }
  Experiment e;
  e.experiment_id = ExperimentIdFor(next_experiment_++);
  e.spec = std::move(spec).value();
  e.created_at = WallSeconds();
  e.total_variants = space->NumVariants(e.spec.num_samples);
  std::string id = e.experiment_id;
  request_key_of_experiment_[id] = e.spec.resources.Key();
  spaces_.emplace(id, std::move(space).value());
  Experiment& stored = experiments_.emplace(id, std::move(e)).first->second;
  searching_.insert(id);
  MarkDirty(stored);
  batch_.Put(storage::Family::kMeta, storage::kMetaNextExperiment, std::to_string(next_experiment_));
  spdlog::info("experiment {} ({}) submitted: trainable {}, {} trials, resources {}", id,
               stored.spec.name, stored.spec.trainable, stored.total_variants,
               stored.spec.resources.ToString());
  GenerateTrials();
  return Json{{"experiment_id", id}, {"total_trials", stored.total_variants}};
}

Result<std::string> TrialRunner::AddTrial(const std::string& experiment_id, const Json& config,
                                          const std::string& restore_from) {
  auto it = experiments_.find(experiment_id);
  if (it == experiments_.end()) return Status::NotFound("unknown experiment '" + experiment_id + "'");
  if (!config.is_object()) return Status::InvalidArgument("config must be a JSON object");
  Experiment& e = it->second;
  if (e.finished || e.stopped) {
    return Status::FailedPrecondition("experiment " + experiment_id + " is " +
                                      (e.stopped ? "stopped" : "finished"));
  }
  if (!restore_from.empty()) {
    const Trial* source = FindTrial(restore_from);
    if (source == nullptr) return Status::NotFound("restore_from: unknown trial '" + restore_from + "'");
    if (source->NewestCheckpoint() == nullptr) {
      return Status::FailedPrecondition("restore_from: trial " + restore_from +
                                        " has no persistent checkpoint");
    }
    if (experiments_.at(source->experiment_id).spec.trainable != e.spec.trainable) {
      return Status::InvalidArgument("restore_from: trial " + restore_from + " runs trainable '" +
                                     experiments_.at(source->experiment_id).spec.trainable +
                                     "', not '" + e.spec.trainable + "'");
    }
  }
  Trial& t = NewTrial(e, config);
  t.restore_from = restore_from;
  e.total_variants++;
  e.next_variant++;  // an added trial counts as a variant the searcher produced
  MarkDirty(e);
  return t.trial_id;
}

Result<std::vector<std::string>> TrialRunner::Stop(const std::string& id) {
  std::vector<std::string> stopped;
  if (auto it = experiments_.find(id); it != experiments_.end()) {
    StopExperiment(it->second, &stopped);
    return stopped;
  }
  Trial* t = MutableTrial(id);
  if (t == nullptr) return Status::NotFound("no experiment or trial '" + id + "'");
  if (!IsFinished(t->status)) {
    FinishTrial(*t, TrialStatus::kTerminated);
    stopped.push_back(id);
  }
  return stopped;
}

// ---------------------------------------------------------------- turn

void TrialRunner::GenerateTrials() {
  for (auto it = searching_.begin(); it != searching_.end();) {
    Experiment& e = experiments_.at(*it);
    const SearchSpace& space = spaces_.at(e.experiment_id);
    while (!e.SearchFinished() && num_pending_ < max_pending_ &&
           (e.spec.max_concurrent_trials == 0 || e.live_trials < e.spec.max_concurrent_trials)) {
      Json config = space.Variant(e.spec.seed, e.next_variant);
      e.next_variant++;
      NewTrial(e, std::move(config));
    }
    if (e.SearchFinished()) {
      MarkDirty(e);
      it = searching_.erase(it);
      MaybeFinishExperiment(e);
    } else {
      ++it;
    }
  }
}

void TrialRunner::StageAndReconcile() {
  for (auto& [key, q] : queues_) {
    auto cit = cached_.find(key);
    int64_t cached = cit == cached_.end() ? 0 : static_cast<int64_t>(cit->second.size());
    int64_t have = groups_.NumStaging(key) + groups_.NumReady(key) + cached;
    int64_t want = static_cast<int64_t>(q.waiting.size());
    while (have < want && groups_.CanStage()) {
      groups_.Stage(q.request);
      ++have;
    }
    while (have > want && groups_.UnstageOne(key)) --have;  // cached actors go in Reconcile
  }
}

void TrialRunner::StartReadyTrials() {
  // FIFO across request shapes: among shapes with a cached actor or a ready
  // group, the one whose first waiting trial comes first. A shape without
  // either never blocks another (Ray's _on_pg_ready fallback, without its
  // deadlock). A cached actor is preferred over a fresh group (Ray).
  while (true) {
    RequestQueue* best = nullptr;
    std::string best_key;
    for (auto& [key, q] : queues_) {
      if (q.waiting.empty()) continue;
      auto cit = cached_.find(key);
      bool has_cached = cit != cached_.end() && !cit->second.empty();
      if (!has_cached && !groups_.HasReady(key)) continue;
      if (best == nullptr || *q.waiting.begin() < *best->waiting.begin()) {
        best = &q;
        best_key = key;
      }
    }
    if (best == nullptr) return;
    std::string trial_id = std::get<2>(*best->waiting.begin());
    auto cit = cached_.find(best_key);
    if (cit != cached_.end() && !cit->second.empty()) {
      CachedActor actor = cit->second.front();
      cit->second.pop_front();
      --num_cached_;
      StartTrialOnCachedActor(trials_.at(trial_id), actor);
      continue;
    }
    auto gid = groups_.TakeReady(best_key, trial_id);
    StartTrial(trials_.at(trial_id), *gid);
  }
}

void TrialRunner::Tick() {
  TimeMs now = clock_.NowMs();
  if (now - last_expiry_check_ >= options_.heartbeat_ms) {
    last_expiry_check_ = now;
    for (const auto& id : registry_.ExpireSilent()) {
      OnWorkerDead(id, "no heartbeat for " + std::to_string(registry_.expiry_ms()) + " ms");
    }
  }
  for (const Future& f : executor_.TakeExpiredStops()) {
    spdlog::warn("stop of trial {} on {} not confirmed within its deadline; releasing its "
                 "resources", f.trial_id, f.worker_id);
    OnStopDone(f);
  }
  ExpireReattachWaits();
  GenerateTrials();
  StageAndReconcile();
  groups_.Update();
  StartReadyTrials();
  ReconcileCachedActors();
  CheckInsufficientResources();
}

void TrialRunner::CheckInsufficientResources() {
  TimeMs now = clock_.NowMs();
  bool waiting = num_pending_ > 0;
  if (num_running_ > 0 || !waiting) {
    no_running_since_ = -1;
    return;
  }
  if (no_running_since_ < 0) {
    no_running_since_ = now;
    return;
  }
  if (now - no_running_since_ < options_.insufficient_resources_warn_ms ||
      now - last_insufficient_warning_ < options_.insufficient_resources_warn_ms) {
    return;
  }
  last_insufficient_warning_ = now;
  for (const auto& [key, q] : queues_) {
    if (q.waiting.empty()) continue;
    spdlog::warn("no trial has been running for {} s while {} trials wait: they ask for {} but "
                 "the largest worker has {} ({} workers alive). Add workers or reduce "
                 "the experiment's resources.",
                 (now - no_running_since_) / 1000, q.waiting.size(), q.request.ToString(),
                 ledger_.LargestWorkerString(), registry_.NumAlive());
    break;
  }
}

void TrialRunner::RecomputeMaxPending() {
  if (options_.max_pending_trials > 0) {
    max_pending_ = options_.max_pending_trials;
  } else {
    double cpus = ledger_.Total().Get("CPU");
    max_pending_ = std::max<int64_t>(16, static_cast<int64_t>(1.1 * cpus));
  }
  groups_.set_max_staging(max_pending_);
}

void TrialRunner::FlushTo(storage::WriteBatch& batch) {
  for (const auto& id : dirty_experiments_) {
    auto it = experiments_.find(id);
    if (it != experiments_.end()) {
      batch_.Put(storage::Family::kExperiments, id, it->second.ToJson().dump());
    }
  }
  dirty_experiments_.clear();
  for (const auto& id : dirty_trials_) {
    auto it = trials_.find(id);
    if (it != trials_.end()) batch_.Put(storage::Family::kTrials, id, it->second.ToJson().dump());
  }
  dirty_trials_.clear();
  if (batch.empty()) {
    batch = std::move(batch_);  // the usual case: no copy of result bytes
  } else {
    for (const auto& op : batch_.ops()) {
      if (op.is_delete) {
        batch.Delete(op.family, op.key);
      } else {
        batch.Put(op.family, op.key, op.value);
      }
    }
  }
  batch_.Clear();
  for (const auto& [k, seq] : acks_) {
    protocol::Ack ack;
    ack.trial_id = std::get<1>(k);
    ack.attempt = std::get<2>(k);
    ack.seq = seq;
    sink_.SendToWorker(std::get<0>(k), protocol::Message{ack, {}}, SendTiming::kAfterCommit);
  }
  acks_.clear();
}

// ---------------------------------------------------------------- reads

const Trial* TrialRunner::FindTrial(const std::string& trial_id) const {
  auto it = trials_.find(trial_id);
  return it == trials_.end() ? nullptr : &it->second;
}

const Experiment* TrialRunner::FindExperiment(const std::string& experiment_id) const {
  auto it = experiments_.find(experiment_id);
  return it == experiments_.end() ? nullptr : &it->second;
}

std::string TrialRunner::WorkerNameOf(const Trial& t) const {
  if (!t.has_actor) return {};
  const WorkerInfo* w = registry_.Find(t.worker_id);
  return w == nullptr ? t.worker_id : w->name;
}

const Trial* TrialRunner::BestTrial(const Experiment& e) const {
  if (e.spec.metric.empty()) return nullptr;
  const Trial* best = nullptr;
  double best_v = 0;
  bool maximize = e.spec.mode == "max";
  for (const auto& id : e.trial_ids) {
    const Trial& t = trials_.at(id);
    if (t.last_result.is_null()) continue;
    const Json* v = FindFlatKey(t.last_result, e.spec.metric);
    if (v == nullptr || !v->is_number()) continue;
    double x = v->get<double>();
    if (std::isnan(x)) continue;
    if (best == nullptr || (maximize ? x > best_v : x < best_v)) {
      best = &t;
      best_v = x;
    }
  }
  return best;
}

int64_t TrialRunner::ActorsOn(const std::string& worker_id) const {
  auto it = actors_by_worker_.find(worker_id);
  return it == actors_by_worker_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

bool TrialRunner::IsCachedActor(const std::string& worker_id, const std::string& trial_id,
                                uint64_t attempt) const {
  for (const auto& [key, cache] : cached_) {
    for (const auto& c : cache) {
      if (c.worker_id == worker_id && c.trial_id == trial_id && c.attempt == attempt) return true;
    }
  }
  return false;
}

bool TrialRunner::HasResourcesForTrial(const std::string& trial_id) const {
  const Trial* t = FindTrial(trial_id);
  if (t == nullptr) return false;
  auto kit = request_key_of_experiment_.find(t->experiment_id);
  if (kit == request_key_of_experiment_.end()) return false;
  const std::string& key = kit->second;
  auto cit = cached_.find(key);
  if (cit != cached_.end() && !cit->second.empty()) return true;
  return groups_.HasReady(key) || groups_.NumStaging(key) > 0 || groups_.CanStage();
}

std::string TrialRunner::DebugString() const {
  ResourceSet used = groups_.OccupiedResources();
  ResourceSet total = ledger_.Total();
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  return "Resources requested: " + fmt(used.Get("CPU")) + "/" + fmt(total.Get("CPU")) +
         " CPUs, " + fmt(used.Get("GPU")) + "/" + fmt(total.Get("GPU")) + " GPUs";
}

TimeMs TrialRunner::NextTimerMs() const { return options_.heartbeat_ms; }

}  // namespace ztune::head
