// TrialRunner, actor reuse and pausing: starting a trial on a cached actor
// (RESET) and pause/resume with memory checkpoints.
#include "head/trial_runner.h"

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "storage/keys.h"

namespace ztune::head {

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
