// SearchSpace: grid and random search over a JSON parameter space (Ray's
// BasicVariantGenerator). Variant k of an experiment is a pure function of
// (space, seed, k), so the searcher's whole state is "the next k": a restarted
// head regenerates nothing twice and loses nothing. Plain value.
//
// Samplers are single-key objects: {"grid_search": [...]}, {"choice": [...]},
// {"uniform": [lo, hi]}, {"quniform": [lo, hi, q]}, {"loguniform": [lo, hi]},
// {"randint": [lo, hi]} (hi exclusive), {"normal": [mean, sd]}. Other objects
// nest; every other value is a constant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

// Whether `key` names a sampler ({"uniform": [...]} and the like above).
bool IsSamplerName(const std::string& key);

class SearchSpace {
 public:
  // InvalidArgument names the offending path ("param_space.lr: ...").
  static Result<SearchSpace> Parse(const Json& space);

  // Number of grid combinations (1 without grid_search).
  uint64_t GridSize() const { return grid_size_; }
  // Total variants for `num_samples` (grid x num_samples, as Ray); nullopt
  // when that does not fit in 64 bits.
  std::optional<uint64_t> NumVariants(int64_t num_samples) const {
    uint64_t total = 0;
    if (num_samples < 0 ||
        __builtin_mul_overflow(grid_size_, static_cast<uint64_t>(num_samples), &total)) {
      return std::nullopt;
    }
    return total;
  }
  // The config of variant `index`: repeat index / GridSize() samples, grid
  // combination index % GridSize(). Deterministic in (seed, index).
  Json Variant(uint64_t seed, uint64_t index) const;

 private:
  struct Leaf {
    std::vector<std::string> path;
    std::string kind;  // "grid_search", "choice", "uniform", ...
    Json args;
    uint64_t grid_stride = 0;  // for grid leaves
  };
  Json space_;
  std::vector<Leaf> leaves_;
  uint64_t grid_size_ = 1;
};

}  // namespace ztune::head
