// RocksDbStore::Salvage (`ztune-head --salvage`): copies a damaged data
// directory aside, makes the directory openable again keeping what is
// readable, and reports what was lost. The strategy and its reasons are in
// docs/storage.md, "Salvage":
//
//  - damage in the WAL or in a table file that RocksDB can open around:
//    point-in-time recovery (replay stops at the first damaged record, or at
//    a gap in the sequence numbers), so the store is a state the head really
//    had; skipping damaged records instead only when RocksDB refuses that
//    (a family was already flushed past the damage);
//  - a damaged MANIFEST (families or the schema record missing, MANIFEST
//    unreadable) or unreadable table files: RocksDB's RepairDB, which rebuilds
//    the MANIFEST from the table files, converts the WALs (skipping damaged
//    records) and moves unreadable files to lost/;
//  - checkpoints whose blob records are unreadable or no longer named (RepairDB
//    ignores blob files): the checkpoints family is rebuilt, taking the bytes
//    from the damaged copy's blob files where a record with a good CRC exists.
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <system_error>

#include "storage/blob_file_scan.h"
#include "storage/keys.h"
#include "storage/rocksdb_internal.h"
#include "storage/rocksdb_store.h"
#include "storage/wal_file_scan.h"

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;
using internal::FromRocks;
using internal::InfoLog;
using internal::RawDb;
using internal::ToSlice;
using internal::ToView;
using internal::WalRecovery;
using internal::WalWatcher;

// Where the checkpoints family is rebuilt before it replaces the original.
constexpr char kRebuildFamily[] = "ztune.salvage.checkpoints";
constexpr uint64_t kRebuildBatchBytes = 64 * internal::kMiB;

Status ErrnoStatus(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

// Copies a regular file and fsyncs the copy: the copy is the only untouched
// version of the damaged store once salvage starts changing the original.
Status CopyFile(const fs::path& from, const fs::path& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoStatus("salvage: cannot read", from.string());
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    const Status s = ErrnoStatus("salvage: cannot create", to.string());
    ::close(in);
    return s;
  }
  Status status;
  std::vector<char> buf(1 << 20);
  while (status.ok()) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      status = ErrnoStatus("salvage: cannot read", from.string());
      break;
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        status = ErrnoStatus("salvage: cannot write", to.string());
        break;
      }
      done += w;
    }
  }
  if (status.ok() && ::fsync(out) != 0) status = ErrnoStatus("salvage: cannot fsync", to.string());
  ::close(in);
  if (::close(out) != 0 && status.ok()) status = ErrnoStatus("salvage: cannot close", to.string());
  return status;
}

Status SyncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("salvage: cannot open directory", dir.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoStatus("salvage: cannot fsync directory", dir.string());
  return Status::Ok();
}

Status CopyTree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::create_directory(to, ec) || ec) {
    return Status::IOError("salvage: cannot create " + to.string() + ": " +
                           (ec ? ec.message() : "it exists"));
  }
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path target = to / it->path().filename();
    if (it->is_directory(ec)) {
      RETURN_IF_ERROR(CopyTree(it->path(), target));
    } else if (it->is_regular_file(ec)) {
      RETURN_IF_ERROR(CopyFile(it->path(), target));
    }
  }
  if (ec) return Status::IOError("salvage: cannot list " + from.string() + ": " + ec.message());
  RETURN_IF_ERROR(SyncDir(to));
  return SyncDir(to.parent_path().empty() ? fs::path(".") : to.parent_path());
}

uint64_t TreeBytes(const fs::path& dir, const std::string& only_ext = "") {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    if (!only_ext.empty() && it->path().extension() != only_ext) continue;
    total += it->file_size(ec);
  }
  return total;
}

std::string UtcStamp() {
  const time_t now = ::time(nullptr);
  struct tm t {};
  ::gmtime_r(&now, &t);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &t);
  return buf;
}

// "e0001_00003 checkpoint 7" for a checkpoint key, escaped bytes otherwise.
std::string Printable(std::string_view key) {
  if (const std::optional<uint64_t> n = KeySuffixNumber(key)) {
    return std::string(key.substr(0, key.size() - 9)) + " checkpoint " + std::to_string(*n);
  }
  std::string s;
  for (const char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      s += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      s += hex;
    }
  }
  return s;
}

// Sum of RocksDB's "dropping N bytes" reports.
uint64_t DroppedBytes(const std::vector<std::string>& lines) {
  uint64_t total = 0;
  for (const std::string& line : lines) {
    const size_t at = line.find("dropping ");
    if (at == std::string::npos) continue;
    total += std::strtoull(line.c_str() + at + 9, nullptr, 10);
  }
  return total;
}

void AddMessages(const InfoLog& log, SalvageReport* report) {
  for (std::string& line : log.Notable()) report->rocksdb_messages.push_back(std::move(line));
}

// What a read-only replay of the damaged copy sees, without changing it.
struct DryRun {
  uint64_t batches = 0;
  std::map<std::string, uint64_t> entries;
  uint64_t dropped_bytes = 0;
};

Result<DryRun> ReplayReadOnly(const std::string& dir, const std::vector<std::string>& names,
                              WalRecovery recovery, WalWatcher::Mode mode) {
  rocksdb::DBOptions options = internal::MakeDbOptions(recovery);
  // Read-only opens must keep WAL tracking on: with it off RocksDB 7.8 wants
  // to clear the tracked WALs from the MANIFEST, which a read-only open
  // cannot (an assertion in DBImpl::Recover). A store whose tracked WAL is
  // short then fails here; the read-write open counts for it instead.
  options.track_and_verify_wals_in_manifest = true;
  const std::shared_ptr<InfoLog> log = InfoLog::InMemory();
  options.info_log = log;
  WalWatcher watcher(mode);
  options.wal_filter = &watcher;
  ASSIGN_OR_RETURN(std::unique_ptr<RawDb> db,
                   RawDb::Open(dir, options, internal::Descriptors(names), /*read_only=*/true));
  DryRun run;
  run.batches = watcher.batches();
  run.entries = watcher.entries();
  run.dropped_bytes = DroppedBytes(log->Notable());
  return run;
}

Status SyncedWrite(RawDb& db, const std::string& dir, rocksdb::WriteBatch* batch) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  RETURN_IF_ERROR(FromRocks(db.db().Write(wo, batch), dir, "salvage write"));
  batch->Clear();
  return Status::Ok();
}

// Rebuilds the checkpoints family so that every key reads: values RocksDB
// can read are kept, values it cannot (a damaged blob record, a blob file the
// MANIFEST no longer names) are taken from the damaged copy's blob files if a
// record with a good CRC is there, and dropped otherwise. The family is
// rewritten rather than patched because a table file that links to a blob
// file the MANIFEST does not name fails every compaction that touches it
// ("VersionBuilder: Blob file #N not found").
Status RebuildCheckpoints(RawDb& db, const std::string& dir, const std::string& copy,
                          SalvageReport* report) {
  const std::string name = FamilyName(Family::kCheckpoints);
  rocksdb::ColumnFamilyHandle* cf = db.Find(name);
  if (cf == nullptr) return Status::Ok();
  RETURN_IF_ERROR(FromRocks(db.db().Flush(rocksdb::FlushOptions(), cf), dir, "salvage flush"));

  // Every key of the family, from its table files (an iterator over the
  // family stops at the first unreadable value).
  std::set<std::string> keys;
  rocksdb::ColumnFamilyMetaData meta;
  db.db().GetColumnFamilyMetaData(cf, &meta);
  const rocksdb::Options reader_options(internal::MakeDbOptions(WalRecovery::kPointInTime),
                                        internal::MakeFamilyOptions(Family::kCheckpoints));
  for (const rocksdb::LevelMetaData& level : meta.levels) {
    for (const rocksdb::SstFileMetaData& file : level.files) {
      const std::string path = file.directory + "/" + file.relative_filename;
      rocksdb::SstFileReader reader(reader_options);
      rocksdb::Status s = reader.Open(path);
      std::unique_ptr<rocksdb::Iterator> it;
      if (s.ok()) {
        // SstFileReader shows blob references as they are, without reading
        // the blob: exactly the keys are wanted here.
        it.reset(reader.NewIterator(rocksdb::ReadOptions()));
        for (it->SeekToFirst(); it->Valid(); it->Next()) keys.emplace(ToView(it->key()));
        s = it->status();
      }
      if (!s.ok()) {
        report->lost.push_back("checkpoints table " + file.relative_filename +
                               " is partly unreadable (" + s.ToString() +
                               "); checkpoints only it held are gone");
      }
    }
  }

  std::optional<BlobFileIndex> blobs;
  RETURN_IF_ERROR(db.DropFamily(dir, kRebuildFamily));  // left by an interrupted salvage
  RETURN_IF_ERROR(
      db.CreateFamily(dir, kRebuildFamily, internal::MakeFamilyOptions(Family::kCheckpoints)));
  rocksdb::ColumnFamilyHandle* rebuilt = db.Find(kRebuildFamily);
  rocksdb::WriteBatch batch;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  for (const std::string& key : keys) {
    rocksdb::PinnableSlice value;
    const rocksdb::Status got = db.db().Get(ro, cf, ToSlice(key), &value);
    if (got.IsNotFound()) continue;  // deleted by a newer table
    if (got.ok()) {
      RETURN_IF_ERROR(FromRocks(batch.Put(rebuilt, ToSlice(key), value), dir, "salvage batch"));
    } else {
      if (!blobs) {
        ASSIGN_OR_RETURN(BlobFileIndex index, BlobFileIndex::Build(copy));
        for (const std::string& p : index.problems()) report->lost.push_back("blob file " + p);
        blobs = std::move(index);
      }
      const std::optional<std::string> bytes = blobs->Read(key);
      if (!bytes) {
        report->checkpoints_lost.push_back(Printable(key));
        continue;
      }
      ++report->checkpoints_rescued;
      RETURN_IF_ERROR(FromRocks(batch.Put(rebuilt, ToSlice(key), *bytes), dir, "salvage batch"));
    }
    if (batch.GetDataSize() >= kRebuildBatchBytes) RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
  }
  RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));

  RETURN_IF_ERROR(db.DropFamily(dir, name));
  RETURN_IF_ERROR(db.CreateFamily(dir, name, internal::MakeFamilyOptions(Family::kCheckpoints)));
  cf = db.Find(name);
  {
    std::unique_ptr<rocksdb::Iterator> it(db.db().NewIterator(ro, rebuilt));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      RETURN_IF_ERROR(FromRocks(batch.Put(cf, it->key(), it->value()), dir, "salvage batch"));
      if (batch.GetDataSize() >= kRebuildBatchBytes) {
        RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
      }
    }
    RETURN_IF_ERROR(FromRocks(it->status(), dir, "salvage: reading the rebuilt checkpoints"));
  }
  RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
  return db.DropFamily(dir, kRebuildFamily);
}

// Reads everything (checksums verified). Damage in a table file of any
// family fails; values of the checkpoints family RocksDB cannot read set
// *checkpoints_unreadable instead (RebuildCheckpoints deals with them).
Status CheckAll(RawDb& db, const std::string& dir, bool* checkpoints_unreadable) {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  RETURN_IF_ERROR(FromRocks(db.db().VerifyChecksum(ro), dir, "verifying SST checksums"));
  *checkpoints_unreadable = false;
  for (const std::string& name : internal::FamiliesOfSchema(kSchemaVersion)) {
    rocksdb::ColumnFamilyHandle* h = db.Find(name);
    if (h == nullptr) continue;
    const Status s = internal::ReadWholeFamily(db.db(), h, dir).status();
    if (s.ok()) continue;
    if (name == FamilyName(Family::kCheckpoints) && s.code() == StatusCode::kCorruption) {
      *checkpoints_unreadable = true;
      continue;
    }
    return s;
  }
  return Status::Ok();
}

// Creates the families the schema has and the store lacks, empty.
Status CreateMissingFamilies(RawDb& db, const std::string& dir, SalvageReport* report) {
  for (int i = 0; i < kNumFamilies; ++i) {
    const auto f = static_cast<Family>(i);
    if (db.Find(FamilyName(f)) != nullptr) continue;
    RETURN_IF_ERROR(db.CreateFamily(dir, FamilyName(f), internal::MakeFamilyOptions(f)));
    report->families_recreated.emplace_back(FamilyName(f));
  }
  return Status::Ok();
}

// Writes the schema record if it is gone: the salvaged store is a ztune store
// (the damaged one was; Open refused it only because of damage).
Status WriteSchemaIfMissing(RawDb& db, const std::string& dir, SalvageReport* report) {
  rocksdb::ColumnFamilyHandle* meta = db.Find(FamilyName(Family::kMeta));
  std::string value;
  const rocksdb::Status got =
      db.db().Get(rocksdb::ReadOptions(), meta, ToSlice(kMetaSchema), &value);
  if (!got.IsNotFound()) return FromRocks(got, dir, "salvage: reading the schema record");
  rocksdb::WriteBatch batch;
  RETURN_IF_ERROR(FromRocks(batch.Put(meta, ToSlice(kMetaSchema), std::to_string(kSchemaVersion)),
                            dir, "salvage batch"));
  RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
  report->lost.push_back("the schema record was missing; it was written again (schema " +
                         std::to_string(kSchemaVersion) + ")");
  return Status::Ok();
}

Status FinishFamiliesAndSchema(RawDb& db, const std::string& dir, SalvageReport* report) {
  RETURN_IF_ERROR(CreateMissingFamilies(db, dir, report));
  return WriteSchemaIfMissing(db, dir, report);
}

Result<std::vector<std::string>> ListFamilies(const std::string& dir) {
  std::vector<std::string> names;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::ListColumnFamilies(
                                internal::MakeDbOptions(WalRecovery::kPointInTime), dir, &names),
                            dir, "listing column families"));
  return names;
}

bool HasAllFamilies(const std::vector<std::string>& names) {
  for (const std::string& f : internal::FamiliesOfSchema(kSchemaVersion)) {
    if (std::find(names.begin(), names.end(), f) == names.end()) return false;
  }
  return true;
}

// Point-in-time recovery of `dir` in place. Returns false (with the reason
// in *why_not) when that cannot produce a readable store and the MANIFEST
// has to be rebuilt; `dir` may then have been changed (the caller restores it
// from the copy).
Result<bool> TryPointInTime(const std::string& dir, const std::string& copy,
                            const std::vector<std::string>& names, SalvageReport* report,
                            std::string* why_not) {
  std::shared_ptr<InfoLog> log = InfoLog::ToFile(dir);
  rocksdb::DBOptions options = internal::MakeDbOptions(WalRecovery::kPointInTime);
  options.info_log = log;
  WalWatcher watcher(WalWatcher::Mode::kDropAfterGap);
  options.wal_filter = &watcher;
  report->method = "point-in-time";
  // The table files before the read-write open, which deletes those the
  // MANIFEST does not name: afterwards their copies show whether they held
  // records the open did not recover (a MANIFEST that lost flush records).
  std::vector<std::string> tables_before;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".sst") tables_before.push_back(it->path().filename().string());
  }
  Result<std::unique_ptr<RawDb>> opened =
      RawDb::Open(dir, options, internal::Descriptors(names), /*read_only=*/false);
  WalWatcher skipping(WalWatcher::Mode::kCount);
  if (!opened.ok() && opened.status().message().find("ahead of WALs") != std::string::npos) {
    // A family was flushed past the damage: no point in time exists that
    // keeps it. Keep every readable record instead.
    AddMessages(*log, report);
    options = internal::MakeDbOptions(WalRecovery::kSkipDamaged);
    options.info_log = log;
    options.wal_filter = &skipping;
    report->method = "skip-damaged-records";
    opened = RawDb::Open(dir, options, internal::Descriptors(names), /*read_only=*/false);
  }
  if (!opened.ok()) {
    *why_not = opened.status().message();
    AddMessages(*log, report);
    return false;
  }
  RawDb& db = **opened;
  {
    std::vector<rocksdb::LiveFileMetaData> live;
    db.db().GetLiveFilesMetaData(&live);
    std::set<std::string> kept;
    for (const rocksdb::LiveFileMetaData& f : live) kept.insert(f.relative_filename);
    std::vector<std::string> dropped;
    for (const std::string& name : tables_before) {
      if (!kept.count(name)) dropped.push_back(name);
    }
    const Status orphans = internal::CheckOrphanTables(db, dir, copy, dropped);
    if (!orphans.ok()) {
      *why_not = orphans.message();
      AddMessages(*log, report);
      return false;
    }
  }
  if (!watcher.gap().empty()) {
    report->lost.push_back("WAL replay stopped at a gap: " + watcher.gap());
  }
  if (watcher.gap_from() != 0) {
    for (rocksdb::ColumnFamilyHandle* h : db.handles()) {
      rocksdb::ColumnFamilyMetaData meta;
      db.db().GetColumnFamilyMetaData(h, &meta);
      uint64_t newest = 0;
      for (const rocksdb::LevelMetaData& level : meta.levels) {
        for (const rocksdb::SstFileMetaData& f : level.files) {
          newest = std::max<uint64_t>(newest, f.largest_seqno);
        }
      }
      if (newest < watcher.gap_from()) continue;
      report->lost.push_back(
          "family " + h->GetName() +
          " had already been flushed past that point: it holds records newer than the point "
          "the other families were recovered to (`ztune-head --check` lists what disagrees)");
    }
  }
  // (After a fallback to skipping, `watcher` counted the refused attempt.)
  const bool point_in_time = report->method == "point-in-time";
  report->wal_commits_replayed = point_in_time ? watcher.batches() : skipping.batches();
  if (point_in_time) {
    report->wal_commits_dropped = watcher.dropped_batches();
    for (const auto& [family, n] : watcher.dropped_entries()) {
      report->wal_entries_dropped.emplace_back(family, n);
    }
  }
  bool checkpoints_unreadable = false;
  const Status checked = CheckAll(db, dir, &checkpoints_unreadable);
  if (!checked.ok()) {
    *why_not = checked.message();
    AddMessages(*log, report);
    return false;
  }
  if (checkpoints_unreadable) RETURN_IF_ERROR(RebuildCheckpoints(db, dir, copy, report));
  RETURN_IF_ERROR(FinishFamiliesAndSchema(db, dir, report));
  AddMessages(*log, report);
  RETURN_IF_ERROR(FromRocks(db.Close(), dir, "salvage: close"));
  return true;
}

// The column family ids a store created by ztune has: Open creates the
// families in this order in one go (DB::Open with
// create_missing_column_families), and RocksDB numbers them in order.
const std::map<std::string, uint32_t>& CreationIds() {
  static const std::map<std::string, uint32_t> ids = [] {
    std::map<std::string, uint32_t> m{{internal::DefaultFamilyName(), 0}};
    uint32_t next = 1;
    for (const std::string& f : internal::FamiliesOfSchema(kSchemaVersion)) m[f] = next++;
    return m;
  }();
  return ids;
}

// Re-applies the WAL files of the damaged copy, read without RocksDB, on top
// of the tables RepairDB restored. `ids` maps the column family ids the WAL
// uses to names. Entries a family's tables already hold (sequence at or below
// the family's newest table entry) are skipped, so an old WAL never
// overwrites newer table data; everything else is written again in order.
// Like point-in-time recovery it stops at the first damaged record or the
// first gap in the sequence numbers past the tables, and counts what it
// drops after that.
Status ReapplyWal(RawDb& db, const std::string& dir, const std::string& copy,
                  const std::map<uint32_t, std::string>& ids, SalvageReport* report) {
  struct Target {
    rocksdb::ColumnFamilyHandle* handle = nullptr;
    uint64_t flushed_to = 0;  // newest sequence number in its tables
    std::string name;
  };
  std::map<uint32_t, Target> targets;
  uint64_t tables_to = 0;
  for (const auto& [id, name] : ids) {
    Target t;
    t.name = name;
    t.handle = db.Find(name);
    if (t.handle == nullptr) continue;
    rocksdb::ColumnFamilyMetaData meta;
    db.db().GetColumnFamilyMetaData(t.handle, &meta);
    for (const rocksdb::LevelMetaData& level : meta.levels) {
      for (const rocksdb::SstFileMetaData& f : level.files) {
        t.flushed_to = std::max<uint64_t>(t.flushed_to, f.largest_seqno);
      }
    }
    tables_to = std::max(tables_to, t.flushed_to);
    targets[id] = t;
  }

  struct Reapply final : rocksdb::WriteBatch::Handler {
    std::map<uint32_t, Target>* targets;
    rocksdb::WriteBatch* out;
    bool apply = true;
    uint64_t sequence = 0;  // of the entry being handled
    std::map<std::string, uint64_t>* dropped;
    std::map<uint32_t, uint64_t> unknown;

    rocksdb::Status Entry(uint32_t cf, const std::function<rocksdb::Status(Target&)>& put) {
      const uint64_t seq = sequence++;
      const auto t = targets->find(cf);
      if (t == targets->end()) {
        ++unknown[cf];
        return rocksdb::Status::OK();
      }
      if (seq <= t->second.flushed_to) return rocksdb::Status::OK();
      if (!apply) {
        ++(*dropped)[t->second.name];
        return rocksdb::Status::OK();
      }
      return put(t->second);
    }
    rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& k, const rocksdb::Slice& v) override {
      return Entry(cf, [&](Target& t) { return out->Put(t.handle, k, v); });
    }
    rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
      return Entry(cf, [&](Target& t) { return out->Delete(t.handle, k); });
    }
    rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
      return Entry(cf, [&](Target& t) { return out->Delete(t.handle, k); });
    }
    rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice& b,
                                  const rocksdb::Slice& e) override {
      return Entry(cf, [&](Target& t) { return out->DeleteRange(t.handle, b, e); });
    }
  };

  std::map<std::string, uint64_t> dropped_entries;
  rocksdb::WriteBatch out;
  Reapply handler;
  handler.targets = &targets;
  handler.out = &out;
  handler.dropped = &dropped_entries;
  uint64_t next = 0;  // where the next record's sequence must start
  Status status;
  std::string stop;
  for (const std::string& wal : [&] {
         std::vector<std::string> files;
         std::error_code ec;
         for (fs::directory_iterator it(copy, ec), end; !ec && it != end; it.increment(ec)) {
           if (it->path().extension() == ".log") files.push_back(it->path().string());
         }
         std::sort(files.begin(), files.end());  // zero-padded file numbers: replay order
         return files;
       }()) {
    const WalFileScan scan = ScanWalFile(wal, [&](std::string_view record) {
      if (record.size() < 12) return true;
      const rocksdb::WriteBatch batch{std::string(record)};
      uint64_t sequence = 0;
      for (int i = 7; i >= 0; --i) {
        sequence = sequence << 8 | static_cast<unsigned char>(record[i]);
      }
      if (handler.apply && next != 0 && sequence > std::max(next, tables_to + 1)) {
        stop = fs::path(wal).filename().string() + ": the records jump from sequence " +
               std::to_string(std::max(next, tables_to + 1)) + " to " + std::to_string(sequence) +
               " (a WAL was cut or deleted)";
        handler.apply = false;
      }
      next = std::max(next, sequence + batch.Count());
      handler.sequence = sequence;
      if (handler.apply) {
        ++report->wal_commits_replayed;
      } else {
        ++report->wal_commits_dropped;
      }
      const rocksdb::Status s = batch.Iterate(&handler);
      if (!s.ok() && status.ok()) status = FromRocks(s, dir, "salvage: re-applying the WAL");
      if (out.GetDataSize() >= kRebuildBatchBytes && status.ok()) {
        status = SyncedWrite(db, dir, &out);
      }
      return status.ok();
    });
    RETURN_IF_ERROR(status);
    if (!scan.error.empty()) report->lost.push_back("WAL " + scan.error);
    if (scan.damaged) {
      if (handler.apply) {
        stop = fs::path(wal).filename().string() + ": " + scan.damage + " at offset " +
               std::to_string(scan.damage_offset);
      }
      handler.apply = false;
      report->wal_commits_dropped += scan.records_after_damage;
      report->wal_bytes_dropped += scan.bytes_after_damage;
    }
  }
  RETURN_IF_ERROR(SyncedWrite(db, dir, &out));
  if (!stop.empty()) report->lost.push_back("WAL replay stopped: " + stop);
  for (const auto& [family, n] : dropped_entries)
    report->wal_entries_dropped.emplace_back(family, n);
  for (const auto& [id, n] : handler.unknown) {
    report->lost.push_back(std::to_string(n) + " WAL entries of column family id " +
                           std::to_string(id) +
                           ", which no table file or creation order names, were dropped");
  }
  return Status::Ok();
}

// RocksDB's RepairDB on `dir` for the table files (the WAL is taken from the
// copy afterwards, see ReapplyWal), then the families, the WAL, the schema
// record and the checkpoints.
Status Repair(const std::string& dir, const std::string& copy, SalvageReport* report) {
  report->method = "repair";
  report->wal_commits_replayed = 0;
  report->wal_commits_dropped = 0;
  report->wal_bytes_dropped = 0;
  report->wal_entries_dropped.clear();
  const fs::path lost_dir = fs::path(dir) / "lost";
  std::set<std::string> lost_before;
  std::error_code ec;
  for (fs::directory_iterator it(lost_dir, ec), end; !ec && it != end; it.increment(ec)) {
    lost_before.insert(it->path().filename().string());
  }
  // RepairDB would convert the WAL itself but drop every batch that touches
  // a family it finds no table file for; ReapplyWal does better.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".log") fs::remove(it->path(), ec);
  }
  std::shared_ptr<InfoLog> log = InfoLog::ToFile(dir);
  rocksdb::DBOptions options = internal::MakeDbOptions(WalRecovery::kPointInTime);
  options.info_log = log;
  std::vector<std::string> ours{internal::DefaultFamilyName()};
  for (const std::string& f : internal::FamiliesOfSchema(kSchemaVersion)) ours.push_back(f);
  const rocksdb::Status repaired =
      rocksdb::RepairDB(dir, options, internal::Descriptors(ours), rocksdb::ColumnFamilyOptions());
  AddMessages(*log, report);
  RETURN_IF_ERROR(FromRocks(repaired, dir, "salvage: RocksDB repair"));
  for (fs::directory_iterator it(lost_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (lost_before.count(name) || name.rfind("MANIFEST-", 0) == 0) continue;
    std::error_code size_ec;
    const uint64_t size = it->file_size(size_ec);
    report->lost.push_back(name + " (" + HumanBytes(size) +
                           ") could not be read by RocksDB's repair and was moved to " +
                           lost_dir.string() + "; its records are not in the salvaged store");
  }

  ASSIGN_OR_RETURN(const std::vector<std::string> names, ListFamilies(dir));
  std::shared_ptr<InfoLog> open_log = InfoLog::ToFile(dir);
  options = internal::MakeDbOptions(WalRecovery::kPointInTime);
  options.info_log = open_log;
  ASSIGN_OR_RETURN(std::unique_ptr<RawDb> db,
                   RawDb::Open(dir, options, internal::Descriptors(names), /*read_only=*/false));

  // The ids the WAL uses: RepairDB kept those of every family it found a
  // table file for (they are in the tables' properties); the others are
  // inferred from ztune's creation order when the known ones agree with it.
  std::map<uint32_t, std::string> ids;
  bool creation_order = true;
  for (rocksdb::ColumnFamilyHandle* h : db->handles()) {
    ids[h->GetID()] = h->GetName();
    const auto canonical = CreationIds().find(h->GetName());
    if (canonical == CreationIds().end() || canonical->second != h->GetID()) {
      creation_order = false;
    }
  }
  if (creation_order) {
    std::string inferred;
    for (const auto& [name, id] : CreationIds()) {
      if (ids.emplace(id, name).second && name != internal::DefaultFamilyName()) {
        inferred += (inferred.empty() ? "" : ", ") + name + " = " + std::to_string(id);
      }
    }
    if (!inferred.empty()) {
      report->lost.push_back("no table file is left of some families; their WAL entries were "
                             "matched to them by ztune's creation order of the families (" +
                             inferred + ")");
    }
  }
  RETURN_IF_ERROR(CreateMissingFamilies(*db, dir, report));
  RETURN_IF_ERROR(ReapplyWal(*db, dir, copy, ids, report));
  RETURN_IF_ERROR(WriteSchemaIfMissing(*db, dir, report));
  bool checkpoints_unreadable = false;
  RETURN_IF_ERROR(CheckAll(*db, dir, &checkpoints_unreadable));
  if (checkpoints_unreadable) RETURN_IF_ERROR(RebuildCheckpoints(*db, dir, copy, report));
  AddMessages(*open_log, report);
  return FromRocks(db->Close(), dir, "salvage: close");
}

// A salvage error, saying where the untouched damaged directory is.
Status Kept(const Status& s, const std::string& copy) {
  return Status(s.code(), "salvage failed: " + s.message() +
                              "; the damaged directory is kept, untouched, at " + copy +
                              " (restore it from there before trying again)");
}

Status RestoreFromCopy(const std::string& dir, const std::string& copy) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Status::IOError("salvage: cannot remove " + dir + ": " + ec.message());
  return CopyTree(copy, dir);
}

}  // namespace

std::string SalvageReport::ToText() const {
  if (!salvaged()) return "data directory " + dir + " opens and verifies; nothing to salvage\n";
  std::string s = "data directory " + dir + " salvaged\n";
  s += "  problem: " + problem + "\n";
  s += "  the damaged directory was copied, untouched, to " + damaged_copy + "\n";
  s += "  method: " + method + "\n";
  {
    s += "  WAL: " + std::to_string(wal_commits_replayed) + " commits replayed";
    if (wal_commits_dropped > 0) {
      s += "; " + std::to_string(wal_commits_dropped) +
           " later commits were intact but dropped (at least; a store that skipped them would "
           "hold a state the head never had):";
      for (const auto& [family, n] : wal_entries_dropped) {
        s += " " + family + " " + std::to_string(n);
      }
    }
    if (wal_bytes_dropped > 0) {
      s += "; RocksDB dropped " + std::to_string(wal_bytes_dropped) + " bytes of WAL";
    }
    s += "\n";
  }
  if (!families_recreated.empty()) {
    std::string names;
    for (const std::string& f : families_recreated) names += (names.empty() ? "" : ", ") + f;
    s += "  column families missing from the MANIFEST and created again: " + names +
         (method == "repair" ? " (they hold what the WAL still had for them)\n" : " (empty)\n");
  }
  if (checkpoints_rescued > 0) {
    s += "  " + std::to_string(checkpoints_rescued) +
         " checkpoints were rescued from the damaged copy's blob files\n";
  }
  if (!checkpoints_lost.empty()) {
    s += "  " + std::to_string(checkpoints_lost.size()) + " checkpoints are lost:";
    for (size_t i = 0; i < checkpoints_lost.size() && i < 20; ++i)
      s += " " + checkpoints_lost[i] + ";";
    if (checkpoints_lost.size() > 20) s += " ...";
    s += "\n";
  }
  for (const std::string& l : lost) s += "  " + l + "\n";
  s += "  keys now:";
  for (int i = 0; i < kNumFamilies; ++i) {
    s +=
        std::string(" ") + FamilyName(static_cast<Family>(i)) + " " + std::to_string(keys_after[i]);
  }
  s += "\n";
  if (!rocksdb_messages.empty()) {
    s += "  RocksDB said:\n";
    for (const std::string& m : rocksdb_messages) s += "    " + m + "\n";
  }
  return s;
}

Result<SalvageReport> RocksDbStore::Salvage(const std::string& dir_in,
                                            const RocksDbStoreOptions& options) {
  try {
    fs::path normal = fs::path(dir_in).lexically_normal();
    if (normal.filename().empty()) normal = normal.parent_path();
    const std::string dir = normal.string();
    SalvageReport report;
    report.dir = dir;

    std::error_code ec;
    if (!fs::is_directory(dir, ec) || !fs::exists(fs::path(dir) / "CURRENT", ec)) {
      return Status::FailedPrecondition("data directory " + dir +
                                        " holds no RocksDB store; nothing to salvage");
    }
    if (const std::optional<long> holder = internal::LockHolder(dir)) {
      return Status::Unavailable("data directory " + dir +
                                 " is in use by another process (process " +
                                 std::to_string(*holder) + " holds its LOCK); stop it first");
    }

    // Anything to do? Exactly the checks of a normal open, plus Verify (a
    // damaged results table or blob record does not stop the open, but it
    // does stop --check and the reads that touch it).
    {
      Result<std::unique_ptr<RocksDbStore>> store = OpenReadOnly(dir);
      if (store.ok()) {
        const Status verified = (*store)->Verify();
        if (verified.ok()) {
          for (int i = 0; i < kNumFamilies; ++i) {
            RETURN_IF_ERROR(
                (*store)->Scan(static_cast<Family>(i), "", [&](std::string_view, std::string_view) {
                  ++report.keys_after[i];
                  return true;
                }));
          }
          return report;
        }
        if (verified.code() != StatusCode::kCorruption) return verified;
        report.problem = verified.message();
      } else if (store.status().code() == StatusCode::kCorruption) {
        report.problem = store.status().message();
      } else {
        // Not damage (not a ztune store, a newer schema, unreadable
        // directory): salvage has nothing to offer.
        return store.status();
      }
    }

    // Room for the copy, and for rebuilding the checkpoints family.
    const uint64_t need = TreeBytes(dir) + TreeBytes(dir, ".blob");
    const SteadyClock clock;  // outlives `space`, which keeps a reference
    FreeSpaceGuard space(dir, options.min_free_bytes, 0, 0, options.free_space_probe,
                         clock);
    if (const Status room = space.Reserve(need); !room.ok()) {
      if (room.code() != StatusCode::kResourceExhausted) return room;
      return Status::ResourceExhausted("salvage of " + dir + " copies it first and needs " +
                                       HumanBytes(need) +
                                       " besides the reserve: " + room.message());
    }

    std::string copy = dir + ".damaged-" + UtcStamp();
    for (int n = 2; fs::exists(copy, ec); ++n) {
      copy = dir + ".damaged-" + UtcStamp() + "-" + std::to_string(n);
    }
    RETURN_IF_ERROR(CopyTree(dir, copy));
    report.damaged_copy = copy;

    // What point-in-time recovery keeps and what a skipping replay would
    // see, measured on the copy before anything changes.
    Result<std::vector<std::string>> names = ListFamilies(dir);
    // A missing WAL the MANIFEST tracked was usually deleted after a flush
    // whose MANIFEST record was lost: its records are in table files the
    // MANIFEST no longer names, which only the repair keeps.
    bool repair = !names.ok() || !HasAllFamilies(*names) ||
                  report.problem.find("the MANIFEST may be damaged") != std::string::npos ||
                  report.problem.find("MANIFEST-") != std::string::npos ||
                  report.problem.find("Missing WAL") != std::string::npos;
    if (!repair) {
      Result<DryRun> pit =
          ReplayReadOnly(copy, *names, WalRecovery::kPointInTime, WalWatcher::Mode::kDropAfterGap);
      Result<DryRun> all =
          ReplayReadOnly(copy, *names, WalRecovery::kSkipDamaged, WalWatcher::Mode::kCount);
      std::string why_not;
      Result<bool> tried = TryPointInTime(dir, copy, *names, &report, &why_not);
      if (!tried.ok()) return Kept(tried.status(), copy);
      const bool done = *tried;
      if (done && pit.ok()) report.wal_bytes_dropped = pit->dropped_bytes;
      if (done && pit.ok() && all.ok() && report.method == "point-in-time" &&
          all->batches > pit->batches) {
        report.wal_commits_dropped = all->batches - pit->batches;
        report.wal_entries_dropped.clear();
        for (const auto& [family, n] : all->entries) {
          const auto kept = pit->entries.find(family);
          const uint64_t k = kept == pit->entries.end() ? 0 : kept->second;
          if (n > k) report.wal_entries_dropped.emplace_back(family, n - k);
        }
      }
      if (!done) {
        report.lost.push_back("point-in-time recovery could not make the store readable (" +
                              why_not + "); the MANIFEST was rebuilt instead");
        if (Status restored = RestoreFromCopy(dir, copy); !restored.ok()) {
          return Kept(restored, copy);
        }
        repair = true;
      }
    }
    if (repair) {
      if (Status repaired = Repair(dir, copy, &report); !repaired.ok()) {
        return Kept(repaired, copy);
      }
    }

    // The proof: what a normal open and --check will see.
    Result<std::unique_ptr<RocksDbStore>> reopened = OpenReadOnly(dir);
    Status final = reopened.ok() ? (*reopened)->Verify() : reopened.status();
    if (final.ok()) {
      for (int i = 0; i < kNumFamilies && final.ok(); ++i) {
        final =
            (*reopened)->Scan(static_cast<Family>(i), "", [&](std::string_view, std::string_view) {
              ++report.keys_after[i];
              return true;
            });
      }
    }
    if (!final.ok()) {
      return Status::Corruption("salvage of " + dir + " did not produce a readable store (" +
                                final.message() + "); the damaged directory is kept at " + copy +
                                "\n" + report.ToText());
    }
    return report;
  } catch (const std::exception& e) {
    return internal::FromException(dir_in, "salvage", e.what());
  }
}

}  // namespace ztune::storage
