// The RocksDB pieces shared by RocksDbStore and its salvage (see
// rocksdb_internal.h).
#include "storage/rocksdb_internal.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace ztune::storage::internal {
namespace {

// Values at least this large go to blob files in the checkpoints family.
constexpr uint64_t kMinBlobSize = 64 * kKiB;

bool IsLockError(const rocksdb::Status& s) {
  // PosixEnv::LockFile reports either "lock hold by current process ..." (a
  // second DB::Open in this process) or "While lock file: <dir>/LOCK: Resource
  // temporarily unavailable" (another process holds the fcntl lock).
  if (!s.IsIOError()) return false;
  const std::string msg = s.ToString();
  return msg.find("lock hold by current process") != std::string::npos ||
         msg.find("While lock file") != std::string::npos;
}

// The trial a results or checkpoints key belongs to: its TrialPrefix (the
// trial id and its NUL). Keys of one trial arrive in increasing order (each
// result after the previous one), so the memtable keeps an insert position
// per trial (memtable_insert_with_hint_prefix_extractor) instead of
// searching its skiplist from the top for each: that search was the head's
// largest single cost at one result per commit.
class TrialPrefixTransform final : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "ztune.TrialPrefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    const void* nul = std::memchr(key.data(), '\0', key.size());
    return rocksdb::Slice(key.data(), static_cast<const char*>(nul) - key.data() + 1);
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    return std::memchr(key.data(), '\0', key.size()) != nullptr;
  }
};

rocksdb::CompressionType PickCompression(rocksdb::CompressionType wanted) {
  const auto supported = rocksdb::GetSupportedCompressions();
  if (std::find(supported.begin(), supported.end(), wanted) != supported.end()) return wanted;
  return rocksdb::kNoCompression;
}

}  // namespace

const std::string& DefaultFamilyName() {
  static const std::string name(rocksdb::kDefaultColumnFamilyName);
  return name;
}

std::vector<std::string> FamiliesOfSchema(int /*schema*/) {
  // Schemas 1 to 3 have the same families (2 and 3 changed value layouts); a
  // later schema that adds a family lists the families of each version here.
  std::vector<std::string> names;
  for (int i = 0; i < kNumFamilies; ++i) names.emplace_back(FamilyName(static_cast<Family>(i)));
  return names;
}

rocksdb::Slice ToSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
std::string_view ToView(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

Status FromRocks(const rocksdb::Status& s, const std::string& dir, std::string_view what) {
  if (s.ok()) return Status::Ok();
  const std::string detail = s.ToString();
  const std::string where = "data directory " + dir + ": " + std::string(what) + ": ";
  if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kSpaceLimit) {
    return Status::ResourceExhausted(where + detail +
                                     " (RocksDB ran out of space; it takes writes again once "
                                     "space is freed)");
  }
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

rocksdb::DBOptions MakeDbOptions(WalRecovery recovery) {
  rocksdb::DBOptions o;
  // Fail the open on inconsistent files, and stop writes after a failed one.
  o.paranoid_checks = true;
  o.max_background_jobs = 2;
  // Commits are synced WAL writes; memtables are flushed in the background.
  // These cap memory and WAL size across the five families (the WAL's bound
  // is the restart's: see kMaxTotalWalBytes).
  o.db_write_buffer_size = 256 * kMiB;
  o.max_total_wal_size = kMaxTotalWalBytes;
  switch (recovery) {
    case WalRecovery::kStrict:
      // A torn last record (a crash mid-append, which can only belong to a
      // commit that never returned) is dropped; a damaged record anywhere
      // else fails the open. kPointInTimeRecovery, RocksDB's default, would
      // silently stop at the damage and drop every later commit.
      o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
      // The synced size of every closed WAL goes to the MANIFEST; an open
      // finding such a WAL shorter or missing fails. (RocksDB 7.8 does not
      // track the live WAL: see docs/storage.md, "Damage".)
      o.track_and_verify_wals_in_manifest = true;
      break;
    case WalRecovery::kPointInTime:
      o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
      break;
    case WalRecovery::kSkipDamaged:
      o.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
      break;
  }
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
  if (f == Family::kTrials) {
    // A head's start reads every trial record on one thread while others
    // parse them: ZSTD's decompression was 11% of that start's CPU at
    // 100,000 trials (docs/benchmarks.md, "recovery"); LZ4 decompresses
    // several times faster, and this family is small beside the results.
    o.bottommost_compression = PickCompression(rocksdb::kLZ4Compression);
  }
  o.write_buffer_size = 32 * kMiB;
  if (f == Family::kResults || f == Family::kCheckpoints) {
    static const std::shared_ptr<const rocksdb::SliceTransform> by_trial =
        std::make_shared<TrialPrefixTransform>();
    o.memtable_insert_with_hint_prefix_extractor = by_trial;
  }
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

Result<std::vector<std::string>> ListFamilyNames(const std::string& dir) {
  std::vector<std::string> names;
  RETURN_IF_ERROR(FromRocks(
      rocksdb::DB::ListColumnFamilies(MakeDbOptions(WalRecovery::kStrict), dir, &names), dir,
      "listing column families"));
  return names;
}

std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(const std::vector<std::string>& names) {
  std::vector<rocksdb::ColumnFamilyDescriptor> d;
  for (const std::string& name : names) d.emplace_back(name, OptionsForFamilyName(name));
  return d;
}

std::optional<long> LockHolder(const std::string& dir) {
  // /proc/locks instead of fcntl(F_GETLK): closing any descriptor of the LOCK
  // file would release the lock this process may hold on it (POSIX record
  // locks belong to the process, not to the descriptor).
  struct stat st {};
  if (::stat((dir + "/LOCK").c_str(), &st) != 0) return std::nullopt;
  char want[64];
  std::snprintf(want, sizeof(want), "%02x:%02x:%llu", ::major(st.st_dev), ::minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    // "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; blocked waiters are
    // listed as "1: -> POSIX ..." and hold nothing.
    std::istringstream in(line);
    std::string id, kind, mode, access, dev_ino;
    long pid = 0;
    if (!(in >> id >> kind)) continue;
    if (kind == "->") continue;
    if (!(in >> mode >> access >> pid >> dev_ino)) continue;
    if (dev_ino == want) return pid;
  }
  return std::nullopt;
}

// ---- RawDb ----

Result<std::unique_ptr<RawDb>> RawDb::Open(
    const std::string& dir, const rocksdb::DBOptions& options,
    const std::vector<rocksdb::ColumnFamilyDescriptor>& families, bool read_only) {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s =
      read_only ? rocksdb::DB::OpenForReadOnly(options, dir, families, &handles, &raw)
                : rocksdb::DB::Open(options, dir, families, &handles, &raw);
  if (!s.ok()) return FromRocks(s, dir, "open");
  return std::unique_ptr<RawDb>(new RawDb(std::unique_ptr<rocksdb::DB>(raw), std::move(handles)));
}

RawDb::~RawDb() { Close().PermitUncheckedError(); }

rocksdb::ColumnFamilyHandle* RawDb::Find(std::string_view name) const {
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    if (h->GetName() == name) return h;
  }
  return nullptr;
}

Status RawDb::CreateFamily(const std::string& dir, const std::string& name,
                           const rocksdb::ColumnFamilyOptions& options) {
  rocksdb::ColumnFamilyHandle* h = nullptr;
  RETURN_IF_ERROR(
      FromRocks(db_->CreateColumnFamily(options, name, &h), dir, "creating column family " + name));
  handles_.push_back(h);
  return Status::Ok();
}

Status RawDb::DropFamily(const std::string& dir, const std::string& name) {
  for (auto it = handles_.begin(); it != handles_.end(); ++it) {
    if ((*it)->GetName() != name) continue;
    RETURN_IF_ERROR(FromRocks(db_->DropColumnFamily(*it), dir, "dropping column family " + name));
    db_->DestroyColumnFamilyHandle(*it).PermitUncheckedError();
    handles_.erase(it);
    return Status::Ok();
  }
  return Status::Ok();
}

rocksdb::Status RawDb::Close() {
  if (closed_) return rocksdb::Status::OK();
  closed_ = true;
  for (rocksdb::ColumnFamilyHandle* h : handles_)
    db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  handles_.clear();
  return db_->Close();
}

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

namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

// A read view that hides every entry newer than a sequence number.
class AtSequence final : public rocksdb::Snapshot {
 public:
  explicit AtSequence(rocksdb::SequenceNumber s) : s_(s) {}
  rocksdb::SequenceNumber GetSequenceNumber() const override { return s_; }
  int64_t GetUnixTime() const override { return 0; }
  uint64_t GetTimestamp() const override { return 0; }

 private:
  rocksdb::SequenceNumber s_;
};

// A table file that does not open (no footer: a flush or compaction output
// torn by a crash) holds nothing anyone committed only there.
std::unique_ptr<rocksdb::SstFileReader> OpenTable(const std::string& path) {
  auto reader = std::make_unique<rocksdb::SstFileReader>(
      rocksdb::Options(MakeDbOptions(WalRecovery::kStrict), rocksdb::ColumnFamilyOptions()));
  if (!reader->Open(path).ok()) return nullptr;
  return reader;
}

}  // namespace

std::vector<std::string> CompleteTables(const std::string& files_dir,
                                        const std::vector<std::string>& names) {
  std::vector<std::string> complete;
  for (const std::string& name : names) {
    if (OpenTable(files_dir + "/" + name) != nullptr) complete.push_back(name);
  }
  return complete;
}

Status CheckOrphanTables(RawDb& db, const std::string& dir, const std::string& files_dir,
                         const std::vector<std::string>& orphans) {
  if (orphans.empty()) return Status::Ok();
  const AtSequence recovered(db.db().GetLatestSequenceNumber());
  std::vector<std::string> newer;
  for (const std::string& name : orphans) {
    const std::unique_ptr<rocksdb::SstFileReader> table = OpenTable(files_dir + "/" + name);
    if (table == nullptr) continue;  // a torn output of a crash
    rocksdb::SstFileReader& reader = *table;
    rocksdb::ReadOptions all;
    rocksdb::ReadOptions known;
    known.snapshot = &recovered;
    std::unique_ptr<rocksdb::Iterator> a(reader.NewIterator(all));
    std::unique_ptr<rocksdb::Iterator> k(reader.NewIterator(known));
    a->SeekToFirst();
    k->SeekToFirst();
    bool differs = false;
    for (; a->Valid() && k->Valid(); a->Next(), k->Next()) {
      if (a->key() != k->key() || a->value() != k->value()) {
        differs = true;
        break;
      }
    }
    if (differs || a->Valid() != k->Valid()) newer.push_back(name);
  }
  if (newer.empty()) return Status::Ok();
  return Status::Corruption(
      "data directory " + dir + ": table " + (newer.size() == 1 ? "file " : "files ") +
      JoinNames(newer) + (newer.size() == 1 ? " holds" : " hold") +
      " records newer than anything the MANIFEST and the WAL account for " +
      "(recovered up to sequence " + std::to_string(recovered.GetSequenceNumber()) +
      "); the MANIFEST may be damaged (it lost the records that named them); see ztune-head "
      "--salvage");
}

}  // namespace ztune::storage::internal
