#include "head/trial_recovery.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/printable.h"
#include "head/recovery_policy.h"
#include "head/store_loader.h"
#include "common/json_parse.h"
#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {

Status TrialRecovery::Load() {
  ASSIGN_OR_RETURN(LoadedStore loaded, LoadStore(p_.store));
  // The new epoch is committed (HeadServer::Start) before any request goes out.
  epoch_ = loaded.epoch;
  p_.executor.SetEpoch(epoch_);
  p_.batch.Put(storage::Family::kMeta, storage::kMetaHeadEpoch, std::to_string(epoch_));
  for (Experiment& e : loaded.experiments) {
    if (auto space = loaded.searching.find(e.experiment_id); space != loaded.searching.end()) {
      p_.searcher.Start(e.experiment_id, e.spec.search_alg, std::move(space->second));
    }
    p_.lifecycle.AddExperiment(std::move(e), /*loaded=*/true);
  }
  if (loaded.schema_upgrade_from.has_value()) {
    // A schema-1 store's trials carry their checkpoint records and error_log
    // inline: they move to records of their own below, in this first commit
    // together with the new schema value. Schema 3 (msgpack results) needs
    // no rewrite: results already stored stay JSON text, read as such.
    spdlog::info(
        "store schema {} -> {}: {} trials' checkpoint records and error logs moved to records "
        "of their own; results stored from now on as msgpack",
        *loaded.schema_upgrade_from, storage::kSchemaVersion, loaded.inline_lists.size());
    p_.batch.Put(storage::Family::kMeta, storage::kMetaSchema,
                 std::to_string(storage::kSchemaVersion));
  }
  const TimeMs grace =
      ReattachGraceMs(options_.reattach_grace_ms, options_.heartbeat_ms, options_.liveness);
  // Queued once every trial is in: whether a scheduler holds one back may
  // depend on the others (HyperBand's halvings are its bracket's largest).
  std::vector<Trial*> requeue;
  p_.book.ReserveTrials(p_.book.num_trials() + loaded.trials.size());
  for (Trial& t : loaded.trials) {
    const RestartDisposition disposition = DispositionAfterRestart(t);
    const bool changed =
        disposition == RestartDisposition::kRequeue && t.status == TrialStatus::kRunning;
    // A trial a scheduler paused stays PAUSED: it keeps its place in the
    // queue behind the PENDING ones (its memory checkpoint is gone; it
    // starts from its newest persistent one), so the trials run in the
    // order the uninterrupted head would run them.
    if (disposition == RestartDisposition::kRequeue && t.status == TrialStatus::kRunning) {
      t.status = TrialStatus::kPending;
    }
    // Only an actor that comes back can still be paused.
    if (disposition != RestartDisposition::kAwaitReattach) t.pause_requested = false;
    const bool move_lists = loaded.inline_lists.count(t.trial_id) > 0;
    const TrialId id = t.trial_id;
    ASSIGN_OR_RETURN(Trial * added, p_.lifecycle.AddLoadedTrial(std::move(t), changed, [&] {
      return ReadStoredResults(p_.store, id);
    }));
    Trial& stored = *added;
    if (disposition == RestartDisposition::kAwaitReattach) {
      p_.lifecycle.SetPhase(stored, TrialPhase::kAwaitingReattach);
      p_.waits.AwaitReattach(stored.trial_id, stored.actor_worker, p_.clock.NowMs() + grace);
    } else if (disposition == RestartDisposition::kRequeue) {
      requeue.push_back(&stored);
    }
    if (move_lists) {
      PutChildRecords(p_.batch, stored);
      p_.book.MarkDirty(stored);  // rewritten without the lists at this turn's FlushTo
    }
  }
  for (Trial* t : requeue) p_.lifecycle.Enqueue(*t);
  std::vector<std::string> ids;
  for (const auto& [id, e] : p_.book.experiments()) ids.push_back(id);
  for (const std::string& id : ids) p_.lifecycle.MaybeFinishExperiment(*p_.book.FindExperiment(id));
  spdlog::info("head epoch {}: loaded {} experiments and {} trials from the store", epoch_,
               p_.book.experiments().size(), p_.book.num_trials());
  return Status::Ok();
}

void TrialRecovery::OnRegistered(const protocol::Register& reg, bool reconnected) {
  const WorkerId worker(reg.worker_id);  // checked at the seam (HandleRegister)
  if (reconnected) ReconcileAfterReconnect(reg);
  // Two passes: every awaited actor is adopted before any other reported
  // actor can change its trial (a later attempt raises the trial's attempt,
  // which listed first made the awaited one look stray).
  std::vector<const protocol::LiveActor*> strays;
  for (const auto& a : reg.live_actors) {
    const TrialId trial_id(a.trial_id);  // as the worker reports it
    Trial* t = p_.book.FindTrial(trial_id);
    bool ours = t != nullptr && PhaseHoldsActor(t->phase) && t->attempt == a.attempt &&
                t->worker_id == worker;
    ours = ours || p_.actors.IsCached(worker, trial_id, a.attempt);
    if (!ours && t != nullptr && t->phase == TrialPhase::kAwaitingReattach &&
        t->attempt == a.attempt && t->actor_worker == worker) {
      ours = Reattach(*t, worker, a);
    }
    if (!ours) strays.push_back(&a);
  }
  for (const protocol::LiveActor* a : strays) {
    Trial* t = p_.book.FindTrial(TrialId(a->trial_id));
    if (t != nullptr && !PhaseHoldsActor(t->phase) && a->attempt > t->attempt) {
      // An attempt the store never saw: a head that crashed between sending
      // CREATE_ACTOR (or RESET) and committing it. Never name it again, or
      // the worker, still holding or stopping that actor, refuses the new
      // one ("already exists") and a healthy trial fails.
      spdlog::info(
          "trial {}: worker {} holds attempt {}, which was never stored; the next "
          "start uses a later one",
          t->trial_id, worker, a->attempt);
      t->attempt = a->attempt;
      p_.book.MarkDirty(*t);
    }
    // An actor the head does not own (its trial moved on, finished, or is
    // unknown after a restart): it must not keep running.
    protocol::Stop stop;  // rid 0: no reply wanted
    stop.trial_id = a->trial_id;
    stop.attempt = a->attempt;
    stop.kill_after_ms = options_.force_cleanup_ms;
    p_.sink.SendToWorker(worker, protocol::Message{stop, {}}, SendTiming::kAfterCommit);
  }
  // A REGISTER lists every actor the worker hosts, so an awaited actor it did
  // not list is gone: a CREATE_ACTOR or RESET the crashed head committed but
  // never sent, or an actor that ended while no head listened. Waiting out the
  // grace would only keep the trial from its turn while the others run on
  // (and a scheduler that ranks trials, PBT, decide otherwise than the
  // uninterrupted head would have).
  for (const TrialId& id : p_.waits.ReattachesOn(worker)) {
    Trial* t = p_.book.FindTrial(id);
    CHECK(t != nullptr);  // waits hold ids of known trials (they leave it with their phase)
    GiveUpReattach(*t, "worker " + worker.str() + " registered without its actor (attempt " +
                           std::to_string(t->attempt) + ")");
  }
}

void TrialRecovery::ReconcileAfterReconnect(const protocol::Register& reg) {
  const WorkerId worker_id(reg.worker_id);
  std::map<std::pair<TrialId, uint64_t>, const protocol::LiveActor*> live;
  for (const auto& a : reg.live_actors) live[{TrialId(a.trial_id), a.attempt}] = &a;
  size_t resent = 0;
  for (const TrialId& id : p_.actors.TrialsOn(worker_id)) {
    Trial* t = p_.book.FindTrial(id);
    if (t == nullptr || !PhaseHoldsActor(t->phase) || t->worker_id != worker_id) continue;
    auto l = live.find({id, t->attempt});
    if (l == live.end()) {
      // A RESET in flight: the actor may still have its old key.
      if (const CachedActor* r = p_.actors.ResetOf(id)) l = live.find({r->trial_id, r->attempt});
    }
    std::vector<std::pair<uint64_t, FutureType>> requests;
    for (uint64_t rid : p_.executor.DriverRidsOf(id)) {
      requests.emplace_back(rid, p_.executor.Find(rid)->type);
    }
    const ReconnectPlan plan =
        PlanAfterReconnect(l == live.end() ? nullptr : l->second, requests, worker_id, t->attempt);
    switch (plan.action) {
      case ReconnectPlan::Action::kRequeueLostStart: RequeueLostStart(*t, plan.why); break;
      case ReconnectPlan::Action::kFail: p_.lifecycle.FailTrial(*t, plan.why, true); break;
      case ReconnectPlan::Action::kContinue:
        for (uint64_t rid : plan.created) {
          const Future* f = p_.executor.Find(rid);
          p_.executor.Take(rid, Answer{false, f->trial_id, f->attempt, f->worker_id});
        }
        for (uint64_t rid : plan.resend) p_.executor.Resend(rid);
        resent += plan.resend.size();
        break;
    }
  }
  for (uint64_t rid : p_.executor.StopRidsOn(worker_id)) {
    const Future* f = p_.executor.Find(rid);
    if (live.count({f->trial_id, f->attempt}) > 0) {
      p_.executor.Resend(rid);
      ++resent;
    } else if (auto done =
                   p_.executor.Take(rid, Answer{false, f->trial_id, f->attempt, worker_id})) {
      p_.actors.OnStopDone(*done);  // the actor is gone: stopped
    }
  }
  spdlog::info("worker {} reconnected (incarnation {}): {} live actors, {} requests sent again",
               worker_id, reg.incarnation, reg.live_actors.size(), resent);
}

void TrialRecovery::RequeueLostStart(Trial& t, const std::string& why) {
  spdlog::warn("trial {} attempt {}: {}; it starts again (not counted as a failure)", t.trial_id,
               t.attempt, why);
  p_.lifecycle.EndAttempt(t, ActorEnd::kStop);
  p_.lifecycle.StartAgain(t);
}

bool TrialRecovery::Reattach(Trial& t, const WorkerId& worker_id, const protocol::LiveActor& live) {
  const int64_t live_iteration = live.iteration;
  // The checkpoint this attempt's actor was started from: the trial's own
  // newest one not given up, else (no result of its own yet) restore_from's.
  const Trial* source = t.restore_from.empty() ? nullptr : p_.book.FindTrial(t.restore_from);
  const CheckpointRecord* own = t.NewestCheckpoint();
  const CheckpointRecord* start = own != nullptr && own->id > t.checkpoints_given_up_through ? own
                                  : own == nullptr && t.iteration == 0 && source != nullptr
                                      ? source->NewestCheckpoint()
                                      : nullptr;
  if (start != nullptr && live_iteration < start->iteration) {
    // An actor behind the checkpoint it was started from never finished its
    // RESTORE (the head died while the checkpoint streamed): its results
    // would start over from its own iteration. It goes; the trial restores
    // again.
    GiveUpReattach(t, "its actor is at iteration " + std::to_string(live_iteration) +
                          ", behind the checkpoint at iteration " +
                          std::to_string(start->iteration) + " it was started from");
    return false;
  }
  const Experiment& e = p_.book.ExperimentOf(t);
  std::optional<uint64_t> group = p_.groups.AdoptInUse(e.spec.resources, e.request_key, t.placement, t.trial_id);
  if (!group) {
    // Its recorded placement no longer fits (the worker came back with less):
    // the actor is stopped as a stray and the trial starts again.
    GiveUpReattach(t, "its recorded placement does not fit what the workers offer now");
    return false;
  }
  p_.actors.Hold(t, worker_id, *group);
  // Its own checkpoints are never ahead of its stored results; another
  // trial's (restore_from, before any result of its own) is.
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
  if (!p_.lifecycle.SetPhase(t, TrialPhase::kAwaitingReplay)) return true;
  if (std::optional<int64_t> until = ReplayTarget(t.iteration, live)) {
    // Its results come back from its outbox right after REGISTERED, or its
    // TRAIN's batch follows: decide once they are stored, as the TRAIN's own
    // reply would have.
    p_.waits.AwaitReplay(
        t.trial_id, *until,
        p_.clock.NowMs() + TwoLivenessWindowsMs(options_.heartbeat_ms, options_.liveness));
    return true;
  }
  // Nothing to wait for. After the commit, so that everything follows
  // REGISTERED.
  DriveAfterReattach(t, SendTiming::kAfterCommit);
  return true;
}

void TrialRecovery::GiveUpReattach(Trial& t, const std::string& why) {
  spdlog::info("trial {}: {}; restarting it from its newest checkpoint", t.trial_id, why);
  p_.lifecycle.EndAttempt(t, ActorEnd::kStop);  // no actor was adopted: nothing to stop
  p_.lifecycle.StartAgain(t);
}

void TrialRecovery::DriveAfterReattach(Trial& t, SendTiming timing) {
  const bool done = !t.last_result.is_null() && t.last_result.Get().value("done", false);
  if (p_.lifecycle.CheckpointDue(t)) {
    p_.lifecycle.SaveCheckpoint(t, /*then_stop=*/done, timing);
  } else if (done) {
    p_.lifecycle.FinishTrial(t, TrialStatus::kTerminated);
  } else if (t.pause_requested) {
    p_.lifecycle.StartPause(t, timing);
  } else {
    p_.lifecycle.ContinueTraining(t, timing);
  }
}

void TrialRecovery::ExpireWaits() {
  if (p_.waits.empty()) return;
  const TimeMs now = p_.clock.NowMs();
  for (const TrialId& id : p_.waits.ExpiredReattaches(now)) {
    Trial* t = p_.book.FindTrial(id);
    CHECK(t != nullptr);  // waits_ holds ids of known trials (they leave it with their phase)
    GiveUpReattach(*t, "worker " + t->actor_worker + " did not re-attach its actor");
  }
  for (const TrialId& id : p_.waits.ExpiredReplays(now)) {
    Trial* t = p_.book.FindTrial(id);
    CHECK(t != nullptr);  // as above
    DriveAfterReattach(*t, SendTiming::kNow);
  }
}

Result<Json> TrialRecovery::ResumeExperiment(const std::string& experiment_id,
                                             const std::string& errored, bool unfinished) {
  Experiment* found = p_.book.FindExperiment(experiment_id);
  if (found == nullptr) return Status::NotFound("unknown experiment '" + experiment_id + "'");
  if (!errored.empty() && errored != "retry" && errored != "restart") {
    return Status::InvalidArgument("errored must be \"retry\" or \"restart\", got '" + errored +
                                   "'");
  }
  Experiment& e = *found;
  Json retried = Json::array(), restarted = Json::array(), terminated = Json::array();
  if (!unfinished) {
    std::vector<TrialId> stopped;
    p_.lifecycle.StopExperiment(e, &stopped);
    for (const auto& id : stopped) terminated.push_back(id);
  }
  const std::vector<TrialId> ids = e.trial_ids;  // NewTrial appends
  for (const auto& id : ids) {
    Trial& t = p_.book.TrialRef(id);
    if (t.status != TrialStatus::kError || errored.empty()) continue;
    // Restarted before: its fresh trial stands for it.
    if (!t.restarted_as.empty()) continue;
    if (errored == "retry") {
      t.error.clear();
      t.end_time = 0;
      p_.lifecycle.DropMemoryCheckpoint(t);
      t.seq = p_.book.NextSeq();
      p_.lifecycle.SetStatus(t, TrialStatus::kPending);
      p_.lifecycle.Enqueue(t);
      retried.push_back(id);
    } else {
      Trial& fresh = p_.lifecycle.NewTrial(e, t.config);
      e.added_trials++;
      // NewTrial may have grown the book: `t` is looked up again.
      Trial& original = p_.book.TrialRef(id);
      original.restarted_as = fresh.trial_id;
      p_.book.MarkDirty(original);
      restarted.push_back(Json{{"from", id}, {"trial_id", fresh.trial_id}});
    }
  }
  if (!retried.empty() || !restarted.empty()) {
    // Its search, if unfinished, never stopped (the searcher drops a space
    // only when the search or the experiment ends).
    e.finished = false;
  }
  p_.book.MarkDirty(e);
  p_.lifecycle.MaybeFinishExperiment(e);
  return Json{{"experiment_id", experiment_id},
              {"retried", retried},
              {"restarted", restarted},
              {"terminated", terminated}};
}

}  // namespace ztune::head
