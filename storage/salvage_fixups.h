// The steps both salvage paths (point-in-time recovery and the MANIFEST
// rebuild, docs/storage.md "Salvage") apply to a recovered database before it
// is handed back: read everything with checksums, rebuild the checkpoints
// family from the damaged copy's blob files where RocksDB cannot read it,
// recreate missing families and the schema record. Each step records what it
// did or lost in the SalvageReport.
//
// Storage-internal (includes RocksDB). Salvage path only; no thread affinity.
#pragma once

#include <rocksdb/write_batch.h>

#include <string>

#include "common/status.h"
#include "storage/rocksdb_internal.h"
#include "storage/rocksdb_store.h"

namespace ztune::storage::internal {

// Salvage writes in synced batches of about this size: large enough that the
// fsyncs do not dominate, small enough to bound the memory a batch takes.
inline constexpr uint64_t kSalvageBatchBytes = 64 * kMiB;

// Appends RocksDB's notable log lines (its account of the damage and of what
// it dropped) to the report.
void AddMessages(const InfoLog& log, SalvageReport* report);

// Writes `batch` with sync=true and clears it.
Status SyncedWrite(RawDb& db, const std::string& dir, rocksdb::WriteBatch* batch);

// Reads everything (checksums verified). Damage in a table file of any
// family fails; values of the checkpoints family RocksDB cannot read set
// *checkpoints_unreadable instead (RebuildCheckpoints deals with them).
Status CheckAll(RawDb& db, const std::string& dir, bool* checkpoints_unreadable);

// Rebuilds the checkpoints family so that every key reads: values RocksDB
// can read are kept, values it cannot (a damaged blob record, a blob file the
// MANIFEST no longer names) are taken from the blob files of `copy` (the
// damaged copy) if a record with a good CRC is there, and dropped otherwise.
Status RebuildCheckpoints(RawDb& db, const std::string& dir, const std::string& copy,
                          SalvageReport* report);

// Creates the families the schema has and the store lacks, empty.
Status CreateMissingFamilies(RawDb& db, const std::string& dir, SalvageReport* report);

// Writes the schema record if it is gone: the salvaged store is a ztune store
// (the damaged one was; Open refused it only because of damage).
Status WriteSchemaIfMissing(RawDb& db, const std::string& dir, SalvageReport* report);

// CreateMissingFamilies, then WriteSchemaIfMissing.
Status FinishFamiliesAndSchema(RawDb& db, const std::string& dir, SalvageReport* report);

}  // namespace ztune::storage::internal
