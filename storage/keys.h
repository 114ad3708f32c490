// Key encodings of the store (docs/storage.md). Integers are big-endian so that
// byte order is numeric order: a prefix scan of a trial's results yields them
// by training_iteration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ztune::storage {

// meta keys
inline constexpr char kMetaSchema[] = "schema";
inline constexpr char kMetaHeadEpoch[] = "head_epoch";
inline constexpr char kMetaNextExperiment[] = "next_experiment";
inline constexpr int kSchemaVersion = 1;

// trial_id + '\0': the prefix of every result / checkpoint of one trial.
std::string TrialPrefix(std::string_view trial_id);
// trial_id + '\0' + 8-byte big-endian iteration.
std::string ResultKey(std::string_view trial_id, uint64_t iteration);
// trial_id + '\0' + 8-byte big-endian checkpoint id.
std::string CheckpointKey(std::string_view trial_id, uint64_t checkpoint_id);
// The integer suffix of a ResultKey / CheckpointKey, or nullopt if malformed.
std::optional<uint64_t> KeySuffixNumber(std::string_view key);

}  // namespace ztune::storage
