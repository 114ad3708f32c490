#include "head/trial_lifecycle.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/printable.h"
#include "head/trial_records.h"

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

}  // namespace

TrialLifecycle::TrialLifecycle(Parts parts, bool strict_invariants)
    : p_(parts), strict_invariants_(strict_invariants) {}

void TrialLifecycle::IllegalState(const std::string& what) const {
  if (strict_invariants_) {
    spdlog::critical("invariant broken: {}", what);
    spdlog::default_logger()->flush();
    std::abort();
  }
  spdlog::error("refused (a ztune defect; please report it with this line): {}", what);
}

bool TrialLifecycle::SetPhase(Trial& t, TrialPhase to) {
  const TrialPhase from = t.phase;
  if (!IsLegalTransition(from, to)) {
    IllegalState("trial " + t.trial_id + ": illegal phase change " + TrialPhaseName(from) + " -> " +
                 TrialPhaseName(to));
    return false;
  }
  if (from == to) return true;
  switch (from) {
    case TrialPhase::kAwaitingReattach:
    case TrialPhase::kAwaitingReplay: p_.waits.Leave(t.trial_id); break;
    case TrialPhase::kResetting: p_.actors.EndReset(t.trial_id); break;
    case TrialPhase::kSaving: t.stop_after_save = false; break;
    default: break;
  }
  t.phase = to;
  return true;
}

bool TrialLifecycle::SetStatus(Trial& t, TrialStatus to) {
  if (!IsLegalStatusChange(t.status, to)) {
    IllegalState("trial " + t.trial_id + ": illegal status change " + TrialStatusName(t.status) +
                 " -> " + TrialStatusName(to));
    return false;
  }
  p_.book.SetStatus(t, to);
  return true;
}

void TrialLifecycle::EndAttempt(Trial& t, ActorEnd end) {
  if (PhaseHoldsActor(t.phase)) {
    if (end == ActorEnd::kGone) {
      p_.executor.ForgetTrial(t.trial_id);  // their answers can never come
      p_.actors.Clear(t);
    } else {
      p_.actors.Release(t, end == ActorEnd::kReuseOrStop, max_cached_actors_);
    }
  } else if (t.phase == TrialPhase::kAwaitingReattach) {
    // Not adopted: if its worker comes back with the actor, it is stopped as
    // an actor the head does not own.
    t.actor_worker.clear();
    t.placement = Placement{};
  }
  SetPhase(t, TrialPhase::kIdle);
  t.pause_requested = false;
  t.stop_after_save = false;
  p_.book.MarkDirty(t);
}

void TrialLifecycle::CheckInvariants(const Trial& t) const {
  auto broken = [&](const char* what) {
    IllegalState("trial " + t.trial_id + " (" + TrialStatusName(t.status) + ", phase " +
                 TrialPhaseName(t.phase) + "): " + what);
  };
  if ((t.status == TrialStatus::kRunning) != (t.phase != TrialPhase::kIdle)) {
    broken("RUNNING is exactly the phases other than idle");
  }
  const bool holds = PhaseHoldsActor(t.phase);
  if (holds != !t.worker_id.empty() || holds != (t.group_id != 0)) {
    broken("a worker and a group are set exactly while the phase holds an actor");
  }
  if ((t.phase == TrialPhase::kAwaitingReattach) != p_.waits.AwaitingReattach(t.trial_id)) {
    broken("waits_ holds a re-attach wait exactly for the trials awaiting a re-attach");
  }
  if ((t.phase == TrialPhase::kAwaitingReplay) != p_.waits.AwaitingReplay(t.trial_id)) {
    broken("waits_ holds a replay wait exactly for the trials awaiting a replay");
  }
  if ((t.phase == TrialPhase::kResetting) != (p_.actors.ResetOf(t.trial_id) != nullptr)) {
    broken("the actors' RESETs in flight are exactly those of the trials resetting");
  }
  if (t.stop_after_save && t.phase != TrialPhase::kSaving) {
    broken("stop_after_save is set only while saving");
  }
  if (t.pause_requested && t.status != TrialStatus::kRunning) {
    broken("a pause is requested only of a RUNNING trial");
  }
}

void TrialLifecycle::FinishTrial(Trial& t, TrialStatus final_status, ActorEnd end) {
  if (IsFinished(t.status)) return;
  const Experiment& e = p_.book.ExperimentOf(t);
  const bool ok = final_status == TrialStatus::kTerminated;
  if (ok && end == ActorEnd::kStop && PhaseHoldsActor(t.phase) &&
      t.phase != TrialPhase::kResetting && !e.spec.export_formats.empty()) {
    p_.executor.Export(t, e.spec.export_formats);
  }
  if (t.phase == TrialPhase::kIdle &&
      (t.status == TrialStatus::kPending || t.status == TrialStatus::kPaused)) {
    Dequeue(t);
  }
  EndAttempt(t, ok && end == ActorEnd::kStop && e.spec.reuse_actors ? ActorEnd::kReuseOrStop : end);
  DropMemoryCheckpoint(t);
  t.end_time = WallSeconds();
  SetStatus(t, final_status);
  if (final_status == TrialStatus::kError) {
    p_.scheduler.OnTrialError(t);
  } else {
    p_.scheduler.OnTrialComplete(t);
  }
  MaybeFinishExperiment(p_.book.ExperimentOf(t));
}

void TrialLifecycle::FailTrial(Trial& t, const std::string& error, bool retry, ActorEnd end) {
  if (IsFinished(t.status)) return;
  Experiment& e = p_.book.ExperimentOf(t);
  t.num_failures++;
  t.error = error;
  t.error_log.push_back("Failure # " + std::to_string(t.num_failures) + " (occurred at " +
                        DateString() + ")\n" + error);
  PutErrorRecord(p_.batch, t.trial_id, t.error_log.size(), t.error_log.back());
  spdlog::warn("trial {} attempt {} failed (failure #{}): {}", t.trial_id, t.attempt,
               t.num_failures, EscapeControl(error));
  const int64_t max_failures = e.spec.max_failures;
  const bool recover = retry && (max_failures < 0 || t.num_failures <= max_failures);
  // An actor is never reused after an error.
  const ActorEnd actor_end = end == ActorEnd::kGone ? end : ActorEnd::kStop;
  if (!recover) {
    FinishTrial(t, TrialStatus::kError, actor_end);
    if (e.spec.fail_fast) StopExperiment(e, nullptr);
    return;
  }
  EndAttempt(t, actor_end);
  DropMemoryCheckpoint(t);  // retry from the newest persistent checkpoint
  // Ray's _try_recover: restart at once when resources for it are there now
  // (a ready group or a cached actor of its request: it keeps its place, so
  // the next start takes them), else requeue at the end of the queue. Its own
  // group is freed only once its STOP completes, so the end is the usual case.
  const std::string& key = p_.book.ExperimentOf(t).request_key;
  const bool resources_now = p_.groups.HasReady(key) || p_.actors.HasCached(key);
  if (!resources_now) t.seq = p_.book.NextSeq();
  p_.scheduler.OnTrialError(t);  // Ray's _requeue_trial: on_trial_error, then on_trial_add
  StartAgain(t);
}

void TrialLifecycle::StartAgain(Trial& t) {
  if (t.held) {
    SetStatus(t, TrialStatus::kPaused);  // a user's pause outlives the attempt
  } else {
    SetStatus(t, TrialStatus::kPending);
    Enqueue(t);
  }
}

// ---------------------------------------------------------------- queues

Trial& TrialLifecycle::NewTrial(Experiment& e, Json config) {
  Trial& t = p_.book.AddTrial(e, std::move(config));
  // A new trial has no stored state to be damaged.
  const Status taken =
      p_.scheduler.OnTrialCreate(t, [] { return Result<std::vector<Json>>(std::vector<Json>()); });
  CHECK(taken.ok());
  Enqueue(t);
  return t;
}

Experiment& TrialLifecycle::AddExperiment(Experiment e, bool loaded) {
  Experiment& stored = p_.book.AddExperiment(std::move(e), loaded);
  p_.scheduler.OnExperimentAdd(stored);
  return stored;
}

Result<Trial*> TrialLifecycle::AddLoadedTrial(Trial t, bool changed,
                                              const StoredResultsReader& stored_results) {
  RETURN_IF_ERROR(p_.scheduler.OnTrialCreate(t, stored_results));
  return &p_.book.AddLoadedTrial(std::move(t), changed);
}

void TrialLifecycle::Enqueue(Trial& t) {
  // A trial its scheduler holds back (HyperBand: paused at a milestone until
  // its bracket's halving) waits outside the queue until a kRelease.
  if (!p_.scheduler.MayQueue(t)) return;
  const Experiment& e = p_.book.ExperimentOf(t);
  p_.scheduler.OnTrialAdd(t, e.request_key, e.spec.resources);
}

void TrialLifecycle::Dequeue(Trial& t) { p_.scheduler.OnTrialRemove(t); }

void TrialLifecycle::ApplySchedulerActions() {
  // Applying one may make more (a stop completes a trial, whose bracket may
  // then halve): until none is left.
  for (std::vector<SchedulerAction> actions = p_.scheduler.TakeActions(); !actions.empty();
       actions = p_.scheduler.TakeActions()) {
    for (SchedulerAction& a : actions) {
      Trial* t = p_.book.FindTrial(a.trial_id);
      if (t == nullptr) {
        IllegalState("a scheduler decided about unknown trial " + a.trial_id);
        continue;
      }
      t->scheduler_state = std::move(a.state);
      p_.book.MarkDirty(*t);
      if (IsFinished(t->status)) continue;  // ended meanwhile: only its state is kept
      switch (a.kind) {
        case SchedulerAction::Kind::kStop: FinishTrial(*t, TrialStatus::kTerminated); break;
        case SchedulerAction::Kind::kRelease:
          // A trial still pausing is queued when its pause completes
          // (FinishPause); a user's pause holds it.
          if (t->phase == TrialPhase::kIdle && !t->held &&
              (t->status == TrialStatus::kPending || t->status == TrialStatus::kPaused)) {
            Enqueue(*t);
          }
          break;
        case SchedulerAction::Kind::kExploit: {
          std::optional<Exploit> x = p_.scheduler.TakeExploit(*t);
          if (!x) {
            IllegalState("trial " + t->trial_id + ": an exploit action without an exploit");
          } else if (t->phase != TrialPhase::kIdle || t->status != TrialStatus::kPaused ||
                     !apply_exploit_) {
            IllegalState("trial " + t->trial_id + " is " + TrialStatusName(t->status) +
                         ", not an idle PAUSED trial, at its exploit");
          } else {
            apply_exploit_(*t, *x);
          }
          break;
        }
      }
    }
  }
}

void TrialLifecycle::MaybeFinishExperiment(Experiment& e) {
  if (e.finished) return;
  if (e.live_trials == 0 && e.SearchFinished()) {
    e.finished = true;
    p_.searcher.End(e.experiment_id);
    p_.book.MarkDirty(e);
    spdlog::info("experiment {} ({}) finished: {} trials, {} TERMINATED, {} ERROR", e.experiment_id,
                 e.spec.name, e.trial_ids.size(), e.counts[TrialStatus::kTerminated],
                 e.counts[TrialStatus::kError]);
  }
}

void TrialLifecycle::StopExperiment(Experiment& e, std::vector<TrialId>* stopped) {
  e.stopped = true;
  p_.searcher.End(e.experiment_id);
  p_.book.MarkDirty(e);
  for (const auto& id : e.trial_ids) {
    Trial& t = p_.book.TrialRef(id);
    if (IsFinished(t.status)) continue;
    FinishTrial(t, TrialStatus::kTerminated);
    if (stopped != nullptr) stopped->push_back(id);
  }
  MaybeFinishExperiment(e);
}

// ---------------------------------------------------------------- next steps

void TrialLifecycle::ContinueTraining(Trial& t, SendTiming timing) {
  if (!SetPhase(t, TrialPhase::kTraining)) return;
  p_.executor.ContinueTraining(t, BufferFor(t), TimeoutsFor(t), timing);
}

void TrialLifecycle::ContinueOrPause(Trial& t, SendTiming train_timing) {
  if (t.pause_requested) {
    StartPause(t);
  } else {
    ContinueTraining(t, train_timing);
  }
}

void TrialLifecycle::StartPause(Trial& t, SendTiming timing) {
  if (!SetPhase(t, TrialPhase::kPausing)) return;
  t.pause_requested = false;
  p_.executor.Save(t, CheckpointStorage::kMemory, TimeoutsFor(t), timing);
}

void TrialLifecycle::DropMemoryCheckpoint(Trial& t) {
  if (drop_memory_checkpoint_) {
    drop_memory_checkpoint_(t);
  } else {
    t.memory_checkpoint.clear();
  }
}

void TrialLifecycle::FinishPause(Trial& t, std::string memory_checkpoint) {
  const Experiment& e = p_.book.ExperimentOf(t);
  EndAttempt(t, e.spec.reuse_actors ? ActorEnd::kReuseOrStop : ActorEnd::kStop);
  t.memory_checkpoint = std::move(memory_checkpoint);
  SetStatus(t, TrialStatus::kPaused);
  p_.scheduler.OnTrialPaused(t);  // synchronous PBT: the population may sync now
  if (!t.held) Enqueue(t);
}

void TrialLifecycle::SaveCheckpoint(Trial& t, bool then_stop, SendTiming timing) {
  if (!SetPhase(t, TrialPhase::kSaving)) return;
  t.stop_after_save = then_stop;
  p_.executor.Save(t, CheckpointStorage::kPersistent, TimeoutsFor(t), timing);
}

bool TrialLifecycle::CheckpointDue(const Trial& t) const {
  return CheckpointManager::Due(t, p_.book.ExperimentOf(t).spec.checkpoint);
}

TrainBuffer TrialLifecycle::BufferFor(const Trial& t) const {
  const ExperimentSpec& spec = p_.book.ExperimentOf(t).spec;
  TrainBuffer b;
  b.length = spec.result_buffer_length;
  // One result per TRAIN for schedulers that judge a given result (Ray forces
  // it for HyperBand; PBT here too: SchedulerSpec::SupportsBufferedResults).
  if (!spec.scheduler.SupportsBufferedResults()) b.length = 1;
  if (b.length > 1 && spec.checkpoint.at_end) b.length = 1;
  if (b.length > 1 && spec.checkpoint.frequency > 0) {
    b.length = std::min(b.length, spec.checkpoint.frequency);
  }
  b.time_s = p_.executor.BufferTime(spec.result_buffer_min_time_s, spec.result_buffer_max_time_s);
  return b;
}

RequestTimeouts TrialLifecycle::TimeoutsFor(const Trial& t) const {
  const RequestTimeoutsSpec& spec = p_.book.ExperimentOf(t).spec.timeouts;
  auto ms = [](double s) { return static_cast<TimeMs>(s * 1000.0); };  // s <= 1e7: exact
  return RequestTimeouts{ms(spec.setup_s), ms(spec.step_s), ms(spec.checkpoint_s)};
}

}  // namespace ztune::head
