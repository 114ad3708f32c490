#include "head/scheduler_set.h"

namespace ztune::head {

void SchedulerSet::OnExperimentAdd(const Experiment& e) {
  std::unique_ptr<ExperimentScheduler> s = MakeExperimentScheduler(e.spec.scheduler);
  if (s != nullptr) by_experiment_[e.experiment_id] = std::move(s);
}

Status SchedulerSet::OnTrialCreate(Trial& t) {
  ExperimentScheduler* s = Find(t.experiment_id);
  if (s == nullptr) {
    // Under FIFO a trial has no scheduler state; a stored one is left over
    // from nothing we write, so it is damage.
    if (!t.scheduler_state.is_null()) {
      return Status::Corruption("trial " + t.trial_id +
                                ": scheduler state stored, but its experiment uses fifo");
    }
    return Status::Ok();
  }
  return s->AddTrial(t);
}

SchedulerDecision SchedulerSet::OnTrialResult(Trial& t, const Json& result) {
  ExperimentScheduler* s = Find(t.experiment_id);
  return s == nullptr ? SchedulerDecision::kContinue : s->OnTrialResult(t, result);
}

void SchedulerSet::OnTrialComplete(Trial& t) {
  if (ExperimentScheduler* s = Find(t.experiment_id)) s->OnTrialComplete(t);
}

const ExperimentScheduler* SchedulerSet::SchedulerOf(const std::string& experiment_id) const {
  auto it = by_experiment_.find(experiment_id);
  return it == by_experiment_.end() ? nullptr : it->second.get();
}

ExperimentScheduler* SchedulerSet::Find(const std::string& experiment_id) {
  auto it = by_experiment_.find(experiment_id);
  return it == by_experiment_.end() ? nullptr : it->second.get();
}

}  // namespace ztune::head
