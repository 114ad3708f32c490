// SchedulerSet: the head's TrialScheduler. One FIFO queue of waiting trials
// for every experiment (Ray's FIFOScheduler choose_trial_to_run: the first
// PENDING trial that fits, else the first PAUSED one), and for each
// experiment whose spec names one, its own ExperimentScheduler (ASHA, ...)
// for the decisions on that experiment's results. An experiment without one
// continues at every result.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "head/experiment_scheduler.h"
#include "head/fifo_scheduler.h"
#include "head/trial_scheduler.h"

namespace ztune::head {

class SchedulerSet final : public TrialScheduler {
 public:
  void OnExperimentAdd(const Experiment& e) override;
  Status OnTrialCreate(Trial& t, const StoredResultsReader& stored_results) override;
  void OnTrialAdd(const Trial& t, const std::string& request_key,
                  const PlacementRequest& request) override;
  void OnTrialRemove(const Trial& t) override;
  SchedulerDecision OnTrialResult(Trial& t, const Json& result) override;
  // Only an experiment with a scheduler judges results (FIFO does not).
  bool JudgesResults(const Trial& t) const override {
    return SchedulerOf(t.experiment_id) != nullptr;
  }
  void OnTrialComplete(Trial& t) override;
  void OnTrialError(Trial& t) override;
  void OnTrialPaused(Trial& t) override;
  bool MayQueue(const Trial& t) const override;
  std::vector<SchedulerAction> TakeActions() override;
  std::optional<Exploit> TakeExploit(const Trial& t) override;
  // How a scheduler learns whether a trial has a stored checkpoint at an
  // iteration (ExperimentView::has_checkpoint); set by the runner.
  void set_checkpoint_lookup(std::function<bool(const TrialId&, int64_t)> lookup) override {
    has_checkpoint_ = std::move(lookup);
  }
  double QueuePriority(const Trial& t) const override;
  std::optional<TrialId> ChooseTrialToRun(
      const std::function<bool(const std::string& key)>& has_resources) const override {
    return queue_.ChooseTrialToRun(has_resources);
  }
  void ForEachWaitingRequest(
      const std::function<void(const std::string& key, const PlacementRequest& request,
                               size_t waiting)>& fn) const override {
    queue_.ForEachWaitingRequest(fn);
  }
  size_t NumWaiting(const std::string& request_key) const override {
    return queue_.NumWaiting(request_key);
  }
  void ForgetRequest(const std::string& request_key) override { queue_.ForgetRequest(request_key); }

  // The scheduler of an experiment; nullptr under FIFO (or unknown).
  const ExperimentScheduler* SchedulerOf(const std::string& experiment_id) const;

 private:
  ExperimentScheduler* Find(const std::string& experiment_id);
  // Moves what `s` decided about other trials into actions_.
  void CollectActions(ExperimentScheduler& s);

  FifoScheduler queue_;
  // By experiment id; only experiments whose spec names a scheduler. Kept
  // for finished experiments too: `resume` may run their trials again.
  std::unordered_map<std::string, std::unique_ptr<ExperimentScheduler>> by_experiment_;
  // By experiment id: its trials in queue_ (ExperimentView::num_waiting).
  // An experiment's entry goes when its last waiting trial leaves.
  std::unordered_map<std::string, std::unordered_set<TrialId>> waiting_;
  std::vector<SchedulerAction> actions_;  // until TakeActions
  std::function<bool(const TrialId&, int64_t)> has_checkpoint_;
};

}  // namespace ztune::head
