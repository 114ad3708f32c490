// What the RocksDB store's files (open, checks, salvage) share: the RocksDB options of a
// ztune store, the conversion of RocksDB statuses, an info logger that cannot
// abort the process on a full disk, a WAL filter that counts what recovery
// replays, and an owner for an open database and its column family handles.
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
#include "storage/store.h"

namespace ztune::storage::internal {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;

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

// RocksDB's info log for a ztune store. RocksDB's own file logger aborts the
// process (an assertion in WritableFileWriter, which Debian's build keeps) on
// the log line after a failed write, i.e. as soon as the disk is full; this
// one stops writing the file after an error and carries on.
//
// It also keeps RocksDB's warnings (and the few INFO lines that describe WAL
// recovery and repair) in memory, so that errors can quote RocksDB's own
// account of what it dropped ("<dir>/000012.log: dropping 31211 bytes;
// Corruption: checksum mismatch").
//
// Thread-safe: RocksDB's background threads log concurrently.
class InfoLog final : public rocksdb::Logger {
 public:
  // Appends to `dir`/LOG after renaming an existing LOG to LOG.old.<micros>
  // (the newest few old ones are kept, as RocksDB does). If the file cannot
  // be written the log is kept in memory only.
  static std::shared_ptr<InfoLog> ToFile(const std::string& dir);
  // Writes nothing to disk: read-only opens and salvage's dry runs must not
  // touch the directory.
  static std::shared_ptr<InfoLog> InMemory();

  ~InfoLog() override;

  void Logv(const char* format, va_list ap) override;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override;
  void Flush() override;

  // The retained lines, oldest first (at most kMaxNotable).
  std::vector<std::string> Notable() const;

 protected:
  rocksdb::Status CloseImpl() override;

 private:
  static constexpr size_t kMaxNotable = 200;
  static constexpr uint64_t kMaxFileBytes = 16 * kMiB;

  explicit InfoLog(std::string dir);
  void OpenFile();                                                   // mu_ held
  void Write(rocksdb::InfoLogLevel level, const std::string& line);  // mu_ held

  const std::string dir_;  // empty: memory only
  mutable std::mutex mu_;
  // Guarded by mu_.
  std::FILE* file_ = nullptr;
  uint64_t file_bytes_ = 0;
  std::deque<std::string> notable_;
};

// Watches the WAL records RocksDB replays at open. It counts them per family
// (entries of a family that already flushed past a WAL are not counted:
// replaying them or not changes nothing), and it checks that the records'
// sequence numbers are contiguous: a record whose sequence is past the end of
// the previous one means records in between were lost (a WAL cut or deleted
// between two others), which RocksDB itself does not notice unless the WAL
// was tracked in the MANIFEST. What happens at such a gap depends on the mode.
class WalWatcher final : public rocksdb::WalFilter {
 public:
  enum class Mode {
    // Stop the replay at the first record: a cheap look at what the SST
    // files alone hold. Read-only opens only (a read-write open would
    // discard the WAL).
    kStopAtFirstRecord,
    // Count; ignore gaps (salvage's dry runs).
    kCount,
    // Apply nothing after a gap (every later record is ignored, and
    // counted): what comes after it is not a state the head had (salvage's
    // point-in-time recovery).
    kDropAfterGap,
    // Fail the open at a gap (Corruption "reported by Wal Filter"): the
    // normal open and --check.
    kFailAtGap,
  };

  explicit WalWatcher(Mode mode) : mode_(mode) {}

  void ColumnFamilyLogNumberMap(const std::map<uint32_t, uint64_t>& cf_lognumber_map,
                                const std::map<std::string, uint32_t>& cf_name_id_map) override;
  WalProcessingOption LogRecordFound(unsigned long long log_number,
                                     const std::string& log_file_name,
                                     const rocksdb::WriteBatch& batch,
                                     rocksdb::WriteBatch* new_batch, bool* batch_changed) override;
  const char* Name() const override { return "ztune.WalWatcher"; }

  // Records (commits) replayed, and with kDropAfterGap those ignored after a
  // gap; per family name, the entries (puts and deletes) of each.
  uint64_t batches() const { return batches_; }
  const std::map<std::string, uint64_t>& entries() const { return entries_; }
  uint64_t dropped_batches() const { return dropped_batches_; }
  const std::map<std::string, uint64_t>& dropped_entries() const { return dropped_entries_; }
  // The first gap seen, described ("<file>: the records jump from sequence
  // 1201 to 1456 ..."), or "".
  const std::string& gap() const { return gap_; }
  // The first missing sequence number of the first gap (0 if none): a family
  // whose table files hold entries from there on is ahead of the point
  // replay stopped at.
  uint64_t gap_from() const { return gap_from_; }

 private:
  const Mode mode_;
  std::map<uint32_t, uint64_t> cf_log_number_;
  std::map<uint32_t, std::string> cf_name_;
  uint64_t batches_ = 0;
  std::map<std::string, uint64_t> entries_;
  bool dropping_ = false;
  uint64_t dropped_batches_ = 0;
  std::map<std::string, uint64_t> dropped_entries_;
  // The sequence number the next record must start at; 0 before the first.
  uint64_t next_sequence_ = 0;
  std::string gap_;
  uint64_t gap_from_ = 0;
};

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

// " RocksDB said: <line>; <line>" from `log`'s retained lines that mention a
// WAL, MANIFEST or table file, or "" if none.
std::string RocksDbSaid(const InfoLog& log);

}  // namespace ztune::storage::internal
