// The fields a worker fills into every result (Ray's Trainable.train():
// training_iteration, time_total_s, trial_id, ...), merged into the
// trainable's own result and packed straight to a RawResult: byte for byte
// what RawResult::FromJson gives for the DOM after the same assignments,
// without building that DOM. Copying the result's map and inserting a dozen
// keys into it was the largest part of a worker's step at one result per
// TRAIN (docs/benchmarks.md, "2026-12-06 (afternoon)").
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "common/json.h"
#include "common/protocol/messages.h"

namespace ztune::protocol {

struct AutoField {
  enum class Rule : uint8_t {
    kReplace,     // the trainable's own value under this key is replaced
    kSetDefault,  // Ray's setdefault: the trainable's own value wins
  };
  std::string_view key;
  std::variant<bool, int64_t, double, std::string_view> value;
  Rule rule = Rule::kReplace;
};

// `result` with `fields` merged in by their rules. Preconditions:
// result.is_object(); `fields` sorted by key (byte order, as the map's keys)
// and distinct. Thread-safe (the thread's scratch buffer).
RawResult PackWithAutoFields(const Json& result, std::span<const AutoField> fields);

}  // namespace ztune::protocol
