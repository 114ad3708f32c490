#include "head/scheduler_set.h"

namespace ztune::head {

void SchedulerSet::OnExperimentAdd(const Experiment& e) {
  std::unique_ptr<ExperimentScheduler> s = MakeExperimentScheduler(e.spec.scheduler);
  if (s == nullptr) return;
  s->set_checkpoint_lookup(has_checkpoint_);
  by_experiment_[e.experiment_id] = std::move(s);
}

Status SchedulerSet::OnTrialCreate(Trial& t, const StoredResultsReader& stored_results) {
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
  return s->AddTrial(t, stored_results);
}

void SchedulerSet::OnTrialAdd(const Trial& t, const std::string& request_key,
                              const PlacementRequest& request) {
  queue_.Add(t, request_key, request, QueuePriority(t));
  waiting_[t.experiment_id].insert(t.trial_id);
}

void SchedulerSet::OnTrialRemove(const Trial& t) {
  queue_.OnTrialRemove(t);
  auto it = waiting_.find(t.experiment_id);
  if (it == waiting_.end()) return;
  it->second.erase(t.trial_id);
  if (it->second.empty()) waiting_.erase(it);
}

SchedulerDecision SchedulerSet::OnTrialResult(Trial& t, const Json& result) {
  ExperimentScheduler* s = Find(t.experiment_id);
  if (s == nullptr) return SchedulerDecision::kContinue;
  ExperimentView view;
  auto w = waiting_.find(t.experiment_id);
  if (w != waiting_.end()) view.num_waiting = w->second.size();
  view.has_checkpoint = has_checkpoint_;
  const SchedulerDecision d = s->OnTrialResult(t, result, view);
  CollectActions(*s);
  return d;
}

void SchedulerSet::OnTrialComplete(Trial& t) {
  if (ExperimentScheduler* s = Find(t.experiment_id)) {
    s->OnTrialComplete(t);
    CollectActions(*s);
  }
}

void SchedulerSet::OnTrialError(Trial& t) {
  if (ExperimentScheduler* s = Find(t.experiment_id)) {
    s->OnTrialError(t);
    CollectActions(*s);
  }
}

void SchedulerSet::OnTrialPaused(Trial& t) {
  if (ExperimentScheduler* s = Find(t.experiment_id)) {
    s->OnTrialPaused(t);
    CollectActions(*s);
  }
}

bool SchedulerSet::MayQueue(const Trial& t) const {
  const ExperimentScheduler* s = SchedulerOf(t.experiment_id);
  return s == nullptr || s->MayStart(t);
}

std::optional<Exploit> SchedulerSet::TakeExploit(const Trial& t) {
  ExperimentScheduler* s = Find(t.experiment_id);
  return s == nullptr ? std::nullopt : s->TakeExploit(t.trial_id);
}

double SchedulerSet::QueuePriority(const Trial& t) const {
  const ExperimentScheduler* s = SchedulerOf(t.experiment_id);
  return s == nullptr ? 0 : s->QueuePriority(t);
}

std::vector<SchedulerAction> SchedulerSet::TakeActions() {
  std::vector<SchedulerAction> out;
  out.swap(actions_);
  return out;
}

void SchedulerSet::CollectActions(ExperimentScheduler& s) {
  for (SchedulerAction& a : s.TakeActions()) actions_.push_back(std::move(a));
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
