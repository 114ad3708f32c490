#include "head/placement_group_manager.h"

#include <algorithm>
#include <unordered_set>

#include "common/check.h"

namespace ztune::head {

PlacementGroupManager::PlacementGroupManager(ResourceLedger& ledger, const Clock& clock,
                                             PlacementGroupOptions options)
    : ledger_(ledger), clock_(clock), options_(options) {}

uint64_t PlacementGroupManager::Stage(const PlacementRequest& request, const std::string& key) {
  Group g;
  g.id = next_id_++;
  g.key = key;
  g.request = request;
  g.state = State::kStaging;
  pools_[g.key].staging++;
  staging_order_.push_back(g.id);
  dirty_ = true;
  uint64_t id = g.id;
  groups_.emplace(id, std::move(g));
  return id;
}

int PlacementGroupManager::Update() {
  TimeMs now = clock_.NowMs();
  while (!removals_.empty() && removals_.begin()->first <= now) {
    uint64_t id = removals_.begin()->second;
    removals_.erase(removals_.begin());
    auto it = groups_.find(id);
    if (it != groups_.end() && it->second.state == State::kRemoving) {
      ledger_.Release(it->second.placement);
      groups_.erase(it);
      dirty_ = true;
    }
  }
  if (!dirty_) return 0;
  dirty_ = false;
  int became_ready = 0;
  // Equal requests fit or fail alike: after one failure, skip the rest of that
  // key this round (keeps Update O(distinct requests) placements when full).
  std::unordered_set<std::string> failed;
  for (auto it = staging_order_.begin(); it != staging_order_.end();) {
    Group& g = groups_.at(*it);
    if (failed.count(g.key)) {
      ++it;
      continue;
    }
    auto placement = ledger_.TryReserve(g.request);
    if (!placement) {
      failed.insert(g.key);
      ++it;
      continue;
    }
    g.placement = std::move(*placement);
    g.state = State::kReady;
    Pool& pool = pools_[g.key];
    pool.staging--;
    pool.ready.push_back(g.id);
    it = staging_order_.erase(it);
    ++became_ready;
  }
  return became_ready;
}

int64_t PlacementGroupManager::NumStaging(const std::string& key) const {
  auto it = pools_.find(key);
  return it == pools_.end() ? 0 : it->second.staging;
}

int64_t PlacementGroupManager::NumReady(const std::string& key) const {
  auto it = pools_.find(key);
  return it == pools_.end() ? 0 : static_cast<int64_t>(it->second.ready.size());
}

std::optional<uint64_t> PlacementGroupManager::TakeReady(const std::string& key,
                                                         const TrialId& trial_id) {
  auto it = pools_.find(key);
  if (it == pools_.end() || it->second.ready.empty()) return std::nullopt;
  uint64_t id = it->second.ready.front();
  it->second.ready.pop_front();
  PruneIfEmpty(it);
  Group& g = groups_.at(id);
  g.state = State::kInUse;
  g.trial_id = trial_id;
  EnterInUse(g);
  return id;
}

void PlacementGroupManager::ReturnInUse(uint64_t group_id) {
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return;
  if (it->second.state == State::kInUse) {
    LeaveInUse(it->second);
  } else if (it->second.state != State::kCached) {
    return;
  }
  RemoveNow(it->second);
  groups_.erase(it);
}

std::optional<uint64_t> PlacementGroupManager::AdoptInUse(const PlacementRequest& request,
                                                          const std::string& key,
                                                          const Placement& placement,
                                                          const TrialId& trial_id) {
  if (!ledger_.ReserveExact(placement)) return std::nullopt;
  Group g;
  g.id = next_id_++;
  g.key = key;
  g.request = request;
  g.state = State::kInUse;
  g.placement = placement;
  g.trial_id = trial_id;
  EnterInUse(g);
  uint64_t id = g.id;
  groups_.emplace(id, std::move(g));
  return id;
}

void PlacementGroupManager::MarkCached(uint64_t group_id) {
  auto it = groups_.find(group_id);
  if (it == groups_.end() || it->second.state != State::kInUse) return;
  LeaveInUse(it->second);
  it->second.state = State::kCached;
  it->second.trial_id.clear();
}

void PlacementGroupManager::AssignCached(uint64_t group_id, const TrialId& trial_id) {
  auto it = groups_.find(group_id);
  if (it == groups_.end() || it->second.state != State::kCached) return;
  EnterInUse(it->second);
  it->second.state = State::kInUse;
  it->second.trial_id = trial_id;
}

void PlacementGroupManager::RemoveNow(Group& g) {
  ledger_.Release(g.placement);
  dirty_ = true;
}

bool PlacementGroupManager::UnstageOne(const std::string& key) {
  auto pit = pools_.find(key);
  if (pit == pools_.end()) return false;
  Pool& pool = pit->second;
  if (pool.staging > 0) {
    // The newest staging group of this key goes first (keeps FIFO fairness).
    for (auto it = staging_order_.rbegin(); it != staging_order_.rend(); ++it) {
      if (groups_.at(*it).key != key) continue;
      groups_.erase(*it);
      staging_order_.erase(std::next(it).base());
      pool.staging--;
      PruneIfEmpty(pit);
      return true;
    }
  }
  if (!pool.ready.empty()) {
    uint64_t id = pool.ready.back();
    pool.ready.pop_back();
    Group& g = groups_.at(id);
    g.state = State::kRemoving;
    g.remove_at = clock_.NowMs() + options_.removal_delay_ms;
    removals_.emplace(g.remove_at, id);
    PruneIfEmpty(pit);
    return true;
  }
  return false;
}

void PlacementGroupManager::PruneIfEmpty(std::unordered_map<std::string, Pool>::iterator it) {
  if (it->second.staging == 0 && it->second.ready.empty()) pools_.erase(it);
}

std::vector<uint64_t> PlacementGroupManager::OnWorkerRemoved(const WorkerId& worker_id) {
  auto on_worker = [&](const Group& g) {
    return std::any_of(g.placement.bundles.begin(), g.placement.bundles.end(),
                       [&](const BundlePlacement& b) { return b.worker_id == worker_id; });
  };
  std::vector<uint64_t> to_restage;
  std::vector<uint64_t> to_drop;
  std::vector<uint64_t> with_actors;
  for (auto& [id, g] : groups_) {
    if (g.state == State::kStaging || !on_worker(g)) continue;
    if (g.state == State::kReady) to_restage.push_back(id);
    if (g.state == State::kRemoving) to_drop.push_back(id);
    if (g.state == State::kInUse || g.state == State::kCached) with_actors.push_back(id);
  }
  std::sort(with_actors.begin(), with_actors.end());  // deterministic order for the caller
  for (uint64_t id : to_restage) {
    Group& g = groups_.at(id);
    ledger_.Release(g.placement);  // releases the bundles on live workers
    g.placement = Placement{};
    Pool& pool = pools_[g.key];
    pool.ready.erase(std::remove(pool.ready.begin(), pool.ready.end(), id), pool.ready.end());
    pool.staging++;
    g.state = State::kStaging;
    staging_order_.push_front(id);
  }
  for (uint64_t id : to_drop) {
    RemoveNow(groups_.at(id));
    groups_.erase(id);
  }
  dirty_ = true;
  return with_actors;
}

const PlacementGroupManager::Group* PlacementGroupManager::Find(uint64_t group_id) const {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : &it->second;
}

void PlacementGroupManager::EnterInUse(const Group& g) {
  ++in_use_count_;
  ++in_use_shapes_[g.request.Total().amounts()];
}

void PlacementGroupManager::LeaveInUse(const Group& g) {
  CHECK(in_use_count_ > 0);
  --in_use_count_;
  auto it = in_use_shapes_.find(g.request.Total().amounts());
  CHECK(it != in_use_shapes_.end() && it->second > 0);
  if (--it->second == 0) in_use_shapes_.erase(it);
}

ResourceSet PlacementGroupManager::OccupiedResources() const {
  ResourceSet r;
  for (const auto& [amounts, count] : in_use_shapes_) {
    // count copies of one shape, added as the groups' loop did (Add
    // saturates): by doubling, so a status costs O(log groups) per shape.
    ResourceSet one;
    for (const auto& [name, amount] : amounts) one.SetFixed(name, amount);
    for (int64_t n = count; n > 0; n >>= 1) {
      if (n & 1) r.Add(one);
      ResourceSet twice = one;
      twice.Add(one);
      one = std::move(twice);
    }
  }
  return r;
}

}  // namespace ztune::head
