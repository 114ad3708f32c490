#include "head/recovery_waits.h"

namespace ztune::head {

void RecoveryWaits::AwaitReattach(const TrialId& trial_id, TimeMs deadline) {
  replay_.erase(trial_id);
  reattach_[trial_id] = Wait{deadline, 0};
}

void RecoveryWaits::AwaitReplay(const TrialId& trial_id, int64_t until, TimeMs deadline) {
  reattach_.erase(trial_id);
  replay_[trial_id] = Wait{deadline, until};
}

void RecoveryWaits::Leave(const TrialId& trial_id) {
  reattach_.erase(trial_id);
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

std::vector<TrialId> RecoveryWaits::Expired(const std::map<TrialId, Wait>& waits,
                                                TimeMs now) {
  std::vector<TrialId> out;
  for (const auto& [id, wait] : waits) {
    if (wait.deadline <= now) out.push_back(id);
  }
  return out;
}

}  // namespace ztune::head
