#include "storage/salvage_repair.h"

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <system_error>

#include "storage/free_space.h"
#include "storage/keys.h"
#include "storage/rocksdb_internal.h"
#include "storage/salvage_fixups.h"
#include "storage/wal_file_scan.h"

namespace ztune::storage::internal {
namespace {

namespace fs = std::filesystem;

// The column family ids a store created by ztune has: Open creates the
// families in this order in one go (DB::Open with
// create_missing_column_families), and RocksDB numbers them in order.
const std::map<std::string, uint32_t>& CreationIds() {
  static const std::map<std::string, uint32_t> ids = [] {
    std::map<std::string, uint32_t> m{{DefaultFamilyName(), 0}};
    uint32_t next = 1;
    for (const std::string& f : FamiliesOfSchema(kSchemaVersion)) m[f] = next++;
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
      if (out.GetDataSize() >= kSalvageBatchBytes && status.ok()) {
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

}  // namespace

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
  rocksdb::DBOptions options = MakeDbOptions(WalRecovery::kPointInTime);
  options.info_log = log;
  std::vector<std::string> ours{DefaultFamilyName()};
  for (const std::string& f : FamiliesOfSchema(kSchemaVersion)) ours.push_back(f);
  const rocksdb::Status repaired =
      rocksdb::RepairDB(dir, options, Descriptors(ours), rocksdb::ColumnFamilyOptions());
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

  ASSIGN_OR_RETURN(const std::vector<std::string> names, ListFamilyNames(dir));
  std::shared_ptr<InfoLog> open_log = InfoLog::ToFile(dir);
  options = MakeDbOptions(WalRecovery::kPointInTime);
  options.info_log = open_log;
  ASSIGN_OR_RETURN(std::unique_ptr<RawDb> db,
                   RawDb::Open(dir, options, Descriptors(names), /*read_only=*/false));

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
      if (ids.emplace(id, name).second && name != DefaultFamilyName()) {
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

}  // namespace ztune::storage::internal
