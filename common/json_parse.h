// Parsing JSON from outside (client requests): a Status instead of an
// exception, and a bound on nesting depth. nlohmann parses deep documents
// iteratively but dumps them recursively, so 100,000 levels in a request (or
// in a spec constant later stored and echoed) overflowed the head's stack.
#pragma once

#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace ztune {

inline constexpr int kMaxJsonDepth = 64;

// The document in `text`, or InvalidArgument naming the problem (syntax error
// with its position, or nesting deeper than `max_depth` levels).
Result<Json> ParseJson(std::string_view text, int max_depth = kMaxJsonDepth);

// ParseJson for files people write by hand (a worker's --trainables): an
// object that names a key twice is refused, naming the key. nlohmann keeps
// the last value silently, so a copied-and-edited entry would replace the
// one above it without a word.
Result<Json> ParseJsonNoDuplicateKeys(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace ztune
