// TrialRunner, actor reuse and pausing: starting a trial on a cached actor
// (RESET) and pause/resume with memory checkpoints.
#include "head/trial_runner.h"

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "storage/keys.h"

namespace ztune::head {

void TrialRunner::StartTrialOnCachedActor(Trial& t, const CachedActor& actor) {
  actors_.BeginReset(t.trial_id, actor);
  if (!lifecycle_.SetPhase(t, TrialPhase::kResetting)) {
    actors_.EndReset(t.trial_id);
    executor_.StopActorKey(actor.worker_id, actor.trial_id, actor.attempt, actor.group_id,
                           actors_.KillAfterMs(book_.ExperimentOf(t)));
    return;
  }
  lifecycle_.Dequeue(t);
  t.attempt++;
  actors_.Hold(t, actor.worker_id, actor.group_id);
  if (const auto* g = groups_.Find(actor.group_id)) t.placement = g->placement;
  groups_.AssignCached(actor.group_id, t.trial_id);
  if (t.start_time == 0) t.start_time = WallSeconds();
  book_.SetStatus(t, TrialStatus::kRunning);
  executor_.Reset(t, actor.trial_id, actor.attempt, lifecycle_.TimeoutsFor(t));
}

void TrialRunner::OnResetReply(Trial& t, const protocol::Reply& reply) {
  const CachedActor* resetting = actors_.ResetOf(t.trial_id);
  if (resetting == nullptr) return;
  const CachedActor old = *resetting;
  bool accepted = reply.ok && reply.data.is_object() && reply.data.value("reset", false);
  if (accepted) {
    if (!lifecycle_.SetPhase(t, TrialPhase::kStarting)) return;
    std::string bytes;
    std::string* checkpoint = CheckpointFor(t, bytes);
    executor_.ResumeOnActor(t, checkpoint, lifecycle_.BufferFor(t), lifecycle_.TimeoutsFor(t));
    return;
  }
  // The actor kept its old key (or is gone): stop it under that key, which
  // frees its group when done.
  executor_.StopActorKey(old.worker_id, old.trial_id, old.attempt, old.group_id,
                         actors_.KillAfterMs(book_.ExperimentOf(t)));
  std::string why = reply.ok ? std::string("Trainable runner reuse requires reset_config() to be "
                                           "implemented and return True.")
                             : "actor reuse failed: " + reply.error;
  lifecycle_.FailTrial(t, why, false, ActorEnd::kGone);
}

Status TrialRunner::PauseTrial(const TrialId& trial_id, bool hold) {
  Trial* t = book_.FindTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  switch (t->status) {
    case TrialStatus::kTerminated:
    case TrialStatus::kError:
      return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status));
    case TrialStatus::kRunning:
      t->pause_requested = true;
      t->held = hold;
      book_.MarkDirty(*t);
      return Status::Ok();
    case TrialStatus::kPending:
    case TrialStatus::kPaused:
      if (!hold) return Status::Ok();
      lifecycle_.Dequeue(*t);
      book_.SetStatus(*t, TrialStatus::kPaused);
      t->held = true;
      book_.MarkDirty(*t);
      return Status::Ok();
  }
  return Status::Ok();
}

Status TrialRunner::Resume(const TrialId& trial_id) {
  Trial* t = book_.FindTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  if (t->status == TrialStatus::kRunning && t->pause_requested) {
    t->pause_requested = false;  // not paused yet: carry on
    t->held = false;
    book_.MarkDirty(*t);  // `held` is stored: a restart would bring the pause back
    return Status::Ok();
  }
  if (t->status != TrialStatus::kPaused) {
    return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status) +
                                      ", not PAUSED");
  }
  if (t->held) {
    t->held = false;
    book_.MarkDirty(*t);
    lifecycle_.Enqueue(*t);
  }
  return Status::Ok();
}

void TrialRunner::OnPauseSaved(Trial& t, const std::string& payload) {
  const Experiment& e = book_.ExperimentOf(t);
  lifecycle_.EndAttempt(t, e.spec.reuse_actors ? ActorEnd::kReuseOrStop : ActorEnd::kStop);
  t.memory_checkpoint = payload;
  book_.SetStatus(t, TrialStatus::kPaused);
  if (!t.held) lifecycle_.Enqueue(t);
}

}  // namespace ztune::head
