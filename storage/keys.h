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
// + worker id: the CURVE public key (Z85) that worker id is bound to, so that
// after a head restart no other key can take the id of a worker whose trials
// wait to re-attach (docs/security.md).
inline constexpr char kMetaWorkerKeyPrefix[] = "worker_key/";
// + sha256 hex of a submitted project archive: {"size": bytes, "pages": n},
// written with its pages in one batch, so present means complete. Its pages
// are at CodePageKey (docs/storage.md "Submitted code").
inline constexpr char kMetaCodePrefix[] = "code/";
std::string CodeKey(std::string_view hex);
// CodeKey + "/" + 8-digit decimal page index (protocol::kCodePageBytes each).
std::string CodePageKey(std::string_view hex, uint64_t page);
// 2: a trial's checkpoint records and error_log entries are records of their
// own (TrialChildKey) instead of lists inside the trial record. A head
// migrates a schema-1 store when it loads it.
// 3: a result's value is msgpack (head/stored_result.h) where it was JSON
// text. Nothing is rewritten: the head reads both, and the new number keeps
// an older head, which reads only JSON, from opening a store it would
// misread.
inline constexpr int kSchemaVersion = 3;

// trial_id + '\0': the prefix of every result / checkpoint of one trial.
std::string TrialPrefix(std::string_view trial_id);
// trial_id + '\0' + 8-byte big-endian iteration.
std::string ResultKey(std::string_view trial_id, uint64_t iteration);
// trial_id + '\0' + 8-byte big-endian checkpoint id.
std::string CheckpointKey(std::string_view trial_id, uint64_t checkpoint_id);
// The integer suffix of a ResultKey / CheckpointKey, or nullopt if malformed.
std::optional<uint64_t> KeySuffixNumber(std::string_view key);

// Trials family: a trial's record is at its trial_id; its child records at
// trial_id + '\0' + kind + 8-byte big-endian number, so that a prefix scan
// gives a trial's record and then its children in order.
inline constexpr char kTrialCheckpointRecord = 'c';  // number: the checkpoint id
inline constexpr char kTrialErrorRecord = 'e';       // number: the failure (1-based)
std::string TrialChildKey(std::string_view trial_id, char kind, uint64_t n);
// Whether a trials-family key names a child record rather than a trial.
inline bool IsTrialChildKey(std::string_view key) {
  return key.find('\0') != std::string_view::npos;
}
struct TrialChildKeyParts {
  std::string_view trial_id;
  char kind = 0;
  uint64_t n = 0;
};
// The parts of a TrialChildKey; nullopt if malformed (length, unknown kind).
std::optional<TrialChildKeyParts> ParseTrialChildKey(std::string_view key);

}  // namespace ztune::storage
