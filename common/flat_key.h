// Flat keys: "a/b/c" names a nested member of a result (Ray's flattened
// metric names, e.g. a metric or stopping criterion "eval/acc"). Shared by
// the head (metrics, stop criteria, the dashboard's series) and the client
// (`report`). Pure function; thread-safe.
#pragma once

#include <string>

#include "common/json.h"

namespace ztune {

// The member named by `flat_key`: a top-level key spelt exactly so first,
// else the nested path split at '/'. nullptr when missing or when `result`
// (or a step of the path) is not an object.
const Json* FindFlatKey(const Json& result, const std::string& flat_key);

}  // namespace ztune
