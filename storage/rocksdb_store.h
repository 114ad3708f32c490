// RocksDbStore: the production Store, one RocksDB database per data directory
// (`ztune-head --data-dir`) with one column family per Family. Layout, value
// formats, durability contract and the Open error table: docs/storage.md.
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

#include "storage/store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace ztune::storage {

class RocksDbStore final : public Store {
 public:
  // Opens (or creates) the store in `dir`. Blocks: replays the WAL and reads
  // the meta, experiments and trials families once to verify their checksums
  // (see docs/storage.md, "Verification"). Errors, all naming `dir`:
  //   FailedPrecondition  `dir` is not a directory; is non-empty but holds no
  //                       RocksDB store; holds a RocksDB store that is not a
  //                       ztune store (no meta family or no schema key); or
  //                       holds a store with a newer schema than kSchemaVersion.
  //   Unavailable         another process (or another RocksDbStore in this
  //                       process) has the store open.
  //   Corruption          RocksDB found damaged files, or the schema value is
  //                       unreadable.
  //   IOError             the directory cannot be created or read.
  // A missing or empty `dir` is created and initialized with meta "schema" =
  // kSchemaVersion in one synced write.
  static Result<std::unique_ptr<RocksDbStore>> Open(const std::string& dir);

  // Closes the database (no flush is needed: every commit is in the synced WAL).
  ~RocksDbStore() override;

  RocksDbStore(const RocksDbStore&) = delete;
  RocksDbStore& operator=(const RocksDbStore&) = delete;

  // One synced WriteBatch; returns after the WAL fsync. An empty batch is a
  // no-op (no fsync). IOError (including "no space left") if the write failed;
  // then nothing of the batch is applied, and RocksDB may refuse further writes
  // until the store is reopened (the head exits and restarts).
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

  // Full offline check: verifies the checksum of every block of every SST
  // file and reads every checkpoint value (blob records carry their own
  // checksums). Cost is proportional to the store size: meant for a
  // `ztune-head --verify`-style tool, not for every start. Corruption names
  // the damaged file; IOError on read errors.
  Status Verify();

  // RocksDB's estimate of the number of keys in `f` (property
  // rocksdb.estimate-num-keys): cheap, no disk reads, exact only when nothing
  // was overwritten or deleted. Internal if the property is unavailable.
  Result<uint64_t> ApproximateCount(Family f);

  const std::string& dir() const { return dir_; }

 private:
  RocksDbStore(std::string dir, std::unique_ptr<rocksdb::DB> db,
               std::vector<rocksdb::ColumnFamilyHandle*> all_handles,
               std::array<rocksdb::ColumnFamilyHandle*, kNumFamilies> handles);

  rocksdb::ColumnFamilyHandle* handle(Family f) const { return handles_[static_cast<size_t>(f)]; }

  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  // Every open column family handle (ours, "default", and any unknown family
  // found on disk); destroyed before db_ is closed.
  std::vector<rocksdb::ColumnFamilyHandle*> all_handles_;
  // Our families, indexed by Family; each also in all_handles_. Never null.
  std::array<rocksdb::ColumnFamilyHandle*, kNumFamilies> handles_;
};

}  // namespace ztune::storage
