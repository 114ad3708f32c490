#include "head/resource_ledger.h"

#include <algorithm>
#include <set>

namespace ztune::head {

void ResourceLedger::AddWorker(const WorkerId& worker_id, const ResourceSet& total,
                               const std::vector<int64_t>& gpu_ids,
                               std::optional<std::set<std::string>> trainables) {
  WorkerResources w;
  w.trainables = std::move(trainables);
  w.total = total;
  w.available = total;
  for (int64_t id : gpu_ids) w.gpu_free[id] = ResourceSet::kUnit;
  workers_[worker_id] = std::move(w);
}

void ResourceLedger::RemoveWorker(const WorkerId& worker_id) { workers_.erase(worker_id); }

std::optional<std::vector<int64_t>> ResourceLedger::FitGpus(const WorkerResources& w,
                                                           const ResourceSet& need) {
  if (!w.available.Contains(need)) return std::nullopt;
  int64_t gpu = need.GetFixed("GPU");
  std::vector<int64_t> ids;
  if (gpu == 0 || w.gpu_free.empty()) return ids;  // GPU counted without device ids
  int64_t whole = gpu / ResourceSet::kUnit;
  int64_t frac = gpu % ResourceSet::kUnit;
  std::set<int64_t> used;
  for (const auto& [id, free] : w.gpu_free) {
    if (static_cast<int64_t>(ids.size()) == whole) break;
    if (free == ResourceSet::kUnit) {
      ids.push_back(id);
      used.insert(id);
    }
  }
  if (static_cast<int64_t>(ids.size()) < whole) return std::nullopt;
  if (frac > 0) {
    // Prefer a partly used device (fractional GPUs share), then a free one.
    int64_t pick = -1;
    int64_t pick_free = ResourceSet::kUnit + 1;
    for (const auto& [id, free] : w.gpu_free) {
      if (used.count(id) || free < frac) continue;
      if (free < pick_free) {
        pick = id;
        pick_free = free;
      }
    }
    if (pick < 0) return std::nullopt;
    ids.push_back(pick);
  }
  return ids;
}

void ResourceLedger::TakeGpus(WorkerResources& w, const ResourceSet& need,
                              const std::vector<int64_t>& ids) {
  w.available.Subtract(need);
  int64_t gpu = need.GetFixed("GPU");
  for (int64_t id : ids) {
    int64_t take = std::min<int64_t>(gpu, ResourceSet::kUnit);
    if (gpu % ResourceSet::kUnit != 0 && id == ids.back()) take = gpu % ResourceSet::kUnit;
    w.gpu_free[id] -= take;
    gpu -= take;
  }
}

bool ResourceLedger::PlaceAll(const PlacementRequest& request,
                              std::map<WorkerId, WorkerResources>& scratch,
                              Placement& out) const {
  const auto strategy = request.strategy;
  out.bundles.clear();
  if (strategy == PlacementStrategy::kStrictPack || strategy == PlacementStrategy::kPack) {
    // Everything on one worker if any can hold it all.
    ResourceSet total = request.Total();
    for (auto& [id, w] : scratch) {
      if (!w.available.Contains(total) || !w.Hosts(request.actor_trainable)) continue;
      WorkerResources trial = w;
      Placement p;
      bool ok = true;
      for (const auto& b : request.bundles) {
        auto gpus = FitGpus(trial, b);
        if (!gpus) {
          ok = false;
          break;
        }
        TakeGpus(trial, b, *gpus);
        p.bundles.push_back({id, b, *gpus});
      }
      if (ok) {
        w = std::move(trial);
        out = std::move(p);
        return true;
      }
    }
    if (strategy == PlacementStrategy::kStrictPack) return false;
  }
  // Bundle by bundle. SPREAD prefers workers not used yet by this group;
  // PACK prefers the ones already used.
  std::map<WorkerId, int> used_count;
  for (size_t i = 0; i < request.bundles.size(); ++i) {
    const ResourceSet& b = request.bundles[i];
    WorkerId best;
    int best_rank = 0;
    for (auto& [id, w] : scratch) {
      if (i == 0 && !w.Hosts(request.actor_trainable)) continue;
      if (!FitGpus(w, b)) continue;
      int uses = used_count[id];
      if (strategy == PlacementStrategy::kStrictSpread && uses > 0) continue;
      int rank = (strategy == PlacementStrategy::kPack) ? -uses : uses;
      if (best.empty() || rank < best_rank) {
        best = id;
        best_rank = rank;
      }
    }
    if (best.empty()) return false;
    auto& w = scratch[best];
    auto gpus = FitGpus(w, b);
    TakeGpus(w, b, *gpus);
    out.bundles.push_back({best, b, *gpus});
    used_count[best]++;
  }
  return true;
}

std::optional<Placement> ResourceLedger::TryReserve(const PlacementRequest& request) {
  if (request.bundles.size() == 1) {
    // The common case: one bundle on the first worker that holds it, in place.
    const ResourceSet& b = request.bundles.front();
    for (auto& [id, w] : workers_) {
      if (!w.Hosts(request.actor_trainable)) continue;
      auto gpus = FitGpus(w, b);
      if (!gpus) continue;
      TakeGpus(w, b, *gpus);
      return Placement{{BundlePlacement{id, b, *gpus}}};
    }
    return std::nullopt;
  }
  std::map<WorkerId, WorkerResources> scratch = workers_;
  Placement p;
  if (!PlaceAll(request, scratch, p)) return std::nullopt;
  workers_ = std::move(scratch);
  return p;
}

bool ResourceLedger::ReserveExact(const Placement& placement) {
  // On copies of the touched workers first: all or nothing.
  std::map<WorkerId, WorkerResources> touched;
  for (const auto& b : placement.bundles) {
    auto it = workers_.find(b.worker_id);
    if (it == workers_.end()) continue;
    WorkerResources& w = touched.try_emplace(b.worker_id, it->second).first->second;
    if (!w.available.Contains(b.resources)) return false;
    int64_t gpu = b.resources.GetFixed("GPU");
    for (int64_t id : b.gpu_ids) {
      int64_t take = std::min<int64_t>(gpu, ResourceSet::kUnit);
      if (gpu % ResourceSet::kUnit != 0 && id == b.gpu_ids.back()) take = gpu % ResourceSet::kUnit;
      auto g = w.gpu_free.find(id);
      if (g == w.gpu_free.end() || g->second < take) return false;
      gpu -= take;
    }
    TakeGpus(w, b.resources, b.gpu_ids);
  }
  for (auto& [id, w] : touched) workers_[id] = std::move(w);
  return true;
}

void ResourceLedger::Release(const Placement& placement) {
  for (const auto& b : placement.bundles) {
    auto it = workers_.find(b.worker_id);
    if (it == workers_.end()) continue;
    WorkerResources& w = it->second;
    w.available.Add(b.resources);
    int64_t gpu = b.resources.GetFixed("GPU");
    for (int64_t id : b.gpu_ids) {
      int64_t give = std::min<int64_t>(gpu, ResourceSet::kUnit);
      if (gpu % ResourceSet::kUnit != 0 && id == b.gpu_ids.back()) give = gpu % ResourceSet::kUnit;
      auto g = w.gpu_free.find(id);
      if (g != w.gpu_free.end()) g->second = std::min(ResourceSet::kUnit, g->second + give);
      gpu -= give;
    }
  }
}

Status ResourceLedger::CheckFeasible(const PlacementRequest& request) const {
  std::map<WorkerId, WorkerResources> scratch;
  for (const auto& [id, w] : workers_) {
    WorkerResources full = w;
    full.available = w.total;
    for (auto& [gid, free] : full.gpu_free) free = ResourceSet::kUnit;
    scratch[id] = std::move(full);
  }
  Placement p;
  if (PlaceAll(request, scratch, p)) return Status::Ok();
  return Status::FailedPrecondition(
      "infeasible resource request: asked for " + request.ToString() + " (total " +
      request.Total().ToString() + ")" +
      (request.actor_trainable.empty()
           ? std::string()
           : " with the actor on a worker that hosts '" + request.actor_trainable + "'") +
      " but no registered worker can ever hold it; the largest worker has " +
      LargestWorkerString() + " (" + std::to_string(workers_.size()) + " workers registered)");
}

ResourceSet ResourceLedger::Total() const {
  ResourceSet t;
  for (const auto& [id, w] : workers_) t.Add(w.total);
  return t;
}

ResourceSet ResourceLedger::Available() const {
  ResourceSet t;
  for (const auto& [id, w] : workers_) t.Add(w.available);
  return t;
}

ResourceSet ResourceLedger::TotalOf(const WorkerId& worker_id) const {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? ResourceSet() : it->second.total;
}

ResourceSet ResourceLedger::AvailableOf(const WorkerId& worker_id) const {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? ResourceSet() : it->second.available;
}

std::string ResourceLedger::LargestWorkerString() const {
  const WorkerResources* best = nullptr;
  for (const auto& [id, w] : workers_) {
    if (best == nullptr || w.total.GetFixed("CPU") > best->total.GetFixed("CPU") ||
        (w.total.GetFixed("CPU") == best->total.GetFixed("CPU") &&
         w.total.GetFixed("GPU") > best->total.GetFixed("GPU"))) {
      best = &w;
    }
  }
  if (best == nullptr) return "nothing (no workers)";
  return best->total.ToString();
}

}  // namespace ztune::head
