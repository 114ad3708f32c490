// RocksDbStore: opening (with the damage checks of docs/storage.md), commits
// behind the free-space reserve, reads and verification. Salvage lives in
// rocksdb_salvage.cc.
#include "storage/rocksdb_store.h"

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <utility>

#include "storage/keys.h"
#include "storage/rocksdb_internal.h"

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;
using internal::FromException;
using internal::FromRocks;
using internal::InfoLog;
using internal::RawDb;
using internal::ToSlice;
using internal::ToView;
using internal::WalRecovery;

const Clock& ClockOf(const RocksDbStoreOptions& options) {
  static const SteadyClock steady;
  return options.clock != nullptr ? *options.clock : steady;
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

std::string SalvageHint(const std::string& dir) {
  return " Nothing was changed: a normal open refuses damaged files rather than serve less. "
         "`ztune-head --data-dir " +
         dir +
         " --salvage` keeps what is readable (it copies the damaged directory aside first); "
         "see docs/storage.md, \"Damage\"";
}

// A Corruption from opening or reading `dir` gains RocksDB's own account of
// the damage (which WAL, how many bytes) and the way out.
Status WithSalvageHint(Status s, const std::string& dir, const InfoLog* log) {
  if (s.code() != StatusCode::kCorruption) return s;
  std::string message = s.message();
  if (!message.empty() && message.back() != '.') message += ".";
  return Status::Corruption(message + (log ? internal::RocksDbSaid(*log) : "") + SalvageHint(dir));
}

// A Corruption the WalWatcher caused says what the watcher saw.
Status WithGap(Status s, const internal::WalWatcher& watcher) {
  if (s.code() != StatusCode::kCorruption || watcher.gap().empty()) return s;
  return Status::Corruption(s.message() + " (" + watcher.gap() + ")");
}

// What Open found in the directory before touching it.
enum class DirState { kFresh, kExistingStore };

Result<DirState> InspectDir(const std::string& dir, bool read_only) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::IOError("data directory " + dir + ": cannot stat: " + ec.message());
  }
  if (!fs::exists(st)) {
    if (read_only) {
      return Status::FailedPrecondition("data directory " + dir +
                                        " does not exist; there is no store to open read-only");
    }
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
  if (empty) {
    if (read_only) {
      return Status::FailedPrecondition("data directory " + dir +
                                        " is empty; there is no store to open read-only");
    }
    return DirState::kFresh;
  }
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

Status InUse(const std::string& dir, long pid) {
  return Status::Unavailable("data directory " + dir +
                             " is in use by another process (or another store object in this "
                             "one): process " +
                             std::to_string(pid) + " holds its LOCK file");
}

// What a read-only look at an existing store found.
struct Inspection {
  std::vector<std::string> families;         // on disk
  std::optional<std::string> schema;         // the raw meta/schema value
  bool any_data = false;                     // some family holds a key
  std::vector<std::string> ztune_meta_keys;  // meta keys only a ztune head writes
  // Table files on disk that the MANIFEST does not name. A crash leaves
  // some (a flush or compaction output not yet installed, an obsolete input
  // not yet deleted); a MANIFEST that lost records leaves others, and a
  // read-write open deletes them all.
  std::vector<std::string> orphan_tables;
  // Files in the directory: a store whose creation was interrupted has no
  // table or blob file and only empty WAL files.
  uint64_t table_files = 0;
  uint64_t blob_files = 0;
  uint64_t wal_bytes = 0;
};

void CountFiles(const std::string& dir, Inspection* found) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path ext = it->path().extension();
    std::error_code size_ec;
    if (ext == ".sst") ++found->table_files;
    if (ext == ".blob") ++found->blob_files;
    if (ext == ".log") found->wal_bytes += it->file_size(size_ec);
  }
}

// Reads the schema record, the meta keys only ztune writes, and whether any
// family holds a key, from an open database.
Status Look(RawDb& db, const std::string& dir, const InfoLog* log, Inspection* found) {
  rocksdb::ColumnFamilyHandle* meta = db.Find(FamilyName(Family::kMeta));
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::string value;
  const rocksdb::Status got = db.db().Get(ro, meta, ToSlice(kMetaSchema), &value);
  found->schema.reset();
  if (got.ok()) {
    found->schema = value;
  } else if (!got.IsNotFound()) {
    return WithSalvageHint(FromRocks(got, dir, "reading the schema version"), dir, log);
  }
  found->ztune_meta_keys.clear();
  for (const char* key : {kMetaHeadEpoch, kMetaNextExperiment}) {
    if (db.db().Get(ro, meta, ToSlice(key), &value).ok()) found->ztune_meta_keys.emplace_back(key);
  }
  std::vector<rocksdb::LiveFileMetaData> live;
  db.db().GetLiveFilesMetaData(&live);
  std::set<std::string> live_names;
  for (const rocksdb::LiveFileMetaData& f : live) live_names.insert(f.relative_filename);
  found->orphan_tables.clear();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->path().extension() == ".sst" && !live_names.count(name)) {
      found->orphan_tables.push_back(name);
    }
  }
  found->any_data = false;
  for (rocksdb::ColumnFamilyHandle* h : db.handles()) {
    std::unique_ptr<rocksdb::Iterator> it(db.db().NewIterator(ro, h));
    it->SeekToFirst();
    if (it->Valid()) found->any_data = true;
    RETURN_IF_ERROR(
        WithSalvageHint(FromRocks(it->status(), dir, "reading family " + h->GetName()), dir, log));
  }
  return Status::Ok();
}

// Opens `dir` read-only with the strict options (nothing on disk changes:
// RocksDB deletes files no MANIFEST names only in a read-write open, and that
// is exactly the evidence salvage needs) and reads the schema record. With
// `replay_wal` false the WAL is not replayed (a WalFilter stops at its first
// record), so this sees what the SST files hold, at the cost of opening the
// table files. `keep`, if given, receives the open database.
Result<Inspection> Inspect(const std::string& dir, const std::vector<std::string>& families,
                           bool replay_wal, std::unique_ptr<RawDb>* keep,
                           std::shared_ptr<InfoLog>* log_out) {
  Inspection found;
  found.families = families;
  CountFiles(dir, &found);
  rocksdb::DBOptions options = internal::MakeDbOptions(WalRecovery::kStrict);
  const std::shared_ptr<InfoLog> log = InfoLog::InMemory();
  options.info_log = log;
  internal::WalWatcher watcher(replay_wal ? internal::WalWatcher::Mode::kFailAtGap
                                          : internal::WalWatcher::Mode::kStopAtFirstRecord);
  options.wal_filter = &watcher;
  if (log_out != nullptr) *log_out = log;
  Result<std::unique_ptr<RawDb>> opened =
      RawDb::Open(dir, options, internal::Descriptors(families), /*read_only=*/true);
  if (!opened.ok()) {
    Status s = opened.status();
    if (s.code() == StatusCode::kInvalidArgument) {
      // E.g. a family written by a newer ztune with options we do not know.
      return Status::FailedPrecondition(s.message() + " (was the store written by a newer ztune?)");
    }
    return WithSalvageHint(WithGap(std::move(s), watcher), dir, log.get());
  }
  RETURN_IF_ERROR(Look(**opened, dir, log.get(), &found));
  if (keep != nullptr) *keep = std::move(opened).value();
  return found;
}

// The verdict on an inspected store: the schema version, or nullopt for a
// store whose initialization was interrupted (no schema, no data) and is to
// be finished. Errors as documented on Open.
Result<std::optional<int>> Judge(const std::string& dir, const Inspection& found) {
  if (!found.schema) {
    if (!found.ztune_meta_keys.empty()) {
      return Status::Corruption(
          "data directory " + dir +
          ": the schema record is missing although the meta family holds ztune records (" +
          Join(found.ztune_meta_keys) +
          "); the MANIFEST may be damaged; see ztune-head --salvage." + SalvageHint(dir));
    }
    if (found.any_data) {
      return Status::FailedPrecondition(
          dir +
          " is not a ztune data directory (RocksDB store without a schema key); refusing to "
          "touch it");
    }
    if (found.table_files > 0 || found.blob_files > 0 || found.wal_bytes > 0) {
      // Not an interrupted creation (that leaves no data at all): the records
      // are there but RocksDB does not show them.
      std::vector<std::string> missing;
      for (const std::string& name : internal::FamiliesOfSchema(kSchemaVersion)) {
        if (std::find(found.families.begin(), found.families.end(), name) == found.families.end()) {
          missing.push_back(name);
        }
      }
      return Status::Corruption(
          "data directory " + dir + ": the schema record is missing and the store shows no " +
          "records, but the directory holds " + std::to_string(found.table_files) +
          " table files, " + std::to_string(found.blob_files) + " blob files and " +
          std::to_string(found.wal_bytes) + " bytes of WAL" +
          (missing.empty() ? std::string()
                           : " (column families " + Join(missing) + " are missing too)") +
          "; the MANIFEST may be damaged; see ztune-head --salvage." + SalvageHint(dir));
    }
    return std::optional<int>();
  }
  const std::optional<int> schema = ParseSchema(*found.schema);
  if (!schema) {
    return Status::Corruption("data directory " + dir + " is corrupt: schema version '" +
                              *found.schema + "' is not a positive integer");
  }
  if (*schema > kSchemaVersion) {
    return Status::FailedPrecondition("data directory " + dir + ": store schema " +
                                      std::to_string(*schema) +
                                      " is newer than this ztune (supports " +
                                      std::to_string(kSchemaVersion) + "); upgrade ztune");
  }
  // A family the store's schema has is never created at open: RocksDB loses
  // families (and the files of the families it keeps) when the MANIFEST is
  // damaged, and an empty new family would serve less instead of failing.
  std::vector<std::string> missing;
  for (const std::string& name : internal::FamiliesOfSchema(*schema)) {
    if (std::find(found.families.begin(), found.families.end(), name) == found.families.end()) {
      missing.push_back(name);
    }
  }
  if (!missing.empty()) {
    const bool one = missing.size() == 1;
    return Status::Corruption(
        "data directory " + dir + ": column " + (one ? "family " : "families ") + Join(missing) +
        (one ? " is" : " are") +
        " missing although the schema record says they exist; the MANIFEST may be damaged; "
        "see ztune-head --salvage." +
        SalvageHint(dir));
  }
  // Only schema 1 exists; an older schema would be migrated after the
  // read-write open.
  return schema;
}

// The column families the newest OPTIONS file of `dir` names. RocksDB
// rewrites it at every open and after every family is created or dropped, so
// it is a second record of the families, independent of the MANIFEST.
std::vector<std::string> OptionsFileFamilies(const std::string& dir) {
  std::string newest;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // Zero-padded numbers: name order is file number order.
    if (name.rfind("OPTIONS-", 0) == 0 && name.find(".dbtmp") == std::string::npos &&
        name > newest) {
      newest = name;
    }
  }
  std::vector<std::string> families;
  if (newest.empty()) return families;
  std::ifstream in(fs::path(dir) / newest);
  std::string line;
  const std::string tag = "[CFOptions \"";
  while (std::getline(in, line)) {
    if (line.rfind(tag, 0) != 0) continue;
    const size_t close = line.find('"', tag.size());
    if (close != std::string::npos) families.push_back(line.substr(tag.size(), close - tag.size()));
  }
  return families;
}

struct Families {
  std::vector<std::string> names;  // in the MANIFEST
  // Ours that the OPTIONS file names and the MANIFEST does not: the MANIFEST
  // lost them (a creation interrupted before the OPTIONS file was written
  // leaves the OPTIONS file behind the MANIFEST, never ahead).
  std::vector<std::string> lost;
};

Status LostFamilies(const std::string& dir, const std::vector<std::string>& lost) {
  const bool one = lost.size() == 1;
  return Status::Corruption("data directory " + dir + ": column " +
                            (one ? "family " : "families ") + Join(lost) + (one ? " is" : " are") +
                            " missing although the store's OPTIONS file lists them; the "
                            "MANIFEST may be damaged; see ztune-head --salvage." +
                            SalvageHint(dir));
}

Result<Families> ListFamilies(const std::string& dir) {
  Families found;
  RETURN_IF_ERROR(WithSalvageHint(
      FromRocks(rocksdb::DB::ListColumnFamilies(internal::MakeDbOptions(WalRecovery::kStrict), dir,
                                                &found.names),
                dir, "listing column families"),
      dir, nullptr));
  const std::vector<std::string> ours = internal::FamiliesOfSchema(kSchemaVersion);
  for (const std::string& name : OptionsFileFamilies(dir)) {
    if (std::find(ours.begin(), ours.end(), name) != ours.end() &&
        std::find(found.names.begin(), found.names.end(), name) == found.names.end()) {
      found.lost.push_back(name);
    }
  }
  if (std::find(found.names.begin(), found.names.end(), FamilyName(Family::kMeta)) ==
      found.names.end()) {
    if (!found.lost.empty()) return LostFamilies(dir, found.lost);
    return Status::FailedPrecondition(
        dir +
        " is not a ztune data directory (a RocksDB store without a \"meta\" column "
        "family); refusing to touch it");
  }
  return found;
}

Status ResourceMessageForOpen(const std::string& dir, const FreeSpaceGuard& space,
                              const Status& s) {
  if (s.code() != StatusCode::kResourceExhausted) return s;
  return Status::ResourceExhausted(
      "data directory " + dir + ": only " + HumanBytes(space.last_free()) +
      " free on its file system, less than the " + HumanBytes(space.min_free_bytes()) +
      " the store keeps free (min_free_bytes) so that RocksDB never runs out of space; opening "
      "it for writing would let RocksDB write into a full disk (WAL replay, flush, MANIFEST). "
      "Free disk space; `ztune-head --check --data-dir " +
      dir + "` opens the store read-only and works meanwhile");
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
    ASSIGN_OR_RETURN(const DirState state, InspectDir(dir, read_only));
    const bool fresh = state == DirState::kFresh;
    if (!read_only) {
      FreeSpaceGuard space(dir, options.min_free_bytes, options.free_space_recheck_ms,
                           options.free_space_recheck_bytes, options.free_space_probe,
                           ClockOf(options));
      RETURN_IF_ERROR(ResourceMessageForOpen(dir, space, space.CheckNow()));
    }

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
      if (const std::optional<long> holder = internal::LockHolder(dir)) return InUse(dir, *holder);
      ASSIGN_OR_RETURN(const Families families, ListFamilies(dir));
      const std::vector<std::string>& names = families.names;
      // Every check runs on a read-only open before the read-write one,
      // which would delete table files a damaged MANIFEST no longer names.
      // Usually the schema is in an SST file and the WAL need not be
      // replayed twice; a young store has it in the WAL only.
      std::unique_ptr<RawDb> inspected;
      std::shared_ptr<InfoLog> inspect_log;
      ASSIGN_OR_RETURN(Inspection found, Inspect(dir, names, /*replay_wal=*/read_only,
                                                 read_only ? &inspected : nullptr, &inspect_log));
      if (!read_only && (!found.schema || !found.orphan_tables.empty())) {
        ASSIGN_OR_RETURN(found, Inspect(dir, names, /*replay_wal=*/true, &inspected, &inspect_log));
      }
      ASSIGN_OR_RETURN(const std::optional<int> schema, Judge(dir, found));
      // Judge names missing families when the schema record is there; when
      // it is not, the OPTIONS file may still know better than the MANIFEST.
      if (!families.lost.empty()) return LostFamilies(dir, families.lost);
      if (!found.orphan_tables.empty()) {
        RETURN_IF_ERROR(WithSalvageHint(
            internal::CheckOrphanTables(*inspected, dir, dir, found.orphan_tables), dir, nullptr));
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
        internal::WalWatcher watcher(internal::WalWatcher::Mode::kFailAtGap);
        db_options.wal_filter = &watcher;
        Result<std::unique_ptr<RawDb>> opened =
            RawDb::Open(dir, db_options, internal::Descriptors(names), /*read_only=*/false);
        if (!opened.ok()) {
          return WithSalvageHint(WithGap(opened.status(), watcher), dir, log.get());
        }
        db = std::move(opened).value();
        if (schema) {
          // The inspection may have read the schema from the SST files only;
          // the WAL can hold a newer value (a later migration or a newer
          // ztune's). Judge what the store says now.
          RETURN_IF_ERROR(Look(*db, dir, log.get(), &found));
          ASSIGN_OR_RETURN(const std::optional<int> now, Judge(dir, found));
          if (!now) {
            return Status::Corruption("data directory " + dir +
                                      ": the schema record disappeared in WAL replay." +
                                      SalvageHint(dir));
          }
        }
      }
    }

    // From here on the store object owns the database, so every early return
    // closes it cleanly.
    std::unique_ptr<RocksDbStore> store(
        new RocksDbStore(dir, std::move(db), std::move(log), read_only, options));
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

Result<std::optional<std::string>> RocksDbStore::Get(Family f, std::string_view key) {
  try {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    rocksdb::PinnableSlice value;
    const rocksdb::Status s = db_->db().Get(ro, handle(f), ToSlice(key), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    RETURN_IF_ERROR(FromRocks(s, dir_, std::string("get from ") + FamilyName(f)));
    return std::optional<std::string>(value.ToString());
  } catch (const std::exception& e) {
    return FromException(dir_, "get", e.what());
  }
}

namespace {

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

}  // namespace

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
    std::unique_ptr<rocksdb::Iterator> it(db_->db().NewIterator(ro, handle(f)));
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
