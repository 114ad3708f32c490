// Guards for bugs the fuzz targets found that are reported but not fixed yet
// (tests/fuzz/findings/README.md has each reproducer). A guard skips exactly
// the inputs that reach its bug, so that fuzzing goes on finding new ones
// instead of stopping at the known one every run. Delete a guard with its fix
// and move its reproducer into the target's corpus, where the replay test
// pins it.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "common/json.h"
#include "common/resources.h"

namespace ztune::fuzz {

// Finding resource-sum-overflow: ResourceSet keeps amounts as int64 fixed
// point (x 10^4) with no upper bound, so bundles of one request whose amounts
// of a resource add up past ~9.2e14 overflow ResourceSet::Add (signed
// overflow, UB) when the head totals the request (placement, the infeasible
// message, status). `resources` is a spec's "resources" value.
inline bool ResourceSumOverflows(const Json& resources) {
  if (!resources.is_object()) return false;
  auto bundles = resources.find("bundles");
  if (bundles == resources.end() || !bundles->is_array()) return false;
  constexpr double kMaxFixed = 9.2e18;
  std::map<std::string, double> sums;
  for (const auto& b : *bundles) {
    if (!b.is_object()) continue;
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!it.value().is_number()) continue;
      const double fixed = it.value().get<double>() * static_cast<double>(ResourceSet::kUnit);
      // Larger single amounts do not survive llround (they are dropped).
      if (std::isfinite(fixed) && fixed > 0 && fixed < kMaxFixed) sums[it.key()] += fixed;
    }
  }
  for (const auto& [name, sum] : sums) {
    if (sum >= kMaxFixed) return true;
  }
  return false;
}

// The same for a spec object (a submitted spec, a stored experiment's "spec").
inline bool SpecResourceSumOverflows(const Json& spec) {
  if (!spec.is_object()) return false;
  auto r = spec.find("resources");
  return r != spec.end() && ResourceSumOverflows(*r);
}

}  // namespace ztune::fuzz
