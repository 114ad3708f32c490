#include "head/recovery_waits.h"

#include "common/check.h"

namespace ztune::head {

void RecoveryWaits::AwaitReattach(const TrialId& trial_id, const WorkerId& worker,
                                  TimeMs deadline) {
  Leave(trial_id);
  reattach_[trial_id] = Wait{deadline, 0, worker};
  reattach_on_[worker].insert(trial_id);
}

void RecoveryWaits::AwaitReplay(const TrialId& trial_id, int64_t until, TimeMs deadline) {
  Leave(trial_id);
  replay_[trial_id] = Wait{deadline, until, WorkerId()};
}

void RecoveryWaits::Leave(const TrialId& trial_id) {
  if (auto it = reattach_.find(trial_id); it != reattach_.end()) {
    auto on = reattach_on_.find(it->second.worker);
    CHECK(on != reattach_on_.end());  // every re-attach wait is indexed by its worker
    on->second.erase(trial_id);
    if (on->second.empty()) reattach_on_.erase(on);
    reattach_.erase(it);
  }
  replay_.erase(trial_id);
}

std::optional<TimeMs> RecoveryWaits::Deadline(const TrialId& trial_id) const {
  if (auto it = reattach_.find(trial_id); it != reattach_.end()) return it->second.deadline;
  if (auto it = replay_.find(trial_id); it != replay_.end()) return it->second.deadline;
  return std::nullopt;
}

bool RecoveryWaits::ReplayReached(const TrialId& trial_id, int64_t iteration) const {
  auto it = replay_.find(trial_id);
  return it != replay_.end() && iteration >= it->second.until;
}

std::vector<TrialId> RecoveryWaits::ExpiredReattaches(TimeMs now) const {
  return Expired(reattach_, now);
}

std::vector<TrialId> RecoveryWaits::ExpiredReplays(TimeMs now) const {
  return Expired(replay_, now);
}

std::vector<TrialId> RecoveryWaits::ReattachesOn(const WorkerId& worker) const {
  auto it = reattach_on_.find(worker);
  if (it == reattach_on_.end()) return {};
  return std::vector<TrialId>(it->second.begin(), it->second.end());
}

std::vector<TrialId> RecoveryWaits::Expired(const std::map<TrialId, Wait>& waits,
                                                TimeMs now) {
  std::vector<TrialId> out;
  for (const auto& [id, wait] : waits) {
    if (wait.deadline <= now) out.push_back(id);
  }
  return out;
}

}  // namespace ztune::head
