// Salvage by point-in-time recovery (docs/storage.md, "Salvage"): replay
// stops at the first damaged WAL record or at a gap in the sequence numbers,
// so the store is a state the head really had; skipping damaged records
// instead only when RocksDB refuses that (a family was already flushed past
// the damage). The MANIFEST rebuild (salvage_repair.h) takes over when this
// cannot produce a readable store.
//
// Storage-internal (includes RocksDB). Salvage path only; no thread affinity.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/rocksdb_internal.h"
#include "storage/rocksdb_store.h"

namespace ztune::storage::internal {

// What a read-only replay of a store sees, without changing it.
struct DryRun {
  uint64_t batches = 0;
  std::map<std::string, uint64_t> entries;  // family -> entries replayed
  uint64_t dropped_bytes = 0;               // RocksDB's "dropping N bytes"
};

// Replays `dir` (opened read-only with the families `names`) the way
// `recovery` and `mode` say, and counts what that keeps.
Result<DryRun> ReplayReadOnly(const std::string& dir, const std::vector<std::string>& names,
                              WalRecovery recovery, WalWatcher::Mode mode);

// Point-in-time recovery of `dir` in place; `copy` is the untouched damaged
// copy (for checkpoint bytes and for the table files the open deletes).
// Returns false (with the reason in *why_not) when that cannot produce a
// readable store and the MANIFEST has to be rebuilt; `dir` may then have been
// changed (the caller restores it from the copy).
Result<bool> TryPointInTime(const std::string& dir, const std::string& copy,
                            const std::vector<std::string>& names, SalvageReport* report,
                            std::string* why_not);

}  // namespace ztune::storage::internal
