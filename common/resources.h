// Resource amounts, bundles and placement requests (Ray's PlacementGroupFactory).
//
// Amounts are fixed-point (1/10000 units, as Ray core) so that fractional GPUs
// add and subtract exactly. A ResourceSet never holds a zero or negative amount:
// zero keys are dropped on construction, which makes requests that differ only
// by zero-valued keys or key order compare equal. Plain values, thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace ztune {

class ResourceSet {
 public:
  static constexpr int64_t kUnit = 10000;
  // The most of one resource a worker may offer or a bundle may ask for
  // (memory is in bytes: 100 TB). Its fixed-point value fits int64 with room;
  // sums over many workers saturate instead of overflowing (Add).
  static constexpr double kMaxAmount = 1e14;
  // What one worker may offer: no machine has more (a worker claiming 1e12
  // CPUs would take every trial).
  static constexpr double kMaxCpus = 100'000;
  static constexpr double kMaxGpus = 10'000;
  static double MaxOffered(const std::string& name);

  ResourceSet() = default;
  // Rejects negative or non-finite amounts, amounts above kMaxAmount (as
  // infeasible) and empty names.
  static Result<ResourceSet> FromJson(const Json& j);
  // For amounts from a peer (a worker's REGISTER): finite, >= 0, at most
  // MaxOffered(name); names printable ASCII of at most 128 bytes.
  static Result<ResourceSet> FromDoublesChecked(const std::map<std::string, double>& m);
  // For amounts the code itself chose (trusted, within kMaxAmount).
  static ResourceSet FromDoubles(const std::map<std::string, double>& m);

  Json ToJson() const;
  std::map<std::string, double> ToDoubles() const;

  double Get(const std::string& name) const;
  int64_t GetFixed(const std::string& name) const;
  void SetFixed(const std::string& name, int64_t amount);
  bool empty() const { return amounts_.empty(); }
  const std::map<std::string, int64_t>& amounts() const { return amounts_; }

  // True if every amount of `need` is available here.
  bool Contains(const ResourceSet& need) const;
  // Saturates at the largest int64 amount (cluster totals of absurd workers).
  void Add(const ResourceSet& other);
  // Precondition: Contains(other).
  void Subtract(const ResourceSet& other);

  bool operator==(const ResourceSet& o) const { return amounts_ == o.amounts_; }
  bool operator!=(const ResourceSet& o) const { return !(*this == o); }

  // "CPU 2, GPU 0.5, memory 1e9" for messages.
  std::string ToString() const;

 private:
  std::map<std::string, int64_t> amounts_;
};

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

const char* PlacementStrategyName(PlacementStrategy s);
Result<PlacementStrategy> ParsePlacementStrategy(const std::string& s);

// A trial's resource request: bundles plus a strategy. Bundle 0 hosts the actor
// unless `head_bundle_empty`, in which case the first element of `bundles` is
// the first worker bundle and the actor itself takes nothing.
struct PlacementRequest {
  std::vector<ResourceSet> bundles;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  bool head_bundle_empty = false;
  // Bundle 0 (the actor's) may go only to a worker that hosts this trainable;
  // empty: any worker. Set by the head from the spec, not part of the JSON.
  std::string actor_trainable;

  // Parses {"bundles": [...], "strategy": "PACK"} with Ray's normalisation.
  // A missing object gives the default [{CPU: 1}], PACK.
  static Result<PlacementRequest> FromJson(const Json& j);
  Json ToJson() const;
  // The sum over all bundles.
  ResourceSet Total() const;
  // Canonical text: equal requests have equal keys (pool key of the PG manager).
  std::string Key() const;
  std::string ToString() const;

  bool operator==(const PlacementRequest& o) const { return Key() == o.Key(); }
};

}  // namespace ztune
