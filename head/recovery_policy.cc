#include "head/recovery_policy.h"

#include <algorithm>
#include <set>

namespace ztune::head {

RestartDisposition DispositionAfterRestart(const Trial& t) {
  if (t.status == TrialStatus::kRunning && !t.actor_worker.empty()) {
    return RestartDisposition::kAwaitReattach;
  }
  if (IsFinished(t.status) || (t.status == TrialStatus::kPaused && t.held)) {
    return RestartDisposition::kKeep;
  }
  return RestartDisposition::kRequeue;
}

TimeMs TwoLivenessWindowsMs(TimeMs heartbeat_ms, int64_t liveness) {
  return 2 * heartbeat_ms * liveness;
}

TimeMs ReattachGraceMs(TimeMs configured, TimeMs heartbeat_ms, int64_t liveness) {
  return configured > 0 ? configured : TwoLivenessWindowsMs(heartbeat_ms, liveness);
}

std::optional<int64_t> ReplayTarget(int64_t stored_iteration, const protocol::LiveActor& live) {
  if (live.iteration <= stored_iteration && !live.training) return std::nullopt;
  return std::max(live.iteration, stored_iteration + (live.training ? 1 : 0));
}

ReconnectPlan PlanAfterReconnect(const protocol::LiveActor* live,
                                 const std::vector<std::pair<uint64_t, FutureType>>& requests,
                                 const WorkerId& worker_id, uint64_t attempt) {
  using Action = ReconnectPlan::Action;
  ReconnectPlan plan;
  const bool create_in_flight =
      std::any_of(requests.begin(), requests.end(),
                  [](const auto& r) { return r.second == FutureType::kCreate; });
  if (live == nullptr) {
    if (create_in_flight) {
      plan.action = Action::kRequeueLostStart;
      plan.why = "its CREATE_ACTOR did not reach worker " + worker_id + " while it reconnected";
    } else {
      plan.action = Action::kFail;
      plan.why = "actor of attempt " + std::to_string(attempt) + " is gone from worker " +
                 worker_id + " after it reconnected";
    }
    return plan;
  }
  const std::set<uint64_t> accepted(live->rids.begin(), live->rids.end());
  for (const auto& [rid, type] : requests) {
    if (type == FutureType::kRestore && accepted.count(rid) == 0) {
      // Its checkpoint is not kept by the head (megabytes): the attempt
      // starts again.
      plan.action = Action::kRequeueLostStart;
      plan.why = "its RESTORE did not reach worker " + worker_id + " while it reconnected";
      return plan;
    }
  }
  for (const auto& [rid, type] : requests) {
    // A failed setup leaves no actor: one that exists was created.
    (type == FutureType::kCreate ? plan.created : plan.resend).push_back(rid);
  }
  return plan;
}

}  // namespace ztune::head
