// Reading a stored trial record's last result without building its DOM. A
// head's start on 100,000 finished trials is CPU-bound in parsing their
// records (docs/benchmarks.md, "recovery"), and the last result is the
// largest member of each; kept as the stored text (LastResult::SetStored), it
// is parsed only if something reads it. What a start does read of it (the
// experiment's metric, for the best trial) is taken from the text here.
//
// Pure functions; thread-safe (the start parses records on two threads).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ztune::head {

// What ScanLastResultText found.
struct LastResultScan {
  // Corruption, named as Trial::FromJson names it, when `text` is not a JSON
  // object that nlohmann parses, or its `done` or `should_checkpoint` is not
  // a boolean; OK otherwise.
  Status status;
  // Read such a result as a DOM instead: a key the scan looks at repeats in
  // its object (the DOM keeps the last value, the scan does not follow), or
  // it nests deeper than kMaxScanDepth.
  bool needs_dom = false;
  // The finite number at `metric_key` (FindFlatKey's rule: the top-level key
  // spelt so, else the path split at '/'); nullopt when there is none.
  std::optional<double> metric;
};

// Results from workers nest at most 64 levels (docs/protocol.md).
inline constexpr size_t kMaxScanDepth = 64;

// One pass over `text`, as strict as nlohmann's parser: no DOM, and no
// allocation per key or value. `metric_key` empty: no metric is looked for.
LastResultScan ScanLastResultText(std::string_view text, const std::string& metric_key);

}  // namespace ztune::head
