// RocksDbStore: the production Store, one RocksDB database per data directory
// (`ztune-head --data-dir`) with one column family per Family. Layout, value
// formats, durability contract, the Open error table and what is done about
// damaged files and full disks: docs/storage.md.
//
// Every Commit is one rocksdb::WriteBatch written with sync=true: one WAL
// fsync per call, all-or-nothing across families after a crash or SIGKILL.
//
// Not thread-safe; owned by the head loop thread. (RocksDB runs its own flush
// and compaction threads internally; they never call back into ztune code.)
// RocksDB stays behind this file: the header exposes no RocksDB type.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "storage/free_space.h"
#include "storage/store.h"

namespace rocksdb {
class ColumnFamilyHandle;
class Status;
}  // namespace rocksdb

namespace ztune::storage {

namespace internal {
class RawDb;
class InfoLog;
class WalWatcher;
}  // namespace internal

struct RocksDbStoreOptions {
  // Free-space reserve of the data directory's file system (see
  // free_space.h). Commit refuses with ResourceExhausted, and Open (for
  // writing) refuses, while fewer bytes than this would remain free. It has to
  // cover what RocksDB writes on its own after the last commit: flushing the
  // memtables (db_write_buffer_size, 256 MiB at most, less once compressed),
  // a new MANIFEST and OPTIONS file. 0 disables the check.
  uint64_t min_free_bytes = 256ull << 20;
  // The free figure is re-probed after this long or after this many bytes
  // were committed since the last probe, whichever comes first.
  TimeMs free_space_recheck_ms = 1000;
  uint64_t free_space_recheck_bytes = 16ull << 20;
  // Empty: StatvfsFreeBytes. Tests inject a fake disk.
  FreeSpaceProbe free_space_probe;
  // For the recheck interval; nullptr: a steady clock. Must outlive the store.
  const Clock* clock = nullptr;
  // Flush the memtables when the store is closed, so that the WAL holds
  // nothing after a clean stop (a WAL damaged at rest then loses nothing, and
  // the next open replays nothing). Skipped when the disk is at its reserve.
  // Tests set false to leave the store as a crash would (every commit only in
  // the WAL).
  bool flush_on_close = true;
  // Open with RocksDB's automatic compactions off until ResumeCompactions.
  // A crash under load leaves level-0 files to merge, and on a machine of two
  // cores the compaction that starts at the open took one of them from the
  // head's parse of its trials (a restart on 100,000 trials: 0.56 s slower;
  // docs/benchmarks.md, "recovery"). The head resumes them once it serves.
  bool defer_compactions = false;
  // Open reads the meta, experiments and trials families in full, checksums
  // verified, so that damage there is an open error naming --salvage rather
  // than a failure halfway through a caller's load. A caller that reads the
  // trials family in full right after (the head's start: its scan verifies
  // the same checksums, and its errors name --salvage too) sets false and
  // saves reading it twice (7% of a start on 100,000 trials).
  bool read_trials_at_open = true;
  // Files other layers keep in the data directory beside the store (the
  // head's key and allow-lists): a directory holding only these, and no
  // store yet, is a fresh one rather than a foreign directory to refuse.
  std::vector<std::string> companion_files;
};

// What RocksDbStore::Salvage did and what was lost, as far as it can tell.
struct SalvageReport {
  std::string dir;
  // Why the normal open refused the store (its message); empty if it did not
  // refuse, in which case nothing was done.
  std::string problem;
  // Where the untouched damaged directory was copied before anything was
  // changed; empty if nothing was done.
  std::string damaged_copy;
  // The WAL recovery used: "point-in-time" or "skip-damaged-records";
  // "repair" when the MANIFEST had to be rebuilt (RocksDB's RepairDB).
  std::string method;
  // Commits (WAL records) replayed, and those found intact after the damage
  // point but dropped to keep the store a state the head really had (at
  // least: records inside the damaged 32 KiB block are not visible to anyone).
  uint64_t wal_commits_replayed = 0;
  uint64_t wal_commits_dropped = 0;
  // WAL bytes RocksDB reported dropping (from the damage to the end of the
  // WAL, and any later WAL files).
  uint64_t wal_bytes_dropped = 0;
  // Family -> entries (puts, deletes) of the dropped commits.
  std::vector<std::pair<std::string, uint64_t>> wal_entries_dropped;
  // Families that were missing and were recreated empty.
  std::vector<std::string> families_recreated;
  // Checkpoints whose bytes were in blob files the repaired MANIFEST no
  // longer names: rescued from the damaged copy's blob files, or lost.
  uint64_t checkpoints_rescued = 0;
  std::vector<std::string> checkpoints_lost;  // printable keys
  // Other losses, one line each (files RocksDB moved to lost/, ...).
  std::vector<std::string> lost;
  // RocksDB's own account (its warnings during recovery / repair).
  std::vector<std::string> rocksdb_messages;
  // Keys per family after salvage, by Family.
  std::array<uint64_t, kNumFamilies> keys_after{};

  bool salvaged() const { return !damaged_copy.empty(); }
  std::string ToText() const;
};

class RocksDbStore final : public Store {
 public:
  // Opens (or creates) the store in `dir` for reading and writing. Blocks:
  // replays the WAL and reads the meta, experiments and trials families once
  // to verify their checksums (see docs/storage.md, "Verification").
  // Nothing on disk is changed before every check has passed. Errors, all
  // naming `dir`:
  //   FailedPrecondition  `dir` is not a directory; is non-empty but holds no
  //                       RocksDB store; holds a RocksDB store that is not a
  //                       ztune store (no meta family, or no schema key and no
  //                       ztune records); or a newer schema than kSchemaVersion.
  //   Unavailable         another process (or another RocksDbStore in this
  //                       process) has the store open.
  //   Corruption          damaged files: a damaged WAL record anywhere but in
  //                       a torn tail, a closed WAL shorter than synced,
  //                       column families or the schema record missing (a
  //                       damaged MANIFEST), damaged SST blocks in meta,
  //                       experiments or trials, an unreadable schema value.
  //                       The message points to Salvage (--salvage).
  //   ResourceExhausted   the file system has less free space than
  //                       options.min_free_bytes.
  //   IOError             the directory cannot be created, read or written.
  // A missing or empty `dir` is created and initialized with meta "schema" =
  // kSchemaVersion in one synced write.
  static Result<std::unique_ptr<RocksDbStore>> Open(const std::string& dir,
                                                    const RocksDbStoreOptions& options = {});

  // Opens an existing store without writing anything to `dir` (no LOCK, no
  // LOG, no flush): for `ztune-head --check`, which must work on a full disk
  // or a read-only directory. The same checks as Open, hence the same errors
  // (FailedPrecondition instead of creating a missing or empty `dir`);
  // Unavailable if a process holds the store open. Commit fails
  // (FailedPrecondition); reads and Verify work.
  static Result<std::unique_ptr<RocksDbStore>> OpenReadOnly(const std::string& dir);

  // `ztune-head --salvage`: makes a store that Open refuses as Corruption
  // openable again, keeping what is readable. First copies `dir` to
  // `dir`.damaged-<UTC time> (nothing is destroyed: the copy is the untouched
  // damaged store); then opens with point-in-time WAL recovery (or repairs
  // the MANIFEST with RocksDB's RepairDB when column families or the schema
  // record are missing or the MANIFEST is unreadable), rescues checkpoint
  // bytes from blob files, recreates missing families, and checks that Open
  // and Verify now succeed. Returns what it did and what was lost.
  // A store that Open accepts is left alone (report with empty problem).
  // Errors: Unavailable (in use), FailedPrecondition (no ztune store, or the
  // damage is not of a kind salvage handles, e.g. a newer schema),
  // ResourceExhausted (no room for the copy), IOError, and Corruption if the
  // store still cannot be opened afterwards (the copy is kept either way).
  static Result<SalvageReport> Salvage(const std::string& dir,
                                       const RocksDbStoreOptions& options = {});

  // Flushes the memtables if options.flush_on_close (and the disk allows),
  // then closes the database. Every commit is already durable in the synced
  // WAL, so a failed flush loses nothing.
  ~RocksDbStore() override;

  RocksDbStore(const RocksDbStore&) = delete;
  RocksDbStore& operator=(const RocksDbStore&) = delete;

  // One synced WriteBatch; returns after the WAL fsync. An empty batch is a
  // no-op (no fsync). Errors (nothing of the batch is applied in each case):
  //   ResourceExhausted   the batch would leave less than min_free_bytes free
  //                       (checked before writing), or RocksDB itself ran out
  //                       of space (then it refuses writes until space is
  //                       freed; the next Commit with room calls DB::Resume).
  //   FailedPrecondition  the store was opened read-only.
  //   IOError             the write or fsync failed; RocksDB may refuse
  //                       further writes until the store is reopened.
  Status Commit(const WriteBatch& batch) override;

  // The value, std::nullopt if absent; Corruption if the block holding it is
  // damaged, IOError on a read error. Blocks on disk reads.
  Result<std::optional<std::string>> Get(Family f, std::string_view key) override;

  // Prefix scan in bytewise key order; stops when `fn` returns false. The
  // views are valid only during the call; `fn` must not Commit. For the
  // checkpoints family every visited value is read (checkpoint bytes), so scan
  // it by trial prefix. Corruption / IOError as Get.
  Status Scan(Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override;
  Result<std::optional<Entry>> Last(Family f, std::string_view prefix) override;

  // Full offline check: verifies the checksum of every block of every SST
  // file and reads every checkpoint value (blob records carry their own
  // checksums). Cost is proportional to the store size: meant for
  // `ztune-head --check`, not for every start. Corruption names the damaged
  // file; IOError on read errors.
  Status Verify();

  // Starts the compactions that options.defer_compactions held back (and
  // lets RocksDB schedule them again from now on). OK and nothing done when
  // they were not deferred, are already resumed, or the store is read-only.
  Status ResumeCompactions();

  // RocksDB's estimate of the number of keys in `f` (property
  // rocksdb.estimate-num-keys): cheap, no disk reads, exact only when nothing
  // was overwritten or deleted. Internal if the property is unavailable.
  Result<uint64_t> ApproximateCount(Family f);

  const std::string& dir() const { return dir_; }
  bool read_only() const { return read_only_; }

 private:
  RocksDbStore(std::string dir, std::unique_ptr<internal::RawDb> db,
               std::shared_ptr<internal::InfoLog> log, bool read_only,
               const RocksDbStoreOptions& options);

  static Result<std::unique_ptr<RocksDbStore>> OpenImpl(const std::string& dir,
                                                        const RocksDbStoreOptions& options,
                                                        bool read_only);

  rocksdb::ColumnFamilyHandle* handle(Family f) const { return handles_[static_cast<size_t>(f)]; }
  // OK, or the error of a read: FromRocks with the salvage hint.
  Status ReadError(const rocksdb::Status& s, const std::string& what) const;

  std::string dir_;
  RocksDbStoreOptions options_;
  // The WAL filter db_'s options point to (read-write opens of an existing
  // store); destroyed after db_.
  std::unique_ptr<internal::WalWatcher> wal_watcher_;
  std::unique_ptr<internal::RawDb> db_;
  std::shared_ptr<internal::InfoLog> log_;
  bool read_only_;
  // Our families, indexed by Family; each also among db_'s handles. Never
  // null once Open returned.
  std::array<rocksdb::ColumnFamilyHandle*, kNumFamilies> handles_{};
  FreeSpaceGuard space_;
  // The last write failed because RocksDB ran out of space; it refuses
  // writes until DB::Resume() succeeds.
  bool resume_needed_ = false;
  bool compactions_resumed_ = false;
};

}  // namespace ztune::storage
