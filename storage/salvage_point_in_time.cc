#include "storage/salvage_point_in_time.h"

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <system_error>

#include "storage/salvage_fixups.h"

namespace ztune::storage::internal {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

Result<DryRun> ReplayReadOnly(const std::string& dir, const std::vector<std::string>& names,
                              WalRecovery recovery, WalWatcher::Mode mode) {
  rocksdb::DBOptions options = MakeDbOptions(recovery);
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
                   RawDb::Open(dir, options, Descriptors(names), /*read_only=*/true));
  DryRun run;
  run.batches = watcher.batches();
  run.entries = watcher.entries();
  run.dropped_bytes = DroppedBytes(log->Notable());
  return run;
}

Result<bool> TryPointInTime(const std::string& dir, const std::string& copy,
                            const std::vector<std::string>& names, SalvageReport* report,
                            std::string* why_not) {
  std::shared_ptr<InfoLog> log = InfoLog::ToFile(dir);
  rocksdb::DBOptions options = MakeDbOptions(WalRecovery::kPointInTime);
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
      RawDb::Open(dir, options, Descriptors(names), /*read_only=*/false);
  WalWatcher skipping(WalWatcher::Mode::kCount);
  if (!opened.ok() && opened.status().message().find("ahead of WALs") != std::string::npos) {
    // A family was flushed past the damage: no point in time exists that
    // keeps it. Keep every readable record instead.
    AddMessages(*log, report);
    options = MakeDbOptions(WalRecovery::kSkipDamaged);
    options.info_log = log;
    options.wal_filter = &skipping;
    report->method = "skip-damaged-records";
    opened = RawDb::Open(dir, options, Descriptors(names), /*read_only=*/false);
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
    const Status orphans = CheckOrphanTables(db, dir, copy, dropped);
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

}  // namespace ztune::storage::internal
