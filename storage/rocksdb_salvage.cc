// RocksDbStore::Salvage (`ztune-head --salvage`): copies a damaged data
// directory aside, makes the directory openable again keeping what is
// readable, and reports what was lost. The strategy and its reasons are in
// docs/storage.md, "Salvage":
//
//  - damage in the WAL or in a table file that RocksDB can open around:
//    point-in-time recovery (replay stops at the first damaged record, or at
//    a gap in the sequence numbers), so the store is a state the head really
//    had; skipping damaged records instead only when RocksDB refuses that
//    (a family was already flushed past the damage) (salvage_point_in_time.cc);
//  - a damaged MANIFEST (families or the schema record missing, MANIFEST
//    unreadable) or unreadable table files: RocksDB's RepairDB, which rebuilds
//    the MANIFEST from the table files and moves unreadable files to lost/,
//    and the WAL of the damaged copy is re-applied on top (salvage_repair.cc);
//  - checkpoints whose blob records are unreadable or no longer named (RepairDB
//    ignores blob files): the checkpoints family is rebuilt, taking the bytes
//    from the damaged copy's blob files where a record with a good CRC exists
//    (salvage_fixups.cc, with the other steps both paths end with).
// This file decides which path, keeps the damaged copy (directory_copy.cc),
// proves the result opens and verifies, and writes the report.
#include "storage/rocksdb_store.h"

#include <ctime>
#include <exception>
#include <filesystem>
#include <system_error>

#include "storage/directory_copy.h"
#include "storage/keys.h"
#include "storage/rocksdb_internal.h"
#include "storage/salvage_point_in_time.h"
#include "storage/salvage_repair.h"

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;
using internal::WalRecovery;
using internal::WalWatcher;

std::string UtcStamp() {
  const time_t now = ::time(nullptr);
  struct tm t {};
  ::gmtime_r(&now, &t);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &t);
  return buf;
}

bool HasAllFamilies(const std::vector<std::string>& names) {
  for (const std::string& f : internal::FamiliesOfSchema(kSchemaVersion)) {
    if (std::find(names.begin(), names.end(), f) == names.end()) return false;
  }
  return true;
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
  return internal::CopyTree(copy, dir);
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
    const uint64_t need = internal::TreeBytes(dir) + internal::TreeBytes(dir, ".blob");
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
    RETURN_IF_ERROR(internal::CopyTree(dir, copy));
    report.damaged_copy = copy;

    // What point-in-time recovery keeps and what a skipping replay would
    // see, measured on the copy before anything changes.
    Result<std::vector<std::string>> names = internal::ListFamilyNames(dir);
    // A missing WAL the MANIFEST tracked was usually deleted after a flush
    // whose MANIFEST record was lost: its records are in table files the
    // MANIFEST no longer names, which only the repair keeps.
    bool repair = !names.ok() || !HasAllFamilies(*names) ||
                  report.problem.find("the MANIFEST may be damaged") != std::string::npos ||
                  report.problem.find("MANIFEST-") != std::string::npos ||
                  report.problem.find("Missing WAL") != std::string::npos;
    if (!repair) {
      Result<internal::DryRun> pit = internal::ReplayReadOnly(
          copy, *names, WalRecovery::kPointInTime, WalWatcher::Mode::kDropAfterGap);
      Result<internal::DryRun> all = internal::ReplayReadOnly(
          copy, *names, WalRecovery::kSkipDamaged, WalWatcher::Mode::kCount);
      std::string why_not;
      Result<bool> tried = internal::TryPointInTime(dir, copy, *names, &report, &why_not);
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
      if (Status repaired = internal::Repair(dir, copy, &report); !repaired.ok()) {
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

