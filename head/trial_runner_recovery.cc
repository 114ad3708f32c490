// TrialRunner, recovery: loading the store at start, re-attaching the live
// actors that workers report after a head restart (with their replayed or
// in-flight results), the re-attach grace, and the experiment resume policies
// (docs/recovery.md).
#include "head/trial_runner.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/printable.h"
#include "head/recovery_policy.h"
#include "head/store_loader.h"
#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {

Status TrialRunner::Load() {
  ASSIGN_OR_RETURN(LoadedStore loaded, LoadStore(store_));
  // The new epoch is committed (HeadServer::Start) before any request goes out.
  epoch_ = loaded.epoch;
  executor_.SetEpoch(epoch_);
  batch_.Put(storage::Family::kMeta, storage::kMetaHeadEpoch, std::to_string(epoch_));
  for (auto& [id, space] : loaded.searching) searcher_.Start(id, std::move(space));
  for (Experiment& e : loaded.experiments) book_.AddExperiment(std::move(e), /*loaded=*/true);
  if (loaded.schema_upgrade_from.has_value()) {
    // A schema-1 store's trials carry their checkpoint records and error_log
    // inline: they move to records of their own below, in this first commit
    // together with the new schema value.
    spdlog::info("store schema {} -> {}: moving the checkpoint records and error logs of {} "
                 "trials to records of their own",
                 *loaded.schema_upgrade_from, storage::kSchemaVersion, loaded.inline_lists.size());
    batch_.Put(storage::Family::kMeta, storage::kMetaSchema,
               std::to_string(storage::kSchemaVersion));
  }
  const TimeMs grace =
      ReattachGraceMs(options_.reattach_grace_ms, options_.heartbeat_ms, options_.liveness);
  for (Trial& t : loaded.trials) {
    const RestartDisposition disposition = DispositionAfterRestart(t);
    const bool changed = disposition == RestartDisposition::kRequeue &&
                         t.status != TrialStatus::kPending;
    if (disposition == RestartDisposition::kRequeue) t.status = TrialStatus::kPending;
    const bool move_lists = loaded.inline_lists.count(t.trial_id) > 0;
    Trial& stored = book_.AddLoadedTrial(std::move(t), changed);
    if (disposition == RestartDisposition::kAwaitReattach) {
      SetPhase(stored, TrialPhase::kAwaitingReattach);
      waits_.AwaitReattach(stored.trial_id, clock_.NowMs() + grace);
    } else if (disposition == RestartDisposition::kRequeue) {
      Enqueue(stored);
    }
    if (move_lists) {
      PutChildRecords(batch_, stored);
      book_.MarkDirty(stored);  // rewritten without the lists at this turn's FlushTo
    }
  }
  std::vector<std::string> ids;
  for (const auto& [id, e] : book_.experiments()) ids.push_back(id);
  for (const std::string& id : ids) MaybeFinishExperiment(*book_.FindExperiment(id));
  spdlog::info("head epoch {}: loaded {} experiments and {} trials from the store", epoch_,
               book_.experiments().size(), book_.num_trials());
  return Status::Ok();
}

void TrialRunner::HandleRegister(const protocol::Register& reg) {
  // Refused registrations change nothing; the worker keeps asking (every
  // heartbeat interval) and the warning says why.
  Result<ResourceSet> offered = WorkerRegistry::CheckOffer(reg);
  if (!offered.ok()) {
    peer_warnings_.Warn("REGISTER of worker '" + reg.worker_id + "' refused: " +
                        offered.status().message());
    return;
  }
  const WorkerId worker(reg.worker_id);  // the seam: CheckOffer and HeadServer checked it
  const WorkerInfo* before = registry_.Find(worker);
  const bool reconnected =
      before != nullptr && before->alive && before->incarnation != reg.incarnation;
  bool fresh = registry_.Register(reg);
  protocol::Registered registered;
  registered.worker_id = worker.str();
  registered.heartbeat_ms = options_.heartbeat_ms;
  registered.liveness = options_.liveness;
  registered.head_epoch = epoch_;
  // Sent before anything below (re-attach TRAINs, STOPs): the worker holds
  // its replies and replays its outbox once it has this.
  sink_.SendToWorker(worker, protocol::Message{registered, {}}, SendTiming::kAfterCommit);
  if (fresh) {
    ledger_.AddWorker(worker, *offered, reg.gpu_ids);
    groups_.NotifyCapacityChanged();
    RecomputeMaxPending();
    spdlog::info("worker {} registered ({} on {}, pid {}): {}, {} live actors",
                 EscapeControl(worker.str()), EscapeControl(reg.name), EscapeControl(reg.host),
                 reg.pid, offered->ToString(),
                 reg.live_actors.size());
  }
  if (reconnected) ReconcileAfterReconnect(reg);
  for (const auto& a : reg.live_actors) {
    const TrialId trial_id(a.trial_id);  // as the worker reports it
    Trial* t = book_.FindTrial(trial_id);
    bool ours = t != nullptr && PhaseHoldsActor(t->phase) && t->attempt == a.attempt &&
                t->worker_id == worker;
    ours = ours || actors_.IsCached(worker, trial_id, a.attempt);
    if (!ours && t != nullptr && t->phase == TrialPhase::kAwaitingReattach &&
        t->attempt == a.attempt && t->actor_worker == worker) {
      ours = Reattach(*t, worker, a);
    }
    if (!ours && t != nullptr && !PhaseHoldsActor(t->phase) && a.attempt > t->attempt) {
      // An attempt the store never saw: a head that crashed between sending
      // CREATE_ACTOR (or RESET) and committing it. Never name it again, or
      // the worker, still holding or stopping that actor, refuses the new
      // one ("already exists") and a healthy trial fails.
      spdlog::info("trial {}: worker {} holds attempt {}, which was never stored; the next "
                   "start uses a later one", t->trial_id, worker, a.attempt);
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
      sink_.SendToWorker(worker, protocol::Message{stop, {}}, SendTiming::kAfterCommit);
    }
  }
}

void TrialRunner::ReconcileAfterReconnect(const protocol::Register& reg) {
  const WorkerId worker_id(reg.worker_id);
  std::map<std::pair<TrialId, uint64_t>, const protocol::LiveActor*> live;
  for (const auto& a : reg.live_actors) live[{TrialId(a.trial_id), a.attempt}] = &a;
  size_t resent = 0;
  for (const TrialId& id : actors_.TrialsOn(worker_id)) {
    Trial* t = book_.FindTrial(id);
    if (t == nullptr || !PhaseHoldsActor(t->phase) || t->worker_id != worker_id) continue;
    auto l = live.find({id, t->attempt});
    if (l == live.end()) {
      // A RESET in flight: the actor may still have its old key.
      if (const CachedActor* r = actors_.ResetOf(id)) l = live.find({r->trial_id, r->attempt});
    }
    std::vector<std::pair<uint64_t, FutureType>> requests;
    for (uint64_t rid : executor_.DriverRidsOf(id)) {
      requests.emplace_back(rid, executor_.Find(rid)->type);
    }
    const ReconnectPlan plan = PlanAfterReconnect(l == live.end() ? nullptr : l->second,
                                                  requests, worker_id, t->attempt);
    switch (plan.action) {
      case ReconnectPlan::Action::kRequeueLostStart: RequeueLostStart(*t, plan.why); break;
      case ReconnectPlan::Action::kFail: FailTrial(*t, plan.why, true); break;
      case ReconnectPlan::Action::kContinue:
        for (uint64_t rid : plan.created) {
          const Future* f = executor_.Find(rid);
          executor_.Take(rid, Answer{false, f->trial_id, f->attempt, f->worker_id});
        }
        for (uint64_t rid : plan.resend) executor_.Resend(rid);
        resent += plan.resend.size();
        break;
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

bool TrialRunner::Reattach(Trial& t, const WorkerId& worker_id,
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
  actors_.Hold(t, worker_id, *group);
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
  if (std::optional<int64_t> until = ReplayTarget(t.iteration, live)) {
    // Its results come back from its outbox right after REGISTERED, or its
    // TRAIN's batch follows: decide once they are stored, as the TRAIN's own
    // reply would have.
    waits_.AwaitReplay(t.trial_id, *until,
                       clock_.NowMs() + TwoLivenessWindowsMs(options_.heartbeat_ms, options_.liveness));
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
  if (waits_.empty()) return;
  const TimeMs now = clock_.NowMs();
  for (const TrialId& id : waits_.ExpiredReattaches(now)) {
    Trial* t = book_.FindTrial(id);
    CHECK(t != nullptr);  // waits_ holds ids of known trials (they leave it with their phase)
    GiveUpReattach(*t, "worker " + t->actor_worker + " did not re-attach its actor");
  }
  for (const TrialId& id : waits_.ExpiredReplays(now)) {
    Trial* t = book_.FindTrial(id);
    CHECK(t != nullptr);  // as above
    DriveAfterReattach(*t, SendTiming::kNow);
  }
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
    std::vector<TrialId> stopped;
    StopExperiment(e, &stopped);
    for (const auto& id : stopped) terminated.push_back(id);
  }
  const std::vector<TrialId> ids = e.trial_ids;  // NewTrial appends
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
