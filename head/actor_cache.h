// ActorCache: actors kept alive after their trial ended, for the next trial
// with an equal placement request (Ray's reuse_actors and its cached actor
// pool). Each entry keeps its placement group (cached in the
// PlacementGroupManager); the runner decides when to cache (only with demand
// for that request, at most max_pending_trials actors) and stops what leaves
// the cache without a new trial. Keys are request shapes
// (PlacementRequest::Key); within a shape the oldest actor is handed out
// first.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/ids.h"

namespace ztune::head {

// An actor that serves no trial, addressed on its worker by its last key.
struct CachedActor {
  WorkerId worker_id;
  TrialId trial_id;  // the actor's key on the worker
  uint64_t attempt = 0;
  uint64_t group_id = 0;
};

class ActorCache {
 public:
  void Put(const std::string& request_key, CachedActor actor);
  // The oldest cached actor of the shape, removed; nullopt if none.
  std::optional<CachedActor> Take(const std::string& request_key);
  size_t Count(const std::string& request_key) const;
  bool Has(const std::string& request_key) const { return Count(request_key) > 0; }
  size_t size() const { return index_.size(); }
  // Whether the actor (worker, trial, attempt) is cached. O(log n).
  bool Contains(const WorkerId& worker_id, const TrialId& trial_id,
                uint64_t attempt) const;
  // Removes, oldest first per shape, the actors beyond `demand(key)` of each
  // shape, and returns them (the caller stops them).
  std::vector<CachedActor> TrimTo(const std::function<size_t(const std::string&)>& demand);
  // Removes and returns every actor for which `pred` holds.
  std::vector<CachedActor> RemoveIf(const std::function<bool(const CachedActor&)>& pred);

 private:
  using Key = std::tuple<std::string, std::string, uint64_t>;  // worker, trial, attempt
  static Key KeyOf(const CachedActor& a) { return {a.worker_id, a.trial_id, a.attempt}; }

  // Invariant: index_ holds exactly the keys of the actors in by_shape_, and
  // no shape's deque is empty.
  std::unordered_map<std::string, std::deque<CachedActor>> by_shape_;
  std::set<Key> index_;
};

}  // namespace ztune::head
