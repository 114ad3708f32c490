#include "storage/rocksdb_store.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "storage/keys.h"

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// Values at least this large go to blob files in the checkpoints family.
constexpr uint64_t kMinBlobSize = 64 * kKiB;

const std::string& DefaultFamilyName() {
  static const std::string name(rocksdb::kDefaultColumnFamilyName);
  return name;
}

rocksdb::Slice ToSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
std::string_view ToView(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

bool IsLockError(const rocksdb::Status& s) {
  // PosixEnv::LockFile reports either "lock hold by current process ..." (a
  // second DB::Open in this process) or "While lock file: <dir>/LOCK: Resource
  // temporarily unavailable" (another process holds the fcntl lock).
  if (!s.IsIOError()) return false;
  const std::string msg = s.ToString();
  return msg.find("lock hold by current process") != std::string::npos ||
         msg.find("While lock file") != std::string::npos;
}

// Maps a RocksDB status onto our closed code set. `what` says what was being
// done ("commit", "open"); every message names the data directory.
Status FromRocks(const rocksdb::Status& s, const std::string& dir, std::string_view what) {
  if (s.ok()) return Status::Ok();
  const std::string detail = s.ToString();
  const std::string where = "data directory " + dir + ": " + std::string(what) + ": ";
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return Status::NotFound(where + detail);
    case rocksdb::Status::kCorruption:
      return Status::Corruption("data directory " + dir + " is corrupt (" + std::string(what) +
                                "): " + detail);
    case rocksdb::Status::kIOError:
      if (IsLockError(s)) {
        return Status::Unavailable("data directory " + dir +
                                   " is in use by another process (or another store object "
                                   "in this one): " +
                                   detail);
      }
      return Status::IOError(where + detail);
    case rocksdb::Status::kInvalidArgument:
    case rocksdb::Status::kNotSupported:
      return Status::InvalidArgument(where + detail);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
      return Status::Unavailable(where + detail);
    case rocksdb::Status::kTimedOut:
      return Status::TimedOut(where + detail);
    case rocksdb::Status::kAborted:
      return Status::Aborted(where + detail);
    default:
      return Status::Internal(where + detail);
  }
}

Status FromException(const std::string& dir, std::string_view what, const char* message) {
  return Status::Internal("data directory " + dir + ": " + std::string(what) +
                          ": unexpected exception from RocksDB: " + message);
}

// The smallest string greater than every string with prefix `prefix`, or ""
// if there is none (the prefix is empty or all 0xff bytes).
std::string PrefixSuccessor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(s.back());
    if (last != 0xff) {
      ++last;
      return s;
    }
    s.pop_back();
  }
  return s;
}

rocksdb::CompressionType PickCompression(rocksdb::CompressionType wanted) {
  const auto supported = rocksdb::GetSupportedCompressions();
  if (std::find(supported.begin(), supported.end(), wanted) != supported.end()) return wanted;
  return rocksdb::kNoCompression;
}

rocksdb::DBOptions MakeDbOptions() {
  rocksdb::DBOptions o;
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  // Commits are synced WAL writes; memtables are flushed in the background.
  // These cap memory and WAL size across the five families.
  o.db_write_buffer_size = 256 * kMiB;
  o.max_total_wal_size = 256 * kMiB;
  // A torn tail record (power loss mid-append) is dropped; anything synced is
  // kept. This is RocksDB's default, spelled out because the durability
  // contract depends on it.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  o.keep_log_file_num = 5;
  o.max_log_file_size = 16 * kMiB;
  return o;
}

rocksdb::ColumnFamilyOptions MakeFamilyOptions(Family f) {
  // One block cache shared by all families of all stores in the process.
  static const std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(64 * kMiB);

  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));

  rocksdb::ColumnFamilyOptions o;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  o.level_compaction_dynamic_level_bytes = true;
  // Results and trial state are JSON text: cheap LZ4 on hot levels, ZSTD at
  // the bottom where most of the data ends up.
  o.compression = PickCompression(rocksdb::kLZ4Compression);
  o.bottommost_compression = PickCompression(rocksdb::kZSTD);
  o.write_buffer_size = 32 * kMiB;
  if (f == Family::kCheckpoints) {
    // Checkpoints are large opaque bytes: keep them out of the LSM tree so
    // compactions do not rewrite them, and reclaim the space of deleted
    // checkpoints (num_to_keep) by blob garbage collection.
    o.write_buffer_size = 64 * kMiB;
    o.enable_blob_files = true;
    o.min_blob_size = kMinBlobSize;
    o.blob_compression_type = rocksdb::kNoCompression;
    o.enable_blob_garbage_collection = true;
  }
  return o;
}

rocksdb::ColumnFamilyOptions OptionsForFamilyName(const std::string& name) {
  for (int i = 0; i < kNumFamilies; ++i) {
    const auto f = static_cast<Family>(i);
    if (name == FamilyName(f)) return MakeFamilyOptions(f);
  }
  return rocksdb::ColumnFamilyOptions();  // "default" and unknown families
}

// What Open found in the directory before touching it.
enum class DirState { kFresh, kExistingStore };

Result<DirState> InspectDir(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::IOError("data directory " + dir + ": cannot stat: " + ec.message());
  }
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return Status::IOError("data directory " + dir + ": cannot create: " + ec.message());
    }
    return DirState::kFresh;
  }
  if (!fs::is_directory(st)) {
    return Status::FailedPrecondition("data directory " + dir +
                                      " exists but is not a directory; refusing to touch it");
  }
  const bool empty = fs::is_empty(dir, ec);
  if (ec) return Status::IOError("data directory " + dir + ": cannot list: " + ec.message());
  if (empty) return DirState::kFresh;
  if (!fs::exists(fs::path(dir) / "CURRENT", ec)) {
    return Status::FailedPrecondition(dir +
                                      " is not a ztune data directory (no RocksDB store found); "
                                      "refusing to touch it");
  }
  return DirState::kExistingStore;
}

// Parses the decimal schema value; nullopt unless it is a positive integer.
std::optional<int> ParseSchema(std::string_view v) {
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n <= 0) return std::nullopt;
  return n;
}

// Reads every entry of `cf` with checksum verification and without polluting
// the block cache. Also tells whether the family holds any key.
Result<bool> ReadWholeFamily(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf,
                             const std::string& dir) {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(ro, cf));
  bool any = false;
  for (it->SeekToFirst(); it->Valid(); it->Next()) any = true;
  RETURN_IF_ERROR(FromRocks(it->status(), dir, "reading family " + cf->GetName()));
  return any;
}

}  // namespace

RocksDbStore::RocksDbStore(std::string dir, std::unique_ptr<rocksdb::DB> db,
                           std::vector<rocksdb::ColumnFamilyHandle*> all_handles,
                           std::array<rocksdb::ColumnFamilyHandle*, kNumFamilies> handles)
    : dir_(std::move(dir)),
      db_(std::move(db)),
      all_handles_(std::move(all_handles)),
      handles_(handles) {}

RocksDbStore::~RocksDbStore() {
  try {
    for (rocksdb::ColumnFamilyHandle* h : all_handles_) db_->DestroyColumnFamilyHandle(h);
    // Close() reports background errors; every commit is already durable in
    // the synced WAL, so there is nothing left to lose here.
    db_->Close().PermitUncheckedError();
  } catch (const std::exception&) {
    // Destructors must not throw; RocksDB does not throw here in practice.
  }
}

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const std::string& dir) {
  try {
    ASSIGN_OR_RETURN(const DirState state, InspectDir(dir));
    const bool fresh = state == DirState::kFresh;

    rocksdb::DBOptions db_options = MakeDbOptions();
    db_options.create_if_missing = fresh;
    db_options.error_if_exists = fresh;

    // Families to open: on an existing store, exactly the ones on disk (so a
    // foreign store is not modified before we know it is ours); on a fresh
    // one, ours.
    std::vector<std::string> names;
    if (fresh) {
      db_options.create_missing_column_families = true;
      names.push_back(DefaultFamilyName());
      for (int i = 0; i < kNumFamilies; ++i) names.emplace_back(FamilyName(static_cast<Family>(i)));
    } else {
      RETURN_IF_ERROR(FromRocks(rocksdb::DB::ListColumnFamilies(db_options, dir, &names), dir,
                                "listing column families"));
      if (std::find(names.begin(), names.end(), FamilyName(Family::kMeta)) == names.end()) {
        return Status::FailedPrecondition(
            dir +
            " is not a ztune data directory (a RocksDB store without a \"meta\" column "
            "family); refusing to touch it");
      }
    }

    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : names)
      descriptors.emplace_back(name, OptionsForFamilyName(name));

    std::vector<rocksdb::ColumnFamilyHandle*> raw_handles;
    rocksdb::DB* raw_db = nullptr;
    const rocksdb::Status open_status =
        rocksdb::DB::Open(db_options, dir, descriptors, &raw_handles, &raw_db);
    if (!open_status.ok()) {
      Status s = FromRocks(open_status, dir, "open");
      if (s.code() == StatusCode::kInvalidArgument) {
        // E.g. a family written by a newer ztune with options we do not know.
        return Status::FailedPrecondition(s.message() +
                                          " (was the store written by a newer ztune?)");
      }
      return s;
    }
    std::unique_ptr<rocksdb::DB> db(raw_db);
    // From here on the store object owns the handles, so every early return
    // closes the database cleanly.
    std::unique_ptr<RocksDbStore> store(
        new RocksDbStore(dir, std::move(db), raw_handles, /*handles=*/{}));
    auto find_handle = [&](std::string_view name) -> rocksdb::ColumnFamilyHandle* {
      for (rocksdb::ColumnFamilyHandle* h : store->all_handles_) {
        if (h->GetName() == name) return h;
      }
      return nullptr;
    };
    rocksdb::ColumnFamilyHandle* meta = find_handle(FamilyName(Family::kMeta));

    // Schema check, before anything is written to an existing store.
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    std::string schema_value;
    const rocksdb::Status get_status =
        store->db_->Get(ro, meta, ToSlice(kMetaSchema), &schema_value);
    bool write_schema = fresh;
    if (get_status.IsNotFound()) {
      if (!fresh) {
        // Either a crash between creating the store and the first synced
        // write (every family is empty: finish the initialization), or not
        // ours.
        for (rocksdb::ColumnFamilyHandle* h : store->all_handles_) {
          ASSIGN_OR_RETURN(const bool any, ReadWholeFamily(*store->db_, h, dir));
          if (any) {
            return Status::FailedPrecondition(
                dir +
                " is not a ztune data directory (RocksDB store without a schema key); "
                "refusing to touch it");
          }
        }
        write_schema = true;
      }
    } else if (!get_status.ok()) {
      return FromRocks(get_status, dir, "reading the schema version");
    } else {
      const std::optional<int> schema = ParseSchema(schema_value);
      if (!schema) {
        return Status::Corruption("data directory " + dir + " is corrupt: schema version '" +
                                  schema_value + "' is not a positive integer");
      }
      if (*schema > kSchemaVersion) {
        return Status::FailedPrecondition("data directory " + dir + ": store schema " +
                                          std::to_string(*schema) +
                                          " is newer than this ztune (supports " +
                                          std::to_string(kSchemaVersion) + "); upgrade ztune");
      }
      // Only schema 1 exists; an older schema would be migrated here.
    }

    // Families this version needs that the store lacks (none for schema 1
    // unless initialization was interrupted) are created now.
    for (int i = 0; i < kNumFamilies; ++i) {
      const auto f = static_cast<Family>(i);
      rocksdb::ColumnFamilyHandle* h = find_handle(FamilyName(f));
      if (h == nullptr) {
        RETURN_IF_ERROR(
            FromRocks(store->db_->CreateColumnFamily(MakeFamilyOptions(f), FamilyName(f), &h), dir,
                      std::string("creating column family ") + FamilyName(f)));
        store->all_handles_.push_back(h);
      }
      store->handles_[i] = h;
    }

    if (write_schema) {
      WriteBatch batch;
      batch.Put(Family::kMeta, kMetaSchema, std::to_string(kSchemaVersion));
      RETURN_IF_ERROR(store->Commit(batch));
    } else {
      // The head reads these families in full at recovery anyway; reading
      // them here (with checksums) turns a damaged block into a clear open
      // error instead of a failure halfway through recovery. Results and
      // checkpoints are left to Verify(): they grow without bound.
      for (Family f : {Family::kMeta, Family::kExperiments, Family::kTrials}) {
        RETURN_IF_ERROR(ReadWholeFamily(*store->db_, store->handle(f), dir).status());
      }
    }
    return store;
  } catch (const std::exception& e) {
    return FromException(dir, "open", e.what());
  }
}

Status RocksDbStore::Commit(const WriteBatch& batch) {
  if (batch.empty()) return Status::Ok();
  try {
    rocksdb::WriteBatch wb(/*reserved_bytes=*/batch.bytes() + 32 * batch.size());
    for (const WriteBatch::Op& op : batch.ops()) {
      rocksdb::ColumnFamilyHandle* cf = handle(op.family);
      const rocksdb::Status s = op.is_delete ? wb.Delete(cf, ToSlice(op.key))
                                             : wb.Put(cf, ToSlice(op.key), ToSlice(op.value));
      if (!s.ok()) return FromRocks(s, dir_, "building write batch");
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return FromRocks(db_->Write(wo, &wb), dir_, "commit");
  } catch (const std::exception& e) {
    return FromException(dir_, "commit", e.what());
  }
}

Result<std::optional<std::string>> RocksDbStore::Get(Family f, std::string_view key) {
  try {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    rocksdb::PinnableSlice value;
    const rocksdb::Status s = db_->Get(ro, handle(f), ToSlice(key), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    RETURN_IF_ERROR(FromRocks(s, dir_, std::string("get from ") + FamilyName(f)));
    return std::optional<std::string>(value.ToString());
  } catch (const std::exception& e) {
    return FromException(dir_, "get", e.what());
  }
}

Status RocksDbStore::Scan(Family f, std::string_view prefix,
                          const std::function<bool(std::string_view, std::string_view)>& fn) {
  try {
    // The bound lets RocksDB stop at the end of the prefix instead of reading
    // into the next trial's keys (and skip tombstones past it).
    const std::string upper = PrefixSuccessor(prefix);
    const rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handle(f)));
    for (it->Seek(ToSlice(prefix)); it->Valid(); it->Next()) {
      const std::string_view key = ToView(it->key());
      if (!key.starts_with(prefix)) break;
      if (!fn(key, ToView(it->value()))) break;
    }
    return FromRocks(it->status(), dir_, std::string("scan of ") + FamilyName(f));
  } catch (const std::exception& e) {
    return FromException(dir_, "scan", e.what());
  }
}

Status RocksDbStore::Verify() {
  try {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    ro.fill_cache = false;
    RETURN_IF_ERROR(FromRocks(db_->VerifyChecksum(ro), dir_, "verifying SST checksums"));
    // VerifyChecksum covers SST files only; reading every checkpoint value
    // checks the blob records' CRCs too (and the memtables' contents).
    for (int i = 0; i < kNumFamilies; ++i) {
      RETURN_IF_ERROR(ReadWholeFamily(*db_, handles_[i], dir_).status());
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    return FromException(dir_, "verify", e.what());
  }
}

Result<uint64_t> RocksDbStore::ApproximateCount(Family f) {
  try {
    uint64_t n = 0;
    if (!db_->GetIntProperty(handle(f), rocksdb::DB::Properties::kEstimateNumKeys, &n)) {
      return Status::Internal("data directory " + dir_ +
                              ": rocksdb.estimate-num-keys unavailable for " + FamilyName(f));
    }
    return n;
  } catch (const std::exception& e) {
    return FromException(dir_, "approximate count", e.what());
  }
}

}  // namespace ztune::storage
