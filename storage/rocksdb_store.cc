// RocksDbStore: opening (the sequence of checks and opens; the checks
// themselves are in rocksdb_open_checks.cc), commits behind the free-space
// reserve, reads and verification. Salvage lives in rocksdb_salvage.cc.
#include "storage/rocksdb_store.h"

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <exception>
#include <memory>
#include <utility>

#include "storage/keys.h"
#include "storage/rocksdb_internal.h"
#include "storage/rocksdb_open_checks.h"

namespace ztune::storage {
namespace {

using internal::DirState;
using internal::Families;
using internal::FromException;
using internal::FromRocks;
using internal::InfoLog;
using internal::Inspection;
using internal::RawDb;
using internal::ToSlice;
using internal::ToView;
using internal::WalRecovery;
using internal::WithGap;
using internal::WithSalvageHint;

const Clock& ClockOf(const RocksDbStoreOptions& options) {
  static const SteadyClock steady;
  return options.clock != nullptr ? *options.clock : steady;
}

}  // namespace

RocksDbStore::RocksDbStore(std::string dir, std::unique_ptr<internal::RawDb> db,
                           std::shared_ptr<internal::InfoLog> log, bool read_only,
                           const RocksDbStoreOptions& options)
    : dir_(std::move(dir)),
      options_(options),
      db_(std::move(db)),
      log_(std::move(log)),
      read_only_(read_only),
      space_(dir_, read_only ? 0 : options.min_free_bytes, options.free_space_recheck_ms,
             options.free_space_recheck_bytes, options.free_space_probe, ClockOf(options)) {}

RocksDbStore::~RocksDbStore() {
  try {
    uint64_t memtables = 0;
    if (!read_only_ && options_.flush_on_close && !resume_needed_ &&
        db_->db().GetAggregatedIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables,
                                           &memtables) &&
        space_.CheckNow().ok() && space_.Reserve(memtables).ok()) {
      // After a clean stop the WAL then holds nothing the SST files do not:
      // a WAL damaged at rest loses nothing, and the next open replays
      // nothing. A failure loses nothing either (the WAL is synced), but
      // running RocksDB into a full disk is what the reserve is for, so the
      // flush needs the memtables' size on top of it.
      rocksdb::FlushOptions fo;
      fo.wait = true;
      fo.allow_write_stall = true;
      std::vector<rocksdb::ColumnFamilyHandle*> ours(handles_.begin(), handles_.end());
      db_->db().Flush(fo, ours).PermitUncheckedError();
    }
    // Close() reports background errors; every commit is already durable in
    // the synced WAL, so there is nothing left to lose here.
    db_->Close().PermitUncheckedError();
  } catch (const std::exception&) {
    // Destructors must not throw; RocksDB does not throw here in practice.
  }
}

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const std::string& dir,
                                                         const RocksDbStoreOptions& options) {
  return OpenImpl(dir, options, /*read_only=*/false);
}

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::OpenReadOnly(const std::string& dir) {
  return OpenImpl(dir, RocksDbStoreOptions(), /*read_only=*/true);
}

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::OpenImpl(const std::string& dir,
                                                             const RocksDbStoreOptions& options,
                                                             bool read_only) {
  try {
    ASSIGN_OR_RETURN(const DirState state,
                     internal::InspectDir(dir, read_only, options.companion_files));
    const bool fresh = state == DirState::kFresh;
    if (!read_only) {
      FreeSpaceGuard space(dir, options.min_free_bytes, options.free_space_recheck_ms,
                           options.free_space_recheck_bytes, options.free_space_probe,
                           ClockOf(options));
      RETURN_IF_ERROR(internal::ResourceMessageForOpen(dir, space, space.CheckNow()));
    }

    // RocksDB keeps the read-write open's WAL filter in its options and reads
    // it again whenever it writes an OPTIONS file (SetOptions, as
    // ResumeCompactions calls it): the watcher outlives the database, and is
    // declared first so that an early return destroys it after `db`.
    std::unique_ptr<internal::WalWatcher> watcher;
    std::unique_ptr<RawDb> db;
    std::shared_ptr<InfoLog> log;
    bool write_schema = fresh;
    if (fresh) {
      rocksdb::DBOptions db_options = internal::MakeDbOptions(WalRecovery::kStrict);
      db_options.create_if_missing = true;
      db_options.error_if_exists = true;
      db_options.create_missing_column_families = true;
      log = InfoLog::ToFile(dir);
      db_options.info_log = log;
      std::vector<std::string> names{internal::DefaultFamilyName()};
      for (const std::string& f : internal::FamiliesOfSchema(kSchemaVersion)) names.push_back(f);
      ASSIGN_OR_RETURN(db, RawDb::Open(dir, db_options, internal::Descriptors(names),
                                       /*read_only=*/false));
    } else {
      // The LOCK is checked first because the inspection below opens
      // read-only, which RocksDB does not lock.
      if (const std::optional<long> holder = internal::LockHolder(dir)) {
        return internal::InUse(dir, *holder);
      }
      ASSIGN_OR_RETURN(const Families families, internal::ListStoreFamilies(dir));
      const std::vector<std::string>& names = families.names;
      // Every check runs on a read-only open before the read-write one,
      // which would delete table files a damaged MANIFEST no longer names.
      // Usually the schema is in an SST file and the WAL need not be
      // replayed twice; a young store has it in the WAL only.
      std::unique_ptr<RawDb> inspected;
      std::shared_ptr<InfoLog> inspect_log;
      ASSIGN_OR_RETURN(Inspection found, internal::Inspect(dir, names, /*replay_wal=*/read_only,
                                                 read_only ? &inspected : nullptr, &inspect_log));
      // A crash during a flush or compaction leaves its output torn, named by
      // no MANIFEST (the read-write open deletes it). Only a complete orphan
      // needs CheckOrphanTables, whose inspection must replay the WAL too: a
      // head killed under load replayed up to max_total_wal_size twice to
      // look at a file that opens as no table.
      const std::vector<std::string> orphans = internal::CompleteTables(dir, found.orphan_tables);
      if (!read_only && (!found.schema || !orphans.empty())) {
        ASSIGN_OR_RETURN(found, internal::Inspect(dir, names, /*replay_wal=*/true, &inspected,
                                                  &inspect_log));
      }
      ASSIGN_OR_RETURN(const std::optional<int> schema, internal::Judge(dir, found));
      // Judge names missing families when the schema record is there; when
      // it is not, the OPTIONS file may still know better than the MANIFEST.
      if (!families.lost.empty()) return internal::LostFamilies(dir, families.lost);
      if (!orphans.empty()) {
        RETURN_IF_ERROR(WithSalvageHint(internal::CheckOrphanTables(*inspected, dir, dir, orphans),
                                        dir, nullptr));
      }
      if (read_only) {
        if (!schema) {
          return Status::FailedPrecondition(
              "data directory " + dir +
              ": the store's creation was interrupted (no schema record, no data); a normal "
              "open finishes it");
        }
        db = std::move(inspected);
        log = std::move(inspect_log);
      } else {
        inspected.reset();  // before the read-write open changes the files
        write_schema = !schema.has_value();
        rocksdb::DBOptions db_options = internal::MakeDbOptions(WalRecovery::kStrict);
        log = InfoLog::ToFile(dir);
        db_options.info_log = log;
        watcher = std::make_unique<internal::WalWatcher>(internal::WalWatcher::Mode::kFailAtGap);
        db_options.wal_filter = watcher.get();
        std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = internal::Descriptors(names);
        for (rocksdb::ColumnFamilyDescriptor& d : descriptors) {
          d.options.disable_auto_compactions = options.defer_compactions;
        }
        Result<std::unique_ptr<RawDb>> opened =
            RawDb::Open(dir, db_options, descriptors, /*read_only=*/false);
        if (!opened.ok()) {
          return WithSalvageHint(WithGap(opened.status(), *watcher), dir, log.get());
        }
        db = std::move(opened).value();
        if (schema) {
          // The inspection may have read the schema from the SST files only;
          // the WAL can hold a newer value (a later migration or a newer
          // ztune's). Judge what the store says now.
          RETURN_IF_ERROR(internal::Look(*db, dir, log.get(), &found));
          ASSIGN_OR_RETURN(const std::optional<int> now, internal::Judge(dir, found));
          if (!now) {
            return Status::Corruption("data directory " + dir +
                                      ": the schema record disappeared in WAL replay." +
                                      internal::SalvageHint(dir));
          }
        }
      }
    }

    // From here on the store object owns the database, so every early return
    // closes it cleanly.
    std::unique_ptr<RocksDbStore> store(
        new RocksDbStore(dir, std::move(db), std::move(log), read_only, options));
    store->wal_watcher_ = std::move(watcher);
    for (int i = 0; i < kNumFamilies; ++i) {
      const auto f = static_cast<Family>(i);
      rocksdb::ColumnFamilyHandle* h = store->db_->Find(FamilyName(f));
      if (h == nullptr) {
        // Only a store without a schema record gets here (a fresh one, or
        // one whose creation was interrupted): Judge refuses a missing
        // family in a store whose schema says it exists.
        if (!write_schema) {
          return Status::Internal("data directory " + dir + ": column family " + FamilyName(f) +
                                  " missing after the checks");
        }
        RETURN_IF_ERROR(
            store->db_->CreateFamily(dir, FamilyName(f), internal::MakeFamilyOptions(f)));
        h = store->db_->Find(FamilyName(f));
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
        if (f == Family::kTrials && !options.read_trials_at_open) continue;
        RETURN_IF_ERROR(WithSalvageHint(
            internal::ReadWholeFamily(store->db_->db(), store->handle(f), dir).status(), dir,
            nullptr));
      }
    }
    return store;
  } catch (const std::exception& e) {
    return FromException(dir, "open", e.what());
  }
}

Status RocksDbStore::ResumeCompactions() {
  if (read_only_ || !options_.defer_compactions || compactions_resumed_) return Status::Ok();
  try {
    RETURN_IF_ERROR(
        FromRocks(db_->db().EnableAutoCompaction(db_->handles()), dir_, "resuming compactions"));
    compactions_resumed_ = true;
    return Status::Ok();
  } catch (const std::exception& e) {
    return FromException(dir_, "resuming compactions", e.what());
  }
}

Status RocksDbStore::Commit(const WriteBatch& batch) {
  if (read_only_) {
    return Status::FailedPrecondition("data directory " + dir_ +
                                      " is open read-only; it takes no commits");
  }
  if (batch.empty()) return Status::Ok();
  try {
    // What the WAL record will take, roughly: the bytes plus per-op framing.
    const uint64_t bytes = batch.bytes() + 32 * batch.size();
    RETURN_IF_ERROR(space_.Reserve(bytes));
    if (resume_needed_) {
      // RocksDB stopped writes after running out of space, and there is room
      // again. Its SstFileManager (RocksDB 7.8 always has one) resumes on its
      // own, re-checking every 5 s; until it has, a manual Resume is "Busy".
      const rocksdb::Status resumed = db_->db().Resume();
      if (resumed.IsBusy()) {
        return Status::ResourceExhausted(
            "data directory " + dir_ +
            ": RocksDB stopped writes after running out of space and is resuming on its own "
            "(it re-checks free space every 5 s); nothing was written, retry later");
      }
      RETURN_IF_ERROR(FromRocks(resumed, dir_, "resuming after running out of space"));
      resume_needed_ = false;
    }
    rocksdb::WriteBatch wb(/*reserved_bytes=*/batch.bytes() + 32 * batch.size());
    for (const WriteBatch::Op& op : batch.ops()) {
      rocksdb::ColumnFamilyHandle* cf = handle(op.family);
      const rocksdb::Status s = op.is_delete ? wb.Delete(cf, ToSlice(op.key))
                                             : wb.Put(cf, ToSlice(op.key), ToSlice(op.value));
      if (!s.ok()) return FromRocks(s, dir_, "building write batch");
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    Status written = FromRocks(db_->db().Write(wo, &wb), dir_, "commit");
    if (written.code() == StatusCode::kResourceExhausted) resume_needed_ = true;
    if (written.ok()) space_.Wrote(bytes);
    return written;
  } catch (const std::exception& e) {
    return FromException(dir_, "commit", e.what());
  }
}

Status RocksDbStore::ReadError(const rocksdb::Status& s, const std::string& what) const {
  // A damaged block found by a read names the way out, as the open does.
  return internal::AppendToCorruption(FromRocks(s, dir_, what), internal::ReadSalvageHint(dir_));
}

Result<std::optional<std::string>> RocksDbStore::Get(Family f, std::string_view key) {
  try {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    // Straight into the string: a value read through a PinnableSlice and
    // ToString() is copied twice, which for a checkpoint is megabytes.
    std::string value;
    const rocksdb::Status s = db_->db().Get(ro, handle(f), ToSlice(key), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    RETURN_IF_ERROR(ReadError(s, std::string("get from ") + FamilyName(f)));
    return std::optional<std::string>(std::move(value));
  } catch (const std::exception& e) {
    return FromException(dir_, "get", e.what());
  }
}

namespace {

// A checksum-verifying iterator bounded above by the end of `prefix`'s keys:
// RocksDB stops at the end of the prefix instead of reading into the next
// trial's keys (and skips tombstones past it). The bound lives as long as the
// iterator that points at it.
struct PrefixIterator {
  PrefixIterator(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* family, std::string_view prefix)
      : upper(PrefixSuccessor(prefix)), upper_slice(upper) {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    it.reset(db.NewIterator(ro, family));
  }
  const std::string upper;
  const rocksdb::Slice upper_slice;
  std::unique_ptr<rocksdb::Iterator> it;
};

}  // namespace

Status RocksDbStore::Scan(Family f, std::string_view prefix,
                          const std::function<bool(std::string_view, std::string_view)>& fn) {
  try {
    PrefixIterator p(db_->db(), handle(f), prefix);
    rocksdb::Iterator* it = p.it.get();
    for (it->Seek(ToSlice(prefix)); it->Valid(); it->Next()) {
      const std::string_view key = ToView(it->key());
      if (!key.starts_with(prefix)) break;
      if (!fn(key, ToView(it->value()))) break;
    }
    return ReadError(it->status(), std::string("scan of ") + FamilyName(f));
  } catch (const std::exception& e) {
    return FromException(dir_, "scan", e.what());
  }
}

Result<std::optional<Store::Entry>> RocksDbStore::Last(Family f, std::string_view prefix) {
  try {
    PrefixIterator p(db_->db(), handle(f), prefix);
    rocksdb::Iterator* it = p.it.get();
    // With the upper bound set, SeekToLast lands on the last key below it.
    it->SeekToLast();
    std::optional<Entry> last;
    if (it->Valid() && ToView(it->key()).starts_with(prefix)) {
      last.emplace(Entry{it->key().ToString(), it->value().ToString()});
    }
    RETURN_IF_ERROR(ReadError(it->status(), std::string("seek in ") + FamilyName(f)));
    return last;
  } catch (const std::exception& e) {
    return FromException(dir_, "seek", e.what());
  }
}

Status RocksDbStore::Verify() {
  try {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    ro.fill_cache = false;
    RETURN_IF_ERROR(FromRocks(db_->db().VerifyChecksum(ro), dir_, "verifying SST checksums"));
    // VerifyChecksum covers SST files only; reading every checkpoint value
    // checks the blob records' CRCs too (and the memtables' contents).
    for (int i = 0; i < kNumFamilies; ++i) {
      RETURN_IF_ERROR(internal::ReadWholeFamily(db_->db(), handles_[i], dir_).status());
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    return FromException(dir_, "verify", e.what());
  }
}

Result<uint64_t> RocksDbStore::ApproximateCount(Family f) {
  try {
    uint64_t n = 0;
    if (!db_->db().GetIntProperty(handle(f), rocksdb::DB::Properties::kEstimateNumKeys, &n)) {
      return Status::Internal("data directory " + dir_ +
                              ": rocksdb.estimate-num-keys unavailable for " + FamilyName(f));
    }
    return n;
  } catch (const std::exception& e) {
    return FromException(dir_, "approximate count", e.what());
  }
}

}  // namespace ztune::storage

