#include "head/actor_cache.h"

#include <algorithm>

namespace ztune::head {

void ActorCache::Put(const std::string& request_key, CachedActor actor) {
  index_.insert(KeyOf(actor));
  by_shape_[request_key].push_back(std::move(actor));
}

std::optional<CachedActor> ActorCache::Take(const std::string& request_key) {
  auto it = by_shape_.find(request_key);
  if (it == by_shape_.end()) return std::nullopt;
  CachedActor a = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) by_shape_.erase(it);
  index_.erase(KeyOf(a));
  return a;
}

size_t ActorCache::Count(const std::string& request_key) const {
  auto it = by_shape_.find(request_key);
  return it == by_shape_.end() ? 0 : it->second.size();
}

bool ActorCache::Contains(const WorkerId& worker_id, const TrialId& trial_id,
                          uint64_t attempt) const {
  return index_.count(Key{worker_id, trial_id, attempt}) > 0;
}

std::vector<CachedActor> ActorCache::TrimTo(
    const std::function<size_t(const std::string&)>& demand) {
  std::vector<CachedActor> out;
  for (auto it = by_shape_.begin(); it != by_shape_.end();) {
    const size_t keep = demand(it->first);
    auto& cache = it->second;
    while (cache.size() > keep) {
      index_.erase(KeyOf(cache.front()));
      out.push_back(std::move(cache.front()));
      cache.pop_front();
    }
    it = cache.empty() ? by_shape_.erase(it) : std::next(it);
  }
  return out;
}

std::vector<CachedActor> ActorCache::RemoveIf(
    const std::function<bool(const CachedActor&)>& pred) {
  std::vector<CachedActor> out;
  for (auto it = by_shape_.begin(); it != by_shape_.end();) {
    auto& cache = it->second;
    for (auto a = cache.begin(); a != cache.end();) {
      if (pred(*a)) {
        index_.erase(KeyOf(*a));
        out.push_back(std::move(*a));
        a = cache.erase(a);
      } else {
        ++a;
      }
    }
    it = cache.empty() ? by_shape_.erase(it) : std::next(it);
  }
  return out;
}

}  // namespace ztune::head
