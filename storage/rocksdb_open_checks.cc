#include "storage/rocksdb_open_checks.h"

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <utility>

#include "storage/keys.h"

namespace ztune::storage::internal {
namespace {

namespace fs = std::filesystem;

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

// Parses the decimal schema value; nullopt unless it is a positive integer.
std::optional<int> ParseSchema(std::string_view v) {
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n <= 0) return std::nullopt;
  return n;
}

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

}  // namespace

std::string SalvageHint(const std::string& dir) {
  return " Nothing was changed: a normal open refuses damaged files rather than serve less. "
         "`ztune-head --data-dir " +
         dir +
         " --salvage` keeps what is readable (it copies the damaged directory aside first); "
         "see docs/storage.md, \"Damage\"";
}

std::string ReadSalvageHint(const std::string& dir) {
  return " A file of the store is damaged; with the head stopped, `ztune-head --data-dir " + dir +
         " --salvage` keeps what is readable (it copies the damaged directory aside first); see "
         "docs/storage.md, \"Damage\"";
}

Status AppendToCorruption(Status s, const std::string& text) {
  if (s.code() != StatusCode::kCorruption) return s;
  std::string message = s.message();
  if (!message.empty() && message.back() != '.') message += ".";
  return Status::Corruption(message + text);
}

Status WithSalvageHint(Status s, const std::string& dir, const InfoLog* log) {
  if (s.code() != StatusCode::kCorruption) return s;
  return AppendToCorruption(std::move(s), (log ? RocksDbSaid(*log) : "") + SalvageHint(dir));
}

Status WithGap(Status s, const WalWatcher& watcher) {
  if (s.code() != StatusCode::kCorruption || watcher.gap().empty()) return s;
  return Status::Corruption(s.message() + " (" + watcher.gap() + ")");
}

Result<DirState> InspectDir(const std::string& dir, bool read_only,
                            const std::vector<std::string>& companion_files) {
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
    bool only_companions = !read_only;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (std::find(companion_files.begin(), companion_files.end(), name) ==
          companion_files.end()) {
        only_companions = false;
        break;
      }
    }
    if (only_companions && !ec) return DirState::kFresh;
    return Status::FailedPrecondition(dir +
                                      " is not a ztune data directory (no RocksDB store found); "
                                      "refusing to touch it");
  }
  return DirState::kExistingStore;
}

Status InUse(const std::string& dir, long pid) {
  return Status::Unavailable("data directory " + dir +
                             " is in use by another process (or another store object in this "
                             "one): process " +
                             std::to_string(pid) + " holds its LOCK file");
}

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

Result<Inspection> Inspect(const std::string& dir, const std::vector<std::string>& families,
                           bool replay_wal, std::unique_ptr<RawDb>* keep,
                           std::shared_ptr<InfoLog>* log_out) {
  Inspection found;
  found.families = families;
  CountFiles(dir, &found);
  rocksdb::DBOptions options = MakeDbOptions(WalRecovery::kStrict);
  const std::shared_ptr<InfoLog> log = InfoLog::InMemory();
  options.info_log = log;
  WalWatcher watcher(replay_wal ? WalWatcher::Mode::kFailAtGap
                                          : WalWatcher::Mode::kStopAtFirstRecord);
  options.wal_filter = &watcher;
  if (log_out != nullptr) *log_out = log;
  Result<std::unique_ptr<RawDb>> opened =
      RawDb::Open(dir, options, Descriptors(families), /*read_only=*/true);
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
      for (const std::string& name : FamiliesOfSchema(kSchemaVersion)) {
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
  for (const std::string& name : FamiliesOfSchema(*schema)) {
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
  // An older schema is accepted as it is: the store keeps its schema record
  // and the head migrates the records it changed when it loads them
  // (TrialRunner::Load, schema 1 -> 2), writing the new schema value with the
  // migrated records in one commit.
  return schema;
}

Status LostFamilies(const std::string& dir, const std::vector<std::string>& lost) {
  const bool one = lost.size() == 1;
  return Status::Corruption("data directory " + dir + ": column " +
                            (one ? "family " : "families ") + Join(lost) + (one ? " is" : " are") +
                            " missing although the store's OPTIONS file lists them; the "
                            "MANIFEST may be damaged; see ztune-head --salvage." +
                            SalvageHint(dir));
}

Result<Families> ListStoreFamilies(const std::string& dir) {
  Families found;
  Result<std::vector<std::string>> names = ListFamilyNames(dir);
  if (!names.ok()) return WithSalvageHint(names.status(), dir, nullptr);
  found.names = std::move(names).value();
  const std::vector<std::string> ours = FamiliesOfSchema(kSchemaVersion);
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

}  // namespace ztune::storage::internal
