// The decode of RESULT and RESULTS headers read in place: the message the head
// receives most (one per result batch, or per worker pass when coalesced).
// The general decoder (codec.cc) unpacks a header into msgpack-c's object
// tree, copying every string into a zone, and then re-packs each result into
// RawResult's normal form; on the head's loop at buffer 1 that was a sixth of
// its time (docs/benchmarks.md). Here the header's bytes are walked once: the
// envelope fields are read and each result is checked to be in the normal
// form already (what msgpack-c and Python's msgpack write for JSON-like
// values), so its bytes are copied as they are.
//
// Only for headers of the common shape: anything else (a key unknown or
// repeated, a nil, a result with a float32, a non-minimal integer or length,
// invalid UTF-8, nesting deeper than kMaxInPlaceResultDepth, an ext type,
// malformed or trailing bytes) answers nullopt and the general decoder runs,
// which gives the same body or the error. So whenever this answers, its body
// equals the general decoder's (tests/common/results_in_place_test.cc, and
// the codec fuzz target, check that on every input).
//
// Stateless and thread-safe; never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/protocol/messages.h"

namespace ztune::protocol {

// A result nested deeper than this (the general limit is 64) takes the
// general path.
inline constexpr int kMaxInPlaceResultDepth = 32;

// `header` is frame 2 of a RESULT (`command_index` the index of ResultBatch
// in Body) or a RESULTS (of Results); any other index answers nullopt.
std::optional<Body> DecodeResultsInPlace(size_t command_index, std::string_view header);

}  // namespace ztune::protocol
