// Salvage by rebuilding the MANIFEST (docs/storage.md, "Salvage"): for a
// store whose column families or schema record are missing, whose MANIFEST is
// unreadable, or that point-in-time recovery cannot make readable. RocksDB's
// RepairDB rebuilds the MANIFEST from the table files and moves unreadable
// files to lost/; the WAL of the damaged copy is then re-applied on top,
// read without RocksDB, so that no batch is lost for a family that has no
// table file left.
//
// Storage-internal (includes RocksDB). Salvage path only; no thread affinity.
#pragma once

#include <string>

#include "common/status.h"
#include "storage/rocksdb_store.h"

namespace ztune::storage::internal {

// Repairs `dir` in place; `copy` is the untouched damaged copy (its WAL files
// and blob files are read). Resets the report's WAL counts to what the repair
// replayed and records every loss.
Status Repair(const std::string& dir, const std::string& copy, SalvageReport* report);

}  // namespace ztune::storage::internal
