#include "head/fifo_scheduler.h"

#include <cmath>

namespace ztune::head {

void FifoScheduler::Add(const Trial& t, const std::string& request_key,
                        const PlacementRequest& request, double priority) {
  OnTrialRemove(t);  // at most one place per trial
  Queue& q = queues_[request_key];
  if (q.request.bundles.empty()) q.request = request;
  // A NaN would break the set's ordering.
  Entry entry{t.status == TrialStatus::kPaused, std::isnan(priority) ? 0 : priority, t.seq,
              t.trial_id};
  q.waiting.insert(entry);
  positions_[t.trial_id] = Position{request_key, std::move(entry)};
}

void FifoScheduler::OnTrialRemove(const Trial& t) {
  auto p = positions_.find(t.trial_id);
  if (p == positions_.end()) return;
  auto q = queues_.find(p->second.key);
  // An emptied queue stays: the runner unstages its shape's groups from it.
  if (q != queues_.end()) q->second.waiting.erase(p->second.entry);
  positions_.erase(p);
}

std::optional<TrialId> FifoScheduler::ChooseTrialToRun(
    const std::function<bool(const std::string& key)>& has_resources) const {
  const Entry* best = nullptr;
  for (const auto& [key, q] : queues_) {
    if (q.waiting.empty() || !has_resources(key)) continue;
    if (best == nullptr || *q.waiting.begin() < *best) best = &*q.waiting.begin();
  }
  if (best == nullptr) return std::nullopt;
  return std::get<3>(*best);
}

void FifoScheduler::ForEachWaitingRequest(
    const std::function<void(const std::string& key, const PlacementRequest& request,
                             size_t waiting)>& fn) const {
  for (const auto& [key, q] : queues_) fn(key, q.request, q.waiting.size());
}

void FifoScheduler::ForgetRequest(const std::string& request_key) {
  auto q = queues_.find(request_key);
  if (q != queues_.end() && q->second.waiting.empty()) queues_.erase(q);
}

size_t FifoScheduler::NumWaiting(const std::string& request_key) const {
  auto q = queues_.find(request_key);
  return q == queues_.end() ? 0 : q->second.waiting.size();
}

}  // namespace ztune::head
