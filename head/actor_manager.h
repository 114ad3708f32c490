// ActorManager: the actor side of Ray's RayTrialExecutor. It knows which
// trial's attempt holds an actor on which worker, which actors are cached for
// reuse (ActorCache, Ray's reuse_actors pool), and which RESETs are re-keying
// a cached actor for a new trial; and it decides what becomes of an actor
// whose attempt ends: cached for a waiting trial of its request shape, or
// stopped (its group is freed when the STOP completes).
//
// It never changes a trial's phase or status (the TrialRunner does, and calls
// it while doing so); it writes only a trial's actor fields (worker_id,
// actor_worker, group_id, placement).
//
// Invariant: actors_by_worker_ holds a trial exactly while its worker_id is
// set by Hold (until Clear); resetting_ holds a trial exactly while its RESET
// is in flight (the runner's kResetting phase).
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/ids.h"
#include "head/actor_cache.h"
#include "head/executor.h"
#include "head/placement_group_manager.h"
#include "head/trial.h"
#include "head/trial_book.h"
#include "head/trial_scheduler.h"

namespace ztune::head {

class ActorManager {
 public:
  // `scheduler` says how many trials wait for each request shape (the demand
  // that a cached actor must serve); `force_cleanup_ms` is the kill deadline of
  // STOPs whose experiment sets none.
  ActorManager(Executor& executor, PlacementGroupManager& groups, TrialBook& book,
               const TrialScheduler& scheduler, int64_t force_cleanup_ms);

  // The kill deadline that STOPs of the experiment's actors carry.
  int64_t KillAfterMs(const Experiment& e) const;

  // The trial's attempt holds an actor on `worker_id` in group `group_id`
  // (a start, a RESET, a re-attach). The caller sets its placement.
  void Hold(Trial& t, const WorkerId& worker_id, uint64_t group_id);
  // Forgets the trial's actor (its worker, group and placement) without
  // stopping it: it is gone, or its STOP was sent under another key.
  void Clear(Trial& t);
  // The attempt no longer needs its actor: with `reusable`, the actor is
  // cached when a trial of its shape waits for one (fewer cached for the shape
  // than wait, and fewer than `max_cached` in all), otherwise stopped. A RESET
  // in flight is stopped under the actor's old key as well (one of the two
  // STOPs finds it). Then Clear.
  void Release(Trial& t, bool reusable, int64_t max_cached);

  // ---- RESET of a cached actor for a new trial (Ray's reset_config) ----
  void BeginReset(const TrialId& trial_id, const CachedActor& from);
  // The cached actor the trial's RESET in flight re-keys, or nullptr.
  const CachedActor* ResetOf(const TrialId& trial_id) const;
  void EndReset(const TrialId& trial_id) { resetting_.erase(trial_id); }

  // ---- the cache ----
  bool HasCached(const std::string& request_key) const { return cache_.Has(request_key); }
  size_t NumCached(const std::string& request_key) const { return cache_.Count(request_key); }
  std::optional<CachedActor> TakeCached(const std::string& request_key) {
    return cache_.Take(request_key);
  }
  bool IsCached(const WorkerId& worker_id, const TrialId& trial_id, uint64_t attempt) const {
    return cache_.Contains(worker_id, trial_id, attempt);
  }
  // Stops the cached actors beyond what waits for their shape (Ray keeps a
  // cached actor only while a trial of its shape is pending).
  void TrimCache();

  // ---- workers ----
  // `worker_id` is gone and with it the groups in `broken` (a bundle was
  // there): cached actors on it are forgotten and their groups returned,
  // cached actors of a broken group elsewhere are stopped. Returns the trials
  // whose actor was on it; the index forgets them (their fields stay set:
  // the runner fails each one, which Clears it).
  std::vector<TrialId> OnWorkerGone(const WorkerId& worker_id, const std::set<uint64_t>& broken);
  int64_t ActorsOn(const WorkerId& worker_id) const;
  // A STOP completed, or can never complete (its worker is gone, its
  // deadline passed): the actor is gone and its group, if any, returns.
  void OnStopDone(const Future& stop);
  std::vector<TrialId> TrialsOn(const WorkerId& worker_id) const;

 private:
  Executor& executor_;
  PlacementGroupManager& groups_;
  TrialBook& book_;
  const TrialScheduler& scheduler_;
  const int64_t force_cleanup_ms_;

  ActorCache cache_;
  std::unordered_map<TrialId, CachedActor> resetting_;
  std::unordered_map<WorkerId, std::unordered_set<TrialId>> actors_by_worker_;
};

}  // namespace ztune::head
