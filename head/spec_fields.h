// Readers for the fields of a submitted spec (docs/spec.md), shared by the
// experiment spec and the scheduler spec. Every refusal is InvalidArgument
// naming the field as the user wrote it ("spec.scheduler.max_t: ...").
// Free functions; thread-compatible.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

// InvalidArgument "spec.KEY: WHAT".
Status BadSpecField(const std::string& key, const std::string& what);
// Refuses a key of the object `j` that is not in `allowed`, listing those
// that are. `where` is the object's path ("" for the spec itself).
Status CheckSpecKeys(const Json& j, const std::string& where, const std::set<std::string>& allowed);

Result<int64_t> ReadSpecInt(const Json& j, const std::string& key, int64_t min);
Result<double> ReadSpecNonNegative(const Json& j, const std::string& key);
// A finite number (any sign).
Result<double> ReadSpecNumber(const Json& j, const std::string& key);
Result<bool> ReadSpecBool(const Json& j, const std::string& key);
// A non-empty string without control characters (keys reach logs and tables).
Result<std::string> ReadSpecName(const Json& j, const std::string& key);

}  // namespace ztune::head
