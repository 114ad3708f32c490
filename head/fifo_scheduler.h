// FifoScheduler: Ray's FIFOScheduler. Every result continues; the next trial
// to run is the first PENDING one (in queue order) whose request has
// resources, else the first PAUSED one (with a priority, the lowest first:
// PBT's least trained trial). One ordered queue per request shape,
// so a choice costs O(request shapes), never O(trials); a shape without
// resources never blocks another.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common/ids.h"
#include "head/trial_scheduler.h"

namespace ztune::head {

class FifoScheduler final : public TrialScheduler {
 public:
  void OnTrialAdd(const Trial& t, const std::string& request_key,
                  const PlacementRequest& request) override {
    Add(t, request_key, request, 0);
  }
  // Queues `t`; `priority` orders PAUSED trials before their seq does
  // (TrialScheduler::QueuePriority).
  void Add(const Trial& t, const std::string& request_key, const PlacementRequest& request,
           double priority);
  void OnTrialRemove(const Trial& t) override;
  SchedulerDecision OnTrialResult(Trial&, const Json&) override {
    return SchedulerDecision::kContinue;
  }
  bool JudgesResults(const Trial&) const override { return false; }
  void OnTrialComplete(Trial&) override {}
  void OnTrialError(Trial&) override {}
  std::optional<TrialId> ChooseTrialToRun(
      const std::function<bool(const std::string& key)>& has_resources) const override;
  void ForEachWaitingRequest(
      const std::function<void(const std::string& key, const PlacementRequest& request,
                               size_t waiting)>& fn) const override;
  size_t NumWaiting(const std::string& request_key) const override;
  void ForgetRequest(const std::string& request_key) override;

 private:
  // (paused?, priority, seq, trial_id): PENDING trials before PAUSED ones,
  // then by priority (0 but under PBT), then FIFO.
  using Entry = std::tuple<bool, double, uint64_t, TrialId>;
  struct Queue {
    PlacementRequest request;
    std::set<Entry> waiting;
  };
  struct Position {
    std::string key;
    Entry entry;
  };
  // By request key; an emptied queue stays until ForgetRequest (the runner
  // unstages its shape's groups from ForEachWaitingRequest).
  std::unordered_map<std::string, Queue> queues_;
  std::unordered_map<TrialId, Position> positions_;  // by trial id: where it waits
};

}  // namespace ztune::head
