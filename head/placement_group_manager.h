// PlacementGroupManager: Ray's _PlacementGroupManager on top of the head's
// ResourceLedger. Groups are pooled by equal request (PlacementRequest::Key):
// a trial starts on any ready group of its key. States: staging (waiting for
// the ledger) -> ready (reserved) -> in use (a trial's actor) -> removed.
// Unused ready groups are released after a delay (a damper against churn).
// Actor reuse parks an in-use group as cached (its actor kept alive, owned by
// no trial) until the next trial of the same request takes it.
// Lives on the head loop thread; not thread-safe. Costs: staging/placing is
// O(staging groups) per Update call, everything else O(log n).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"
#include "common/resources.h"
#include "head/resource_ledger.h"

namespace ztune::head {

struct PlacementGroupOptions {
  int64_t max_staging = 16;
  TimeMs removal_delay_ms = 2000;
};

class PlacementGroupManager {
 public:
  enum class State { kStaging, kReady, kInUse, kCached, kRemoving };
  struct Group {
    uint64_t id = 0;
    std::string key;
    PlacementRequest request;
    State state = State::kStaging;
    Placement placement;  // valid unless staging
    TrialId trial_id;  // in use by
    TimeMs remove_at = 0;
  };

  PlacementGroupManager(ResourceLedger& ledger, const Clock& clock, PlacementGroupOptions options);

  void set_max_staging(int64_t n) { options_.max_staging = n; }
  int64_t max_staging() const { return options_.max_staging; }
  bool CanStage() const { return static_cast<int64_t>(staging_order_.size()) < options_.max_staging; }

  // Requests a new group; it becomes ready once the ledger can hold it.
  // Not limited by CanStage (the caller checks it).
  // Pooled under `key` (the experiment's request key: the shape, plus the
  // trainable when actors are reused); the one-argument form pools by shape.
  uint64_t Stage(const PlacementRequest& request, const std::string& key);
  uint64_t Stage(const PlacementRequest& request) { return Stage(request, request.Key()); }
  // Places staging groups (FIFO, skipping ones that do not fit) and performs
  // due delayed removals. Returns the number of groups that became ready.
  int Update();
  // New capacity (a worker registered): the next Update retries staging groups.
  void NotifyCapacityChanged() { dirty_ = true; }

  int64_t NumStaging(const std::string& key) const;
  int64_t NumReady(const std::string& key) const;
  int64_t NumStagingTotal() const { return static_cast<int64_t>(staging_order_.size()); }
  int64_t NumInUse() const { return static_cast<int64_t>(in_use_count_); }
  bool HasReady(const std::string& key) const { return NumReady(key) > 0; }

  // Takes a ready group of `key` for `trial_id`; nullopt if none is ready.
  std::optional<uint64_t> TakeReady(const std::string& key, const TrialId& trial_id);
  // The actor of an in-use (or cached) group is gone: its resources return now.
  void ReturnInUse(uint64_t group_id);
  // A re-attached actor after a head restart: an in-use group with the
  // recorded placement (reserved again in the ledger). nullopt, and nothing
  // reserved, when the placement does not fit what the ledger has now.
  std::optional<uint64_t> AdoptInUse(const PlacementRequest& request, const std::string& key,
                                     const Placement& placement, const TrialId& trial_id);
  // Actor reuse: the in-use group's actor is kept, owned by no trial.
  void MarkCached(uint64_t group_id);
  // A cached group's actor serves `trial_id` now.
  void AssignCached(uint64_t group_id, const TrialId& trial_id);
  // Drops one unused group of `key`: a staging one if any (no resources held),
  // else a ready one (released after the removal delay). False if none.
  bool UnstageOne(const std::string& key);
  // A worker died: ready groups with a bundle there go back to staging and
  // removing ones are released. Returns the in-use and cached groups with a
  // bundle there, left as they are: their actors (wherever they run) must
  // end, and each group is returned (ReturnInUse) once its actor is gone, so
  // that an actor still running on a live worker keeps its resources booked.
  std::vector<uint64_t> OnWorkerRemoved(const WorkerId& worker_id);

  const Group* Find(uint64_t group_id) const;
  // Request shapes with staging or ready groups.
  size_t NumPools() const { return pools_.size(); }
  // Resources held by in-use groups (Ray's occupied_resources()). From
  // counts kept per request shape: every `status` asks, and summing over the
  // groups took 8% of the loop with 10,000 trials running and a client
  // reading (docs/benchmarks.md, fleet).
  ResourceSet OccupiedResources() const;

 private:
  struct Pool {
    int64_t staging = 0;
    std::deque<uint64_t> ready;
  };
  void RemoveNow(Group& g);
  // A group becomes in use, or stops being in use (the counts below).
  void EnterInUse(const Group& g);
  void LeaveInUse(const Group& g);
  // Drops the pool of `it` once it has neither staging nor ready groups.
  void PruneIfEmpty(std::unordered_map<std::string, Pool>::iterator it);

  ResourceLedger& ledger_;
  const Clock& clock_;
  PlacementGroupOptions options_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Group> groups_;
  // By request key; a pool exists only while it has staging or ready groups.
  std::unordered_map<std::string, Pool> pools_;
  std::list<uint64_t> staging_order_;  // FIFO of staging group ids
  std::multimap<TimeMs, uint64_t> removals_;
  size_t in_use_count_ = 0;
  // In-use groups by their request's total (fixed-point amounts): how many.
  // Exact, unlike a running sum, which saturates (ResourceSet::Add) and
  // could not be subtracted from again.
  std::map<std::map<std::string, int64_t>, int64_t> in_use_shapes_;
  // Set when placing staging groups could succeed where it failed before.
  bool dirty_ = false;
};

}  // namespace ztune::head
