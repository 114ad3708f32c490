// What the RocksDB store's files (open, checks, salvage) share: the RocksDB options of a
// ztune store, the conversion of RocksDB statuses, an owner for an open
// database and its column family handles, and the orphan-table check; with
// the info logger (rocksdb_info_log.h) and the WAL filter (wal_watcher.h),
// which it includes.
//
// Storage-internal: includes RocksDB, so only storage/*.cc (and the storage
// tests, which poke at RocksDB directly) include it.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/wal_filter.h>

#include <array>
#include <cstdarg>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "storage/rocksdb_info_log.h"
#include "storage/store.h"
#include "storage/wal_watcher.h"

namespace ztune::storage::internal {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;

// The WAL a crash leaves is replayed before the head serves (2-3 ms per MB
// on our 2-vCPU VMs: docs/benchmarks.md, "recovery"):
// RocksDB flushes the families holding the oldest WAL file once the WAL
// exceeds this. The results family flushes at its own 32 MiB memtable; the
// bound mostly makes the rarely written families (experiments, meta) and the
// trial records flush, which are small.
inline constexpr uint64_t kMaxTotalWalBytes = 64 * kMiB;

// How an open treats damage in the WAL (docs/storage.md, "Damage").
enum class WalRecovery {
  // kTolerateCorruptedTailRecords: only a torn last record is dropped; any
  // other damage fails the open. Plus track_and_verify_wals_in_manifest. The
  // normal open and --check.
  kStrict,
  // kPointInTimeRecovery: replay stops at the first damaged record and drops
  // the rest. Salvage: the result is a state the head really had.
  kPointInTime,
  // kSkipAnyCorruptedRecords: skips damaged records and replays the rest.
  // Salvage falls back to it only when point-in-time recovery cannot open
  // (a family was flushed past the damage), and uses it read-only to count
  // what point-in-time recovery drops.
  kSkipDamaged,
};

const std::string& DefaultFamilyName();
// The families a store of schema `schema` has (all of them for schemas 1 and 2).
std::vector<std::string> FamiliesOfSchema(int schema);

rocksdb::Slice ToSlice(std::string_view s);
std::string_view ToView(const rocksdb::Slice& s);

// Maps a RocksDB status onto our closed code set. `what` says what was being
// done ("commit", "open"); every message names the data directory. Running
// out of space (NoSpace, SpaceLimit) becomes ResourceExhausted.
Status FromRocks(const rocksdb::Status& s, const std::string& dir, std::string_view what);
Status FromException(const std::string& dir, std::string_view what, const char* message);

rocksdb::DBOptions MakeDbOptions(WalRecovery recovery);
rocksdb::ColumnFamilyOptions MakeFamilyOptions(Family f);
// Ours for our family names; RocksDB's defaults for "default" and unknown ones.
rocksdb::ColumnFamilyOptions OptionsForFamilyName(const std::string& name);
// The column families the MANIFEST of `dir` names (RocksDB's
// ListColumnFamilies; nothing is opened or changed).
Result<std::vector<std::string>> ListFamilyNames(const std::string& dir);
std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(const std::vector<std::string>& names);

// The pid of another process holding the RocksDB LOCK of `dir` (fcntl
// F_GETLK, so it also works on a read-only directory), or nullopt.
std::optional<long> LockHolder(const std::string& dir);

// An open database and every column family handle it was opened with;
// destroys the handles and closes the database on destruction.
class RawDb {
 public:
  // Opens `dir` with exactly the given families (RocksDB requires every
  // family on disk to be named). Errors as FromRocks(..., "open").
  static Result<std::unique_ptr<RawDb>> Open(
      const std::string& dir, const rocksdb::DBOptions& options,
      const std::vector<rocksdb::ColumnFamilyDescriptor>& families, bool read_only);
  ~RawDb();
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  rocksdb::DB& db() { return *db_; }
  // The handle of family `name`, or nullptr.
  rocksdb::ColumnFamilyHandle* Find(std::string_view name) const;
  const std::vector<rocksdb::ColumnFamilyHandle*>& handles() const { return handles_; }
  // Creates family `name` with `options`; its handle joins handles().
  Status CreateFamily(const std::string& dir, const std::string& name,
                      const rocksdb::ColumnFamilyOptions& options);
  // Drops family `name` (its data goes once nothing references it) and
  // forgets its handle. OK if there is no such family.
  Status DropFamily(const std::string& dir, const std::string& name);
  // Destroys the handles and closes the database (once); RocksDB's status.
  rocksdb::Status Close();

 private:
  RawDb(std::unique_ptr<rocksdb::DB> db, std::vector<rocksdb::ColumnFamilyHandle*> handles)
      : db_(std::move(db)), handles_(std::move(handles)) {}

  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  bool closed_ = false;
};

// Reads every entry of `cf` with checksums verified and without filling the
// block cache. Tells whether the family holds any key, or the read error.
Result<bool> ReadWholeFamily(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf,
                             const std::string& dir);

// Corruption if one of the table files `names` (in `files_dir`; they are not
// in the MANIFEST of `db`, an open of `dir` with its WAL replayed) holds an
// entry newer than the newest `db` recovered. No crash leaves such a file (a
// flush or compaction output not yet installed holds what the WAL or older
// tables still have; an obsolete file what newer files have); a MANIFEST that
// lost its latest flush records does, and a read-write open deletes it as
// obsolete together with the only copy of those records.
Status CheckOrphanTables(RawDb& db, const std::string& dir, const std::string& files_dir,
                         const std::vector<std::string>& names);

// The table files of `names` (in `files_dir`) that open as tables, the only
// ones CheckOrphanTables reads: an output torn by a crash does not.
std::vector<std::string> CompleteTables(const std::string& files_dir,
                                        const std::vector<std::string>& names);

}  // namespace ztune::storage::internal
