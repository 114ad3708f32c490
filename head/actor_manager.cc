#include "head/actor_manager.h"

#include "common/check.h"

namespace ztune::head {

ActorManager::ActorManager(Executor& executor, PlacementGroupManager& groups, TrialBook& book,
                           const TrialScheduler& scheduler, int64_t force_cleanup_ms)
    : executor_(executor),
      groups_(groups),
      book_(book),
      scheduler_(scheduler),
      force_cleanup_ms_(force_cleanup_ms) {}

int64_t ActorManager::KillAfterMs(const Experiment& e) const {
  if (e.spec.force_cleanup_s > 0) return static_cast<int64_t>(e.spec.force_cleanup_s * 1000);
  return force_cleanup_ms_;
}

void ActorManager::Hold(Trial& t, const WorkerId& worker_id, uint64_t group_id) {
  CHECK(!worker_id.empty() && group_id != 0);
  t.worker_id = worker_id;
  t.actor_worker = worker_id;
  t.NoteAttemptHost(worker_id);
  t.group_id = group_id;
  actors_by_worker_[worker_id].insert(t.trial_id);
}

void ActorManager::Clear(Trial& t) {
  if (auto it = actors_by_worker_.find(t.worker_id); it != actors_by_worker_.end()) {
    it->second.erase(t.trial_id);
    if (it->second.empty()) actors_by_worker_.erase(it);
  }
  t.worker_id.clear();
  t.group_id = 0;
  t.actor_worker.clear();
  t.placement = Placement{};
  book_.MarkDirty(t);
}

void ActorManager::Release(Trial& t, bool reusable, int64_t max_cached) {
  if (t.worker_id.empty()) return;
  const Experiment& e = book_.ExperimentOf(t);
  const int64_t kill = KillAfterMs(e);
  auto reset = resetting_.find(t.trial_id);
  // Ray caches only with pending demand for the same request, and at most
  // max_pending_trials actors; an actor whose RESET is in flight has no
  // settled key to cache it under.
  const bool cache = reusable && reset == resetting_.end() &&
                     cache_.Count(e.request_key) < scheduler_.NumWaiting(e.request_key) &&
                     static_cast<int64_t>(cache_.size()) < max_cached;
  if (cache) {
    executor_.ForgetTrial(t.trial_id);
    groups_.MarkCached(t.group_id);
    cache_.Put(e.request_key, CachedActor{t.worker_id, t.trial_id, t.attempt, t.group_id});
  } else {
    executor_.StopActor(t, kill);
  }
  if (reset != resetting_.end()) {
    // Whichever key the actor has when the RESET settles, one STOP finds it.
    executor_.StopActorKey(reset->second.worker_id, reset->second.trial_id, reset->second.attempt,
                           0, kill);
    resetting_.erase(reset);
  }
  Clear(t);
}

void ActorManager::BeginReset(const TrialId& trial_id, const CachedActor& from) {
  const bool inserted = resetting_.emplace(trial_id, from).second;
  CHECK(inserted);  // a trial has one RESET in flight at most
}

const CachedActor* ActorManager::ResetOf(const TrialId& trial_id) const {
  auto it = resetting_.find(trial_id);
  return it == resetting_.end() ? nullptr : &it->second;
}

void ActorManager::TrimCache() {
  const auto unwanted =
      cache_.TrimTo([&](const std::string& key) { return scheduler_.NumWaiting(key); });
  for (const CachedActor& a : unwanted) {
    const Trial* owner = book_.FindTrial(a.trial_id);
    const int64_t kill =
        owner == nullptr ? force_cleanup_ms_ : KillAfterMs(book_.ExperimentOf(*owner));
    executor_.StopActorKey(a.worker_id, a.trial_id, a.attempt, a.group_id, kill);
  }
}

std::vector<TrialId> ActorManager::OnWorkerGone(const WorkerId& worker_id,
                                                const std::set<uint64_t>& broken) {
  const auto uncached = cache_.RemoveIf([&](const CachedActor& a) {
    return a.worker_id == worker_id || broken.count(a.group_id) > 0;
  });
  for (const CachedActor& a : uncached) {
    if (a.worker_id == worker_id) {
      groups_.ReturnInUse(a.group_id);  // the actor died with the worker
    } else {
      executor_.StopActorKey(a.worker_id, a.trial_id, a.attempt, a.group_id, force_cleanup_ms_);
    }
  }
  std::vector<TrialId> victims;
  if (auto it = actors_by_worker_.find(worker_id); it != actors_by_worker_.end()) {
    victims.assign(it->second.begin(), it->second.end());
    actors_by_worker_.erase(it);
  }
  return victims;
}

void ActorManager::OnStopDone(const Future& stop) {
  if (stop.group_id != 0) groups_.ReturnInUse(stop.group_id);
}

int64_t ActorManager::ActorsOn(const WorkerId& worker_id) const {
  auto it = actors_by_worker_.find(worker_id);
  return it == actors_by_worker_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

std::vector<TrialId> ActorManager::TrialsOn(const WorkerId& worker_id) const {
  auto it = actors_by_worker_.find(worker_id);
  if (it == actors_by_worker_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace ztune::head
