// TrialRunner, recovery: loading the store at start, re-attaching the live
// actors that workers report after a head restart (with their replayed or
// in-flight results), the re-attach grace, and the experiment resume policies
// (docs/recovery.md).
#include "head/trial_runner.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/printable.h"
#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {

namespace {

// Device ids one worker may report (more than any machine has).
constexpr size_t kMaxGpuIds = 1024;

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
  // A new epoch, committed (HeadServer::Start) before any request goes out.
  ASSIGN_OR_RETURN(std::optional<std::string> stored_epoch,
                   store_.Get(storage::Family::kMeta, storage::kMetaHeadEpoch));
  uint64_t previous = 0;
  if (stored_epoch.has_value()) {
    const std::string& text = *stored_epoch;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), previous);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return Status::Corruption("meta record head_epoch is not a number: '" + text + "'");
    }
  }
  epoch_ = previous + 1;
  executor_.SetEpoch(epoch_);
  batch_.Put(storage::Family::kMeta, storage::kMetaHeadEpoch, std::to_string(epoch_));
  ASSIGN_OR_RETURN(std::vector<Experiment> experiments,
                   LoadRecords<Experiment>(store_, storage::Family::kExperiments));
  for (Experiment& e : experiments) {
    auto space = SearchSpace::Parse(e.spec.param_space);
    if (!space.ok()) {
      return Status::Corruption("experiment " + e.experiment_id + ": " + space.status().message());
    }
    if (!e.finished && !e.SearchFinished()) searcher_.Start(e.experiment_id, std::move(space).value());
    if (book_.FindExperiment(e.experiment_id) != nullptr) {
      return Status::Corruption("experiment " + e.experiment_id + " is stored twice");
    }
    book_.AddExperiment(std::move(e), /*loaded=*/true);
  }
  // The schema the store was written with: a schema-1 store's trials carry
  // their checkpoint records and error_log inline and are moved to records of
  // their own below, in this first commit together with the new schema value.
  ASSIGN_OR_RETURN(std::optional<std::string> stored_schema,
                   store_.Get(storage::Family::kMeta, storage::kMetaSchema));
  std::vector<Trial> loaded;
  std::set<std::string> inline_lists;
  Status damaged;
  RETURN_IF_ERROR(ScanTrials(store_, [&](StoredTrial& stored) {
    if (!stored.trial.ok()) {
      damaged = Status::Corruption("trials record '" + stored.key +
                                   "': " + stored.trial.status().message());
      return false;
    }
    if (stored.inline_lists) inline_lists.insert(stored.key);
    loaded.push_back(std::move(stored.trial).value());
    return true;
  }));
  RETURN_IF_ERROR(damaged);
  if (stored_schema.has_value() && *stored_schema != std::to_string(storage::kSchemaVersion)) {
    // RocksDbStore::Open refused a newer or unreadable one.
    spdlog::info("store schema {} -> {}: moving the checkpoint records and error logs of {} "
                 "trials to records of their own",
                 *stored_schema, storage::kSchemaVersion, inline_lists.size());
    batch_.Put(storage::Family::kMeta, storage::kMetaSchema,
               std::to_string(storage::kSchemaVersion));
  }
  std::sort(loaded.begin(), loaded.end(), [](const Trial& a, const Trial& b) { return a.seq < b.seq; });
  for (Trial& t : loaded) {
    if (book_.FindExperiment(t.experiment_id) == nullptr) {
      return Status::Corruption("trial " + t.trial_id + " belongs to unknown experiment " +
                                t.experiment_id);
    }
    const TrialStatus stored_status = t.status;
    // Finished trials, a RUNNING trial whose worker may still host its live
    // actor (it waits for the re-attach) and a user's pause keep their
    // status. Any other RUNNING trial's actor is gone with the old head, and
    // a scheduler-PAUSED trial's memory checkpoint too: both restart from
    // their newest persistent checkpoint (Ray's resume of RUNNING trials).
    const bool reattach = stored_status == TrialStatus::kRunning && !t.actor_worker.empty();
    const bool keeps = IsFinished(stored_status) || reattach ||
                       (stored_status == TrialStatus::kPaused && t.held);
    if (!keeps) t.status = TrialStatus::kPending;
    const std::string id = t.trial_id;
    const bool changed = t.status != stored_status;
    Trial& stored = book_.AddLoadedTrial(std::move(t), changed);
    if (reattach) {
      TimeMs grace = options_.reattach_grace_ms > 0
                         ? options_.reattach_grace_ms
                         : 2 * options_.heartbeat_ms * options_.liveness;
      stored.reattach_deadline = clock_.NowMs() + grace;
      SetPhase(stored, TrialPhase::kAwaitingReattach);
    } else if (!keeps) {
      Enqueue(stored);
    }
    if (inline_lists.count(id) > 0) {
      PutChildRecords(batch_, stored);
      book_.MarkDirty(stored);  // rewritten without the lists at this turn's FlushTo
    }
  }
  std::vector<std::string> ids;
  for (const auto& [id, e] : book_.experiments()) ids.push_back(id);
  for (const std::string& id : ids) {
    Experiment& e = *book_.FindExperiment(id);
    request_key_of_experiment_[id] = e.spec.resources.Key();
    MaybeFinishExperiment(e);
  }
  spdlog::info("head epoch {}: loaded {} experiments and {} trials from the store", epoch_,
               book_.experiments().size(), book_.num_trials());
  return Status::Ok();
}

void TrialRunner::HandleRegister(const protocol::Register& reg) {
  // Refused registrations change nothing; the worker keeps asking (every
  // heartbeat interval) and the warning says why.
  Result<ResourceSet> offered = ResourceSet::FromDoublesChecked(reg.resources);
  if (!offered.ok()) {
    peer_warnings_.Warn("REGISTER of worker '" + reg.worker_id + "' refused: " +
                        offered.status().message());
    return;
  }
  std::set<int64_t> gpu_ids(reg.gpu_ids.begin(), reg.gpu_ids.end());
  if (gpu_ids.size() != reg.gpu_ids.size() || reg.gpu_ids.size() > kMaxGpuIds ||
      (!gpu_ids.empty() && *gpu_ids.begin() < 0)) {
    peer_warnings_.Warn("REGISTER of worker '" + reg.worker_id +
                        "' refused: gpu_ids must be distinct, >= 0 and at most " +
                        std::to_string(kMaxGpuIds));
    return;
  }
  const WorkerInfo* before = registry_.Find(reg.worker_id);
  const bool reconnected =
      before != nullptr && before->alive && before->incarnation != reg.incarnation;
  bool fresh = registry_.Register(reg);
  protocol::Registered registered;
  registered.worker_id = reg.worker_id;
  registered.heartbeat_ms = options_.heartbeat_ms;
  registered.liveness = options_.liveness;
  registered.head_epoch = epoch_;
  // Sent before anything below (re-attach TRAINs, STOPs): the worker holds
  // its replies and replays its outbox once it has this.
  sink_.SendToWorker(reg.worker_id, protocol::Message{registered, {}}, SendTiming::kAfterCommit);
  if (fresh) {
    ledger_.AddWorker(reg.worker_id, *offered, reg.gpu_ids);
    groups_.NotifyCapacityChanged();
    RecomputeMaxPending();
    spdlog::info("worker {} registered ({} on {}, pid {}): {}, {} live actors",
                 EscapeControl(reg.worker_id), EscapeControl(reg.name), EscapeControl(reg.host),
                 reg.pid, offered->ToString(),
                 reg.live_actors.size());
  }
  if (reconnected) ReconcileAfterReconnect(reg);
  for (const auto& a : reg.live_actors) {
    Trial* t = book_.FindTrial(a.trial_id);
    bool ours = t != nullptr && PhaseHoldsActor(t->phase) && t->attempt == a.attempt &&
                t->worker_id == reg.worker_id;
    ours = ours || IsCachedActor(reg.worker_id, a.trial_id, a.attempt);
    if (!ours && t != nullptr && t->phase == TrialPhase::kAwaitingReattach &&
        t->attempt == a.attempt && t->actor_worker == reg.worker_id) {
      ours = Reattach(*t, reg.worker_id, a);
    }
    if (!ours && t != nullptr && !PhaseHoldsActor(t->phase) && a.attempt > t->attempt) {
      // An attempt the store never saw: a head that crashed between sending
      // CREATE_ACTOR (or RESET) and committing it. Never name it again, or
      // the worker, still holding or stopping that actor, refuses the new
      // one ("already exists") and a healthy trial fails.
      spdlog::info("trial {}: worker {} holds attempt {}, which was never stored; the next "
                   "start uses a later one", t->trial_id, reg.worker_id, a.attempt);
      t->attempt = a.attempt;
      book_.MarkDirty(*t);
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

void TrialRunner::ReconcileAfterReconnect(const protocol::Register& reg) {
  const std::string& worker_id = reg.worker_id;
  std::map<std::pair<std::string, uint64_t>, const protocol::LiveActor*> live;
  for (const auto& a : reg.live_actors) live[{a.trial_id, a.attempt}] = &a;
  size_t resent = 0;
  std::vector<std::string> ids;
  if (auto it = actors_by_worker_.find(worker_id); it != actors_by_worker_.end()) {
    ids.assign(it->second.begin(), it->second.end());
  }
  for (const auto& id : ids) {
    Trial* t = book_.FindTrial(id);
    if (t == nullptr || !PhaseHoldsActor(t->phase) || t->worker_id != worker_id) continue;
    auto l = live.find({id, t->attempt});
    if (l == live.end()) {
      // A RESET in flight: the actor may still have its old key.
      if (auto r = resetting_.find(id); r != resetting_.end()) {
        l = live.find({r->second.trial_id, r->second.attempt});
      }
    }
    const std::vector<uint64_t> rids = executor_.DriverRidsOf(id);
    bool create_unanswered = false;
    for (uint64_t rid : rids) {
      create_unanswered = create_unanswered || executor_.Find(rid)->type == FutureType::kCreate;
    }
    if (l == live.end()) {
      if (create_unanswered) {
        RequeueLostStart(*t, "its CREATE_ACTOR did not reach worker " + worker_id +
                                 " while it reconnected");
      } else {
        FailTrial(*t, "actor of attempt " + std::to_string(t->attempt) + " is gone from worker " +
                          worker_id + " after it reconnected", true);
      }
      continue;
    }
    const std::set<uint64_t> accepted(l->second->rids.begin(), l->second->rids.end());
    bool lost_restore = false;
    for (uint64_t rid : rids) {
      lost_restore = lost_restore ||
                     (executor_.Find(rid)->type == FutureType::kRestore && accepted.count(rid) == 0);
    }
    if (lost_restore) {
      // Its checkpoint is not kept here (megabytes): the attempt starts again.
      RequeueLostStart(*t, "its RESTORE did not reach worker " + worker_id +
                               " while it reconnected");
      continue;
    }
    for (uint64_t rid : rids) {
      const Future* f = executor_.Find(rid);
      if (f->type == FutureType::kCreate) {
        // The actor exists: it was created (a failed setup leaves none).
        executor_.Take(rid, Answer{false, f->trial_id, f->attempt, f->worker_id});
      } else {
        executor_.Resend(rid);  // a worker answers a rid it has seen from what it has
        ++resent;
      }
    }
  }
  for (uint64_t rid : executor_.StopRidsOn(worker_id)) {
    const Future* f = executor_.Find(rid);
    if (live.count({f->trial_id, f->attempt}) > 0) {
      executor_.Resend(rid);
      ++resent;
    } else if (auto done = executor_.Take(rid, Answer{false, f->trial_id, f->attempt, worker_id})) {
      OnStopDone(*done);  // the actor is gone: stopped
    }
  }
  spdlog::info("worker {} reconnected (incarnation {}): {} live actors, {} requests sent again",
               worker_id, reg.incarnation, reg.live_actors.size(), resent);
}

void TrialRunner::RequeueLostStart(Trial& t, const std::string& why) {
  spdlog::warn("trial {} attempt {}: {}; it starts again (not counted as a failure)", t.trial_id,
               t.attempt, why);
  EndAttempt(t, ActorEnd::kStop);
  if (t.held) {
    book_.SetStatus(t, TrialStatus::kPaused);  // an acknowledged pause outlives the lost start
  } else {
    book_.SetStatus(t, TrialStatus::kPending);
    Enqueue(t);
  }
}

bool TrialRunner::Reattach(Trial& t, const std::string& worker_id,
                           const protocol::LiveActor& live) {
  const int64_t live_iteration = live.iteration;
  const Experiment& e = book_.ExperimentOf(t);
  std::optional<uint64_t> group = groups_.AdoptInUse(e.spec.resources, t.placement, t.trial_id);
  if (!group) {
    // Its recorded placement no longer fits (the worker came back with less):
    // the actor is stopped as a stray and the trial starts again.
    GiveUpReattach(t, "its recorded placement does not fit what the workers offer now");
    return false;
  }
  t.group_id = *group;
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
  // The actor is adopted: the trial holds it from here on, whatever comes
  // next (an exit now releases it).
  if (!SetPhase(t, TrialPhase::kAwaitingReplay)) return true;
  if (live_iteration > t.iteration || live.training) {
    // The actor is ahead (its unacknowledged results come back from its
    // outbox right after REGISTERED) or mid-TRAIN (its batch will follow):
    // decide once they are stored, as the TRAIN's own reply would have.
    t.replay_until = std::max(live_iteration, t.iteration + (live.training ? 1 : 0));
    t.replay_deadline = clock_.NowMs() + 2 * options_.heartbeat_ms * options_.liveness;
    return true;
  }
  // Nothing to wait for. After the commit, so that everything follows
  // REGISTERED.
  DriveAfterReattach(t, SendTiming::kAfterCommit);
  return true;
}

void TrialRunner::GiveUpReattach(Trial& t, const std::string& why) {
  spdlog::info("trial {}: {}; restarting it from its newest checkpoint", t.trial_id, why);
  EndAttempt(t, ActorEnd::kStop);  // no actor was adopted: nothing to stop
  if (t.held) {
    book_.SetStatus(t, TrialStatus::kPaused);  // an acknowledged pause outlives the lost actor
  } else {
    book_.SetStatus(t, TrialStatus::kPending);
    Enqueue(t);
  }
}

void TrialRunner::DriveAfterReattach(Trial& t, SendTiming timing) {
  const bool done = !t.last_result.is_null() && t.last_result.value("done", false);
  if (CheckpointDue(t)) {
    if (!SetPhase(t, TrialPhase::kSaving)) return;
    t.stop_after_save = done;
    executor_.Save(t, CheckpointStorage::kPersistent, TimeoutsFor(t), timing);
  } else if (done) {
    FinishTrial(t, TrialStatus::kTerminated);
  } else if (t.pause_requested) {
    StartPause(t, timing);
  } else if (SetPhase(t, TrialPhase::kTraining)) {
    executor_.ContinueTraining(t, BufferFor(t), TimeoutsFor(t), timing);
  }
}

void TrialRunner::ExpireReattachWaits() {
  if (awaiting_reattach_.empty() && awaiting_replay_.empty()) return;
  const TimeMs now = clock_.NowMs();
  // Collected first: leaving the phase takes the trial out of the set.
  std::vector<Trial*> expired;
  for (const std::string& id : awaiting_reattach_) {
    Trial* t = book_.FindTrial(id);
    CHECK(t != nullptr);  // awaiting_reattach_ holds ids of known trials (SetPhase)
    if (t->reattach_deadline <= now) expired.push_back(t);
  }
  for (Trial* t : expired) {
    GiveUpReattach(*t, "worker " + t->actor_worker + " did not re-attach its actor");
  }
  expired.clear();
  for (const std::string& id : awaiting_replay_) {
    Trial* t = book_.FindTrial(id);
    CHECK(t != nullptr);  // as above
    if (t->replay_deadline <= now) expired.push_back(t);
  }
  for (Trial* t : expired) DriveAfterReattach(*t, SendTiming::kNow);
}

Result<Json> TrialRunner::ResumeExperiment(const std::string& experiment_id,
                                           const std::string& errored, bool unfinished) {
  Experiment* found = book_.FindExperiment(experiment_id);
  if (found == nullptr) return Status::NotFound("unknown experiment '" + experiment_id + "'");
  if (!errored.empty() && errored != "retry" && errored != "restart") {
    return Status::InvalidArgument("errored must be \"retry\" or \"restart\", got '" + errored +
                                   "'");
  }
  Experiment& e = *found;
  Json retried = Json::array(), restarted = Json::array(), terminated = Json::array();
  if (!unfinished) {
    std::vector<std::string> stopped;
    StopExperiment(e, &stopped);
    for (const auto& id : stopped) terminated.push_back(id);
  }
  const std::vector<std::string> ids = e.trial_ids;  // NewTrial appends
  for (const auto& id : ids) {
    Trial& t = book_.TrialRef(id);
    if (t.status != TrialStatus::kError || errored.empty()) continue;
    if (errored == "retry") {
      t.error.clear();
      t.end_time = 0;
      t.memory_checkpoint.clear();
      t.seq = book_.NextSeq();
      book_.SetStatus(t, TrialStatus::kPending);
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
    // Its search, if unfinished, never stopped (the searcher drops a space
    // only when the search or the experiment ends).
    e.finished = false;
  }
  book_.MarkDirty(e);
  MaybeFinishExperiment(e);
  return Json{{"experiment_id", experiment_id},
              {"retried", retried},
              {"restarted", restarted},
              {"terminated", terminated}};
}

}  // namespace ztune::head
