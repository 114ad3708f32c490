// The arguments of client requests (docs/client-protocol.md): the seam where
// a request's JSON values become typed values, InvalidArgument naming the
// argument otherwise. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

// A non-empty string argument.
Result<std::string> StringArg(const Json& request, const char* key);
// A trial id argument (a non-empty string).
Result<TrialId> TrialIdArg(const Json& request, const char* key);
// A non-negative integer argument.
Result<uint64_t> UIntArg(const Json& request, const char* key);
// An optional non-negative integer argument no larger than `max`: nullopt
// when absent or null.
Result<std::optional<uint64_t>> OptionalUIntArg(const Json& request, const char* key,
                                                uint64_t max);
// An array of 1 to `max` trial ids, without repeats.
Result<std::vector<TrialId>> TrialIdsArg(const Json& request, const char* key, size_t max);

}  // namespace ztune::head
