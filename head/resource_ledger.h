// ResourceLedger: the head's authority over cluster resources. Fed by worker
// registrations; places the bundles of a placement request on workers by
// strategy and hands out concrete GPU device ids. Lives on the head loop
// thread; not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/resources.h"
#include "common/status.h"

namespace ztune::head {

struct BundlePlacement {
  WorkerId worker_id;
  ResourceSet resources;
  std::vector<int64_t> gpu_ids;
};

// Bundle i of the request is bundles[i].
struct Placement {
  std::vector<BundlePlacement> bundles;
};

class ResourceLedger {
 public:
  // Adds or replaces a worker with full availability. Precondition: the worker
  // holds no reservations (RemoveWorker first when it re-registers).
  // `trainables`: the ones it hosts (bundle 0 of a request naming a trainable
  // goes only to a worker hosting it); nullopt: any (tests of placement alone).
  void AddWorker(const WorkerId& worker_id, const ResourceSet& total,
                 const std::vector<int64_t>& gpu_ids,
                 std::optional<std::set<std::string>> trainables = std::nullopt);
  // Forgets the worker; later Release calls for it are ignored.
  void RemoveWorker(const WorkerId& worker_id);
  bool HasWorker(const WorkerId& worker_id) const { return workers_.count(worker_id) > 0; }

  // Reserves every bundle or nothing. nullopt when the request does not fit now.
  std::optional<Placement> TryReserve(const PlacementRequest& request);
  void Release(const Placement& placement);
  // Re-reserves a placement recorded before a head restart (re-attached
  // actors): every bundle on a known worker, or nothing when one of them
  // does not fit (the worker came back smaller, or the same resources are
  // booked twice); false then. Bundles on workers the ledger does not know
  // (yet) are skipped.
  bool ReserveExact(const Placement& placement);

  // Whether the request could ever be placed on the registered workers' totals.
  // FailedPrecondition says what was asked and what the largest worker has.
  Status CheckFeasible(const PlacementRequest& request) const;

  ResourceSet Total() const;
  ResourceSet Available() const;
  ResourceSet TotalOf(const WorkerId& worker_id) const;
  ResourceSet AvailableOf(const WorkerId& worker_id) const;
  size_t NumWorkers() const { return workers_.size(); }
  // "CPU 4, GPU 0" of the worker with the most CPUs (for messages).
  std::string LargestWorkerString() const;

 private:
  struct WorkerResources {
    ResourceSet total;
    ResourceSet available;
    // device id -> free fixed-point share (ResourceSet::kUnit = a whole device)
    std::map<int64_t, int64_t> gpu_free;
    std::optional<std::set<std::string>> trainables;  // nullopt: hosts any
    bool Hosts(const std::string& trainable) const {
      return trainable.empty() || !trainables || trainables->count(trainable) > 0;
    }
  };
  // Tries to fit `need` on `w` (no mutation); returns the GPU ids it would get.
  static std::optional<std::vector<int64_t>> FitGpus(const WorkerResources& w,
                                                     const ResourceSet& need);
  static void TakeGpus(WorkerResources& w, const ResourceSet& need,
                       const std::vector<int64_t>& ids);
  bool PlaceAll(const PlacementRequest& request, std::map<WorkerId, WorkerResources>& scratch,
                Placement& out) const;

  std::map<WorkerId, WorkerResources> workers_;  // ordered: deterministic placement
};

}  // namespace ztune::head
