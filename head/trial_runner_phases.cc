// TrialRunner, the trial state machine: SetPhase (the only writer of a
// trial's phase, checked against trial_phase.h's table), EndAttempt (the
// single exit from every phase), the invariant checks, and the two ways an
// attempt ends for good or for a retry (FinishTrial, FailTrial).
#include <cstdlib>
#include <ctime>
#include <string>

#include <spdlog/spdlog.h>

#include "common/printable.h"
#include "head/trial_records.h"
#include "head/trial_runner.h"

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

void TrialRunner::IllegalState(const std::string& what) const {
  if (options_.strict_invariants) {
    spdlog::critical("invariant broken: {}", what);
    spdlog::default_logger()->flush();
    std::abort();
  }
  spdlog::error("refused (a ztune defect; please report it with this line): {}", what);
}

bool TrialRunner::SetPhase(Trial& t, TrialPhase to) {
  const TrialPhase from = t.phase;
  if (!IsLegalTransition(from, to)) {
    IllegalState("trial " + t.trial_id + ": illegal phase change " + TrialPhaseName(from) +
                 " -> " + TrialPhaseName(to));
    return false;
  }
  if (from == to) return true;
  switch (from) {
    case TrialPhase::kAwaitingReattach:
    case TrialPhase::kAwaitingReplay: waits_.Leave(t.trial_id); break;
    case TrialPhase::kResetting: actors_.EndReset(t.trial_id); break;
    case TrialPhase::kSaving: t.stop_after_save = false; break;
    default: break;
  }
  t.phase = to;
  return true;
}

void TrialRunner::EndAttempt(Trial& t, ActorEnd end) {
  if (PhaseHoldsActor(t.phase)) {
    if (end == ActorEnd::kGone) {
      executor_.ForgetTrial(t.trial_id);  // their answers can never come
      actors_.Clear(t);
    } else {
      actors_.Release(t, end == ActorEnd::kReuseOrStop, max_pending_);
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
  book_.MarkDirty(t);
}

void TrialRunner::CheckInvariants(const Trial& t) const {
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
  if ((t.phase == TrialPhase::kAwaitingReattach) != waits_.AwaitingReattach(t.trial_id)) {
    broken("waits_ holds a re-attach wait exactly for the trials awaiting a re-attach");
  }
  if ((t.phase == TrialPhase::kAwaitingReplay) != waits_.AwaitingReplay(t.trial_id)) {
    broken("waits_ holds a replay wait exactly for the trials awaiting a replay");
  }
  if ((t.phase == TrialPhase::kResetting) != (actors_.ResetOf(t.trial_id) != nullptr)) {
    broken("the actors' RESETs in flight are exactly those of the trials resetting");
  }
  if (t.stop_after_save && t.phase != TrialPhase::kSaving) {
    broken("stop_after_save is set only while saving");
  }
  if (t.pause_requested && t.status != TrialStatus::kRunning) {
    broken("a pause is requested only of a RUNNING trial");
  }
}

void TrialRunner::FinishTrial(Trial& t, TrialStatus final_status, ActorEnd end) {
  if (IsFinished(t.status)) return;
  const Experiment& e = book_.ExperimentOf(t);
  const bool ok = final_status == TrialStatus::kTerminated;
  if (ok && end == ActorEnd::kStop && PhaseHoldsActor(t.phase) &&
      t.phase != TrialPhase::kResetting && !e.spec.export_formats.empty()) {
    executor_.Export(t, e.spec.export_formats);
  }
  if (t.phase == TrialPhase::kIdle &&
      (t.status == TrialStatus::kPending || t.status == TrialStatus::kPaused)) {
    Dequeue(t);
  }
  EndAttempt(t, ok && end == ActorEnd::kStop && e.spec.reuse_actors ? ActorEnd::kReuseOrStop
                                                                    : end);
  t.memory_checkpoint.clear();
  t.end_time = WallSeconds();
  book_.SetStatus(t, final_status);
  if (final_status == TrialStatus::kError) {
    scheduler_->OnTrialError(t);
  } else {
    scheduler_->OnTrialComplete(t);
  }
  MaybeFinishExperiment(book_.ExperimentOf(t));
}

void TrialRunner::FailTrial(Trial& t, const std::string& error, bool retry, ActorEnd end) {
  if (IsFinished(t.status)) return;
  Experiment& e = book_.ExperimentOf(t);
  t.num_failures++;
  t.error = error;
  t.error_log.push_back("Failure # " + std::to_string(t.num_failures) + " (occurred at " +
                        DateString() + ")\n" + error);
  PutErrorRecord(batch_, t.trial_id, t.error_log.size(), t.error_log.back());
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
  t.memory_checkpoint.clear();  // retry from the newest persistent checkpoint
  // Ray's _try_recover: restart at once when resources for it are there now
  // (a ready group or a cached actor of its request: it keeps its place, so
  // the next start takes them), else requeue at the end of the queue. Its own
  // group is freed only once its STOP completes, so the end is the usual case.
  const std::string& key = RequestKeyOf(t);
  const bool resources_now = groups_.HasReady(key) || actors_.HasCached(key);
  if (!resources_now) t.seq = book_.NextSeq();
  scheduler_->OnTrialError(t);  // Ray's _requeue_trial: on_trial_error, then on_trial_add
  book_.SetStatus(t, TrialStatus::kPending);
  Enqueue(t);
}

}  // namespace ztune::head
