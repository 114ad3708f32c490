// TrialRunner, recovery: loading the store at start, re-attaching the live
// actors that workers report after a head restart (with their replayed or
// in-flight results), the re-attach grace, and the experiment resume policies
// (docs/recovery.md).
#include "head/trial_runner.h"

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "storage/keys.h"

namespace ztune::head {

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
  // Its own checkpoints are never ahead of its stored results; another
  // trial's (restore_from, before any result of its own) is.
  const Trial* source = t.restore_from.empty() ? nullptr : FindTrial(t.restore_from);
  t.resume_iteration = t.iteration == 0 && t.NewestCheckpoint() == nullptr && source != nullptr &&
                               source->NewestCheckpoint() != nullptr
                           ? source->NewestCheckpoint()->iteration
                           : 0;
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

}  // namespace ztune::head
