// The RocksDB pieces shared by RocksDbStore and its salvage (see
// rocksdb_internal.h).
#include "storage/rocksdb_internal.h"

#include <pthread.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace ztune::storage::internal {
namespace {

namespace fs = std::filesystem;

// Values at least this large go to blob files in the checkpoints family.
constexpr uint64_t kMinBlobSize = 64 * kKiB;
// Old info logs kept next to LOG (RocksDB's keep_log_file_num, as before).
constexpr size_t kKeepOldInfoLogs = 5;

bool IsLockError(const rocksdb::Status& s) {
  // PosixEnv::LockFile reports either "lock hold by current process ..." (a
  // second DB::Open in this process) or "While lock file: <dir>/LOCK: Resource
  // temporarily unavailable" (another process holds the fcntl lock).
  if (!s.IsIOError()) return false;
  const std::string msg = s.ToString();
  return msg.find("lock hold by current process") != std::string::npos ||
         msg.find("While lock file") != std::string::npos;
}

rocksdb::CompressionType PickCompression(rocksdb::CompressionType wanted) {
  const auto supported = rocksdb::GetSupportedCompressions();
  if (std::find(supported.begin(), supported.end(), wanted) != supported.end()) return wanted;
  return rocksdb::kNoCompression;
}

uint64_t NowMicros() {
  struct timeval tv {};
  ::gettimeofday(&tv, nullptr);
  return static_cast<uint64_t>(tv.tv_sec) * 1000000u + static_cast<uint64_t>(tv.tv_usec);
}

// Renames dir/LOG to dir/LOG.old.<micros> and removes all but the newest
// kKeepOldInfoLogs old logs. Best effort: a log is not worth failing for.
void RotateInfoLog(const std::string& dir) {
  std::error_code ec;
  const fs::path log = fs::path(dir) / "LOG";
  if (fs::exists(log, ec) && fs::file_size(log, ec) > 0 && !ec) {
    fs::rename(log, fs::path(dir) / ("LOG.old." + std::to_string(NowMicros())), ec);
  }
  std::vector<std::string> old;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("LOG.old.", 0) == 0) old.push_back(name);
  }
  // Same-width microsecond stamps: name order is age order.
  std::sort(old.begin(), old.end());
  for (size_t i = 0; i + kKeepOldInfoLogs < old.size(); ++i) {
    fs::remove(fs::path(dir) / old[i], ec);
  }
}

const char* LevelName(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
      return "DEBUG";
    case rocksdb::InfoLogLevel::INFO_LEVEL:
      return "INFO";
    case rocksdb::InfoLogLevel::WARN_LEVEL:
      return "WARN";
    case rocksdb::InfoLogLevel::ERROR_LEVEL:
      return "ERROR";
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
      return "FATAL";
    default:
      return "HEADER";
  }
}

// INFO lines that describe WAL recovery or repair: worth quoting in a report.
bool IsNotableInfo(const std::string& line) {
  for (const char* needle : {"Point in time", "dropping", "Archiving", "ops saved", "Repaired",
                             "ignoring", "Recovering log", "Log #"}) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

const std::string& DefaultFamilyName() {
  static const std::string name(rocksdb::kDefaultColumnFamilyName);
  return name;
}

std::vector<std::string> FamiliesOfSchema(int /*schema*/) {
  // Schemas 1 and 2 have the same families (2 changed a record layout); a
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
  // These cap memory and WAL size across the five families.
  o.db_write_buffer_size = 256 * kMiB;
  o.max_total_wal_size = 256 * kMiB;
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

// ---- InfoLog ----

std::shared_ptr<InfoLog> InfoLog::ToFile(const std::string& dir) {
  std::shared_ptr<InfoLog> log(new InfoLog(dir));
  std::lock_guard<std::mutex> lock(log->mu_);
  RotateInfoLog(dir);
  log->OpenFile();
  return log;
}

std::shared_ptr<InfoLog> InfoLog::InMemory() { return std::shared_ptr<InfoLog>(new InfoLog("")); }

InfoLog::InfoLog(std::string dir)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), dir_(std::move(dir)) {}

InfoLog::~InfoLog() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

void InfoLog::OpenFile() {
  if (dir_.empty()) return;
  file_ = std::fopen((dir_ + "/LOG").c_str(), "ae");
  file_bytes_ = 0;
}

void InfoLog::Logv(const char* format, va_list ap) {
  Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void InfoLog::Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel()) return;
  char stack[512];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(stack, sizeof(stack), format, copy);
  va_end(copy);
  if (n < 0) return;
  std::string message;
  if (static_cast<size_t>(n) < sizeof(stack)) {
    message.assign(stack, static_cast<size_t>(n));
  } else {
    message.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(message.data(), message.size(), format, ap);
    message.resize(static_cast<size_t>(n));
  }
  while (!message.empty() && message.back() == '\n') message.pop_back();
  std::lock_guard<std::mutex> lock(mu_);
  Write(level, message);
}

void InfoLog::Write(rocksdb::InfoLogLevel level, const std::string& message) {
  // (RocksDB 7.8 warns about every table file it opens without a unique id
  // to verify, e.g. those its own recovery just wrote: noise in a report.)
  const bool notable = ((level >= rocksdb::InfoLogLevel::WARN_LEVEL &&
                         level != rocksdb::InfoLogLevel::HEADER_LEVEL) ||
                        (level == rocksdb::InfoLogLevel::INFO_LEVEL && IsNotableInfo(message))) &&
                       message.find("without unique ID to verify") == std::string::npos;
  if (notable) {
    // Without RocksDB's "[db/db_impl/db_impl_open.cc:982] " source prefix.
    const size_t close = message.find("] ");
    notable_.push_back(message.size() > 1 && message[0] == '[' && close != std::string::npos
                           ? message.substr(close + 2)
                           : message);
    if (notable_.size() > kMaxNotable) notable_.pop_front();
  }
  if (file_ == nullptr) return;
  if (file_bytes_ > kMaxFileBytes) {
    std::fclose(file_);
    file_ = nullptr;
    RotateInfoLog(dir_);
    OpenFile();
    if (file_ == nullptr) return;
  }
  const uint64_t micros = NowMicros();
  const time_t secs = static_cast<time_t>(micros / 1000000);
  struct tm t {};
  ::localtime_r(&secs, &t);
  char prefix[96];
  std::snprintf(prefix, sizeof(prefix), "%04d/%02d/%02d-%02d:%02d:%02d.%06llu %llx [%s] ",
                t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                static_cast<unsigned long long>(micros % 1000000),
                static_cast<unsigned long long>(::pthread_self()), LevelName(level));
  const std::string line = prefix + message + "\n";
  // A failed write (a full disk) ends file logging for this store; RocksDB
  // must never see it.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    std::fclose(file_);
    file_ = nullptr;
    return;
  }
  file_bytes_ += line.size();
}

void InfoLog::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr && std::fflush(file_) != 0) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

rocksdb::Status InfoLog::CloseImpl() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  return rocksdb::Status::OK();
}

std::vector<std::string> InfoLog::Notable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::string>(notable_.begin(), notable_.end());
}

// ---- WalWatcher ----

void WalWatcher::ColumnFamilyLogNumberMap(const std::map<uint32_t, uint64_t>& cf_lognumber_map,
                                          const std::map<std::string, uint32_t>& cf_name_id_map) {
  cf_log_number_ = cf_lognumber_map;
  for (const auto& [name, id] : cf_name_id_map) cf_name_[id] = name;
}

rocksdb::WalFilter::WalProcessingOption WalWatcher::LogRecordFound(
    unsigned long long log_number, const std::string& log_file_name,
    const rocksdb::WriteBatch& batch, rocksdb::WriteBatch* /*new_batch*/, bool* /*batch_changed*/) {
  if (mode_ == Mode::kStopAtFirstRecord) return WalProcessingOption::kStopReplay;
  // A WriteBatch's data starts with its sequence number, fixed64 little
  // endian (LevelDB's WAL format, kept by RocksDB); every entry takes one
  // sequence number (no two-phase commit, no seq_per_batch).
  const std::string& data = batch.Data();
  if (!dropping_ && data.size() >= 12) {
    uint64_t sequence = 0;
    for (int i = 7; i >= 0; --i) sequence = sequence << 8 | static_cast<unsigned char>(data[i]);
    if (next_sequence_ != 0 && sequence > next_sequence_ && mode_ != Mode::kCount) {
      gap_ = log_file_name + ": the records jump from sequence " + std::to_string(next_sequence_) +
             " to " + std::to_string(sequence) + " (" + std::to_string(sequence - next_sequence_) +
             " entries of committed batches are missing: a WAL was cut or deleted)";
      if (mode_ == Mode::kFailAtGap) return WalProcessingOption::kCorruptedRecord;
      dropping_ = true;
      gap_from_ = next_sequence_;
    }
    if (!dropping_) next_sequence_ = std::max(next_sequence_, sequence + batch.Count());
  }
  if (dropping_) {
    ++dropped_batches_;
  } else {
    ++batches_;
  }

  struct Counter final : rocksdb::WriteBatch::Handler {
    WalWatcher* self;
    uint64_t log;
    void Count(uint32_t cf) {
      const auto flushed = self->cf_log_number_.find(cf);
      // An entry in a WAL older than the family's log number is in its SST
      // files already.
      if (flushed != self->cf_log_number_.end() && log < flushed->second) return;
      const auto name = self->cf_name_.find(cf);
      auto& counts = self->dropping_ ? self->dropped_entries_ : self->entries_;
      ++counts[name == self->cf_name_.end() ? "#" + std::to_string(cf) : name->second];
    }
    rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice&, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice&,
                                  const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status MergeCF(uint32_t cf, const rocksdb::Slice&, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
  } counter;
  counter.self = this;
  counter.log = log_number;
  // Counting is best effort: a batch we cannot walk is still replayed.
  batch.Iterate(&counter).PermitUncheckedError();
  return dropping_ ? WalProcessingOption::kIgnoreCurrentRecord
                   : WalProcessingOption::kContinueProcessing;
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

}  // namespace

Status CheckOrphanTables(RawDb& db, const std::string& dir, const std::string& files_dir,
                         const std::vector<std::string>& orphans) {
  if (orphans.empty()) return Status::Ok();
  const AtSequence recovered(db.db().GetLatestSequenceNumber());
  std::vector<std::string> newer;
  for (const std::string& name : orphans) {
    rocksdb::SstFileReader reader(
        rocksdb::Options(MakeDbOptions(WalRecovery::kStrict), rocksdb::ColumnFamilyOptions()));
    if (!reader.Open(files_dir + "/" + name).ok()) continue;  // a torn output of a crash
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

std::string RocksDbSaid(const InfoLog& log) {
  std::vector<std::string> picked;
  for (const std::string& line : log.Notable()) {
    if (line.find(".log") != std::string::npos || line.find("MANIFEST") != std::string::npos ||
        line.find(".sst") != std::string::npos || line.find("dropping") != std::string::npos) {
      picked.push_back(line);
    }
  }
  if (picked.empty()) return "";
  // The last few are the ones that ended the open.
  if (picked.size() > 3) picked.erase(picked.begin(), picked.end() - 3);
  std::string s = " RocksDB said: ";
  for (size_t i = 0; i < picked.size(); ++i) s += (i ? " | " : "") + picked[i];
  return s + ".";
}

}  // namespace ztune::storage::internal
