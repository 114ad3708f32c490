// RocksDbStore beyond the conformance suite: reopen, the Open error table of
// docs/storage.md, corruption detection, the directory lock, Verify.
#include "storage/rocksdb_store.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "storage/keys.h"
#include "storage/rocksdb_internal.h"
#include "tests/fakes/file_damage.h"
#include "tests/storage/damage_util.h"
#include "tests/storage/child_process.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::unique_ptr<RocksDbStore> OpenOrDie(const std::string& dir) {
  auto r = RocksDbStore::Open(dir);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

void CommitOrDie(Store& store, const WriteBatch& b) {
  const Status s = store.Commit(b);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The largest file in `dir` whose name ends in `ext`, or "" if none.
std::string LargestFile(const std::string& dir, const std::string& ext) {
  std::string best;
  uintmax_t best_size = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < ext.size() || name.compare(name.size() - ext.size(), ext.size(), ext) != 0) {
      continue;
    }
    if (e.file_size() >= best_size) {
      best_size = e.file_size();
      best = e.path().string();
    }
  }
  return best;
}

// Writes `batch` into a store in `dir`, then closes and reopens it once so the
// WAL is flushed into SST (and blob) files, and closes again.
void WriteAndFlush(const std::string& dir, const WriteBatch& batch) {
  {
    auto store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    CommitOrDie(*store, batch);
  }
  auto store = OpenOrDie(dir);  // WAL recovery writes the memtables to L0
  ASSERT_NE(store, nullptr);
}

// A raw RocksDB store with the given column families (besides "default"),
// each holding the given key/value if non-empty.
void MakeRawRocksDb(const std::string& dir, const std::vector<std::string>& families,
                    const std::string& key, const std::string& value) {
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (const std::string& f : families) descriptors.emplace_back(f, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir, descriptors, &handles, &db).ok());
  if (!key.empty()) {
    for (rocksdb::ColumnFamilyHandle* h : handles) {
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), h, key, value).ok());
    }
  }
  for (rocksdb::ColumnFamilyHandle* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  ASSERT_TRUE(db->Close().ok());
  delete db;
}

std::vector<std::string> RawFamilies(const std::string& dir) {
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir, &names).ok());
  std::sort(names.begin(), names.end());
  return names;
}

// A store in `dir` whose schema record says `schema`.
void CreateWithSchema(const std::string& dir, const std::string& schema) {
  auto store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  WriteBatch b;
  b.Put(Family::kMeta, kMetaSchema, schema);
  CommitOrDie(*store, b);
}

class RocksDbStoreTest : public ::testing::Test {
 protected:
  TempDir tmp_;
  const std::string dir_ = tmp_.Sub("data");
};

// Bytes in the store's WAL files. RocksDB deletes obsolete ones in the
// background: one gone between the listing and its size counts nothing.
uint64_t WalBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const std::string& wal : testutil::FilesIn(dir, ".log")) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(wal, ec);
    if (!ec) bytes += size;
  }
  return bytes;
}

// A crash replays the whole WAL before the head serves. The experiments family
// is written rarely: its one unflushed entry in the oldest WAL file must not
// keep every later file alive while trial records are rewritten (a 256 MiB
// bound let 240 MB pile up, half a second of replay; docs/benchmarks.md).
TEST_F(RocksDbStoreTest, WalStaysWithinItsBoundWhileAFamilyIsRarelyWritten) {
  using internal::kKiB;
  using internal::kMaxTotalWalBytes;
  using internal::kMiB;
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  WriteBatch first;
  first.Put(Family::kExperiments, "e0001", "rarely written");
  CommitOrDie(*store, first);
  const std::string value = RandomBytes(64 * kKiB, 1);  // incompressible
  const uint64_t batch_bytes = 4 * kMiB;
  for (uint64_t written = 0; written < 3 * kMaxTotalWalBytes; written += batch_bytes) {
    WriteBatch b;
    for (uint64_t i = 0; i < batch_bytes / value.size(); ++i) {
      b.Put(Family::kTrials, "t" + std::to_string(i), value);
    }
    CommitOrDie(*store, b);
  }
  // Over the bound, RocksDB flushes the families holding the oldest file and
  // then deletes the files no family needs, in the background: what remains
  // is at most the files whose flush is still running (up to the bound) and
  // the live one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t wal = WalBytes(dir_);
  while (wal > 2 * kMaxTotalWalBytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    wal = WalBytes(dir_);
  }
  EXPECT_LE(wal, 2 * kMaxTotalWalBytes) << "written: " << 3 * kMaxTotalWalBytes;
}

// What the newest OPTIONS file of `dir` says of disable_auto_compactions for
// the results family: RocksDB writes one at every open and every SetOptions.
std::string ResultsCompactionsDisabled(const std::string& dir) {
  const std::vector<std::string> files = testutil::FilesIn(dir, "OPTIONS-");
  if (files.empty()) return "no OPTIONS file";
  const std::string text = testutil::ReadAll(files.back());
  const size_t section = text.find("[CFOptions \"results\"]");
  if (section == std::string::npos) return "no results section";
  const std::string key = "disable_auto_compactions=";
  const size_t at = text.find(key, section);
  if (at == std::string::npos) return "no disable_auto_compactions";
  return text.substr(at + key.size(), text.find('\n', at) - at - key.size());
}

// A head restarting on a store a crash left with level-0 files to merge must
// not spend a core compacting while it loads its trials: defer_compactions
// holds RocksDB's compactions back until ResumeCompactions. (RocksDB keeps
// the open's WAL filter and reads it again when SetOptions writes an OPTIONS
// file: ResumeCompactions crashed until the filter outlived the open.)
TEST_F(RocksDbStoreTest, DefersCompactionsUntilResumed) {
  RocksDbStoreOptions deferred;
  deferred.defer_compactions = true;
  // Six clean stops, each flushing one more results table file: over
  // RocksDB's level-0 trigger (4), so a normal open would compact them.
  for (int i = 0; i < 6; ++i) {
    auto store = RocksDbStore::Open(dir_, deferred);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    WriteBatch b;
    for (int k = 0; k < 100; ++k) {
      b.Put(Family::kResults, ResultKey("t" + std::to_string(k), i), RandomBytes(200, i * 100 + k));
    }
    CommitOrDie(**store, b);
  }
  auto opened = RocksDbStore::Open(dir_, deferred);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<RocksDbStore> store = std::move(opened).value();
  EXPECT_EQ(ResultsCompactionsDisabled(dir_), "true");
  const size_t tables = testutil::FilesIn(dir_, ".sst").size();
  ASSERT_TRUE(store->ResumeCompactions().ok());
  EXPECT_EQ(ResultsCompactionsDisabled(dir_), "false");
  EXPECT_TRUE(store->ResumeCompactions().ok()) << "a second call is a no-op";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (testutil::FilesIn(dir_, ".sst").size() >= tables &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LT(testutil::FilesIn(dir_, ".sst").size(), tables) << "no compaction after resuming";
  uint64_t results = 0;
  ASSERT_TRUE(store
                  ->Scan(Family::kResults, "",
                         [&](std::string_view, std::string_view) {
                           ++results;
                           return true;
                         })
                  .ok());
  EXPECT_EQ(results, 600u);
  WriteBatch more;
  more.Put(Family::kMeta, "after", "resume");
  CommitOrDie(*store, more);
  store.reset();

  // Without the option (what the tools that open a store use) and read-only:
  // nothing is deferred, and resuming is a no-op.
  auto normal = OpenOrDie(dir_);
  ASSERT_NE(normal, nullptr);
  EXPECT_EQ(ResultsCompactionsDisabled(dir_), "false");
  EXPECT_TRUE(normal->ResumeCompactions().ok());
  normal.reset();
  auto read_only = RocksDbStore::OpenReadOnly(dir_);
  ASSERT_TRUE(read_only.ok()) << read_only.status().ToString();
  EXPECT_TRUE((*read_only)->ResumeCompactions().ok());
}

TEST_F(RocksDbStoreTest, KeepsDataWhenStoreIsDestroyedAndReopened) {
  const std::string checkpoint = RandomBytes(300 * 1024, 1);  // a blob
  {
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    WriteBatch b;
    b.Put(Family::kExperiments, "e1", R"({"name":"e1"})");
    b.Put(Family::kTrials, "t1", R"({"status":"RUNNING"})");
    for (uint64_t i = 1; i <= 300; ++i) {
      b.Put(Family::kResults, ResultKey("t1", i),
            "{\"training_iteration\":" + std::to_string(i) + "}");
    }
    b.Put(Family::kCheckpoints, CheckpointKey("t1", 1), checkpoint);
    CommitOrDie(*store, b);
  }
  for (int round = 0; round < 2; ++round) {  // 2nd round reads flushed SST/blob files
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(*store->Get(Family::kMeta, kMetaSchema), std::to_string(kSchemaVersion));
    EXPECT_EQ(*store->Get(Family::kExperiments, "e1"), R"({"name":"e1"})");
    EXPECT_EQ(*store->Get(Family::kTrials, "t1"), R"({"status":"RUNNING"})");
    EXPECT_EQ(*store->Get(Family::kCheckpoints, CheckpointKey("t1", 1)), checkpoint);
    uint64_t expected = 1;
    ASSERT_TRUE(store
                    ->Scan(Family::kResults, TrialPrefix("t1"),
                           [&](std::string_view k, std::string_view) {
                             EXPECT_EQ(KeySuffixNumber(k), expected);
                             ++expected;
                             return true;
                           })
                    .ok());
    EXPECT_EQ(expected, 301u);
    const Status verified = store->Verify();
    EXPECT_TRUE(verified.ok()) << verified.ToString();
  }
}

TEST_F(RocksDbStoreTest, CreatesDirectoryAndSchemaWhenDirectoryIsMissing) {
  const std::string nested = tmp_.Sub("a/b/c");
  auto store = OpenOrDie(nested);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(fs::exists(nested + "/CURRENT"));
  EXPECT_EQ(*store->Get(Family::kMeta, kMetaSchema), std::to_string(kSchemaVersion));
  EXPECT_EQ(store->dir(), nested);
}

TEST_F(RocksDbStoreTest, InitializesStoreWhenDirectoryIsEmpty) {
  fs::create_directories(dir_);
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->Get(Family::kMeta, kMetaSchema), std::to_string(kSchemaVersion));
  store.reset();
  EXPECT_EQ(RawFamilies(dir_), (std::vector<std::string>{"checkpoints", "default", "experiments",
                                                         "meta", "results", "trials"}));
}

TEST_F(RocksDbStoreTest, RefusesDirectoryWhenItHoldsOtherFiles) {
  fs::create_directories(dir_ + "/sub");
  std::ofstream(dir_ + "/notes.txt") << "my thesis";
  std::ofstream(dir_ + "/sub/data.bin") << RandomBytes(100, 2);

  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status().message(), "not a ztune data directory"))
      << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), dir_)) << r.status().ToString();
  // Untouched.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"notes.txt", "sub"}));
  std::ifstream in(dir_ + "/notes.txt");
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "my thesis");
}

TEST_F(RocksDbStoreTest, RefusesPathWhenItIsARegularFile) {
  std::ofstream(dir_) << "x";
  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
}

TEST_F(RocksDbStoreTest, RefusesStoreWhenCurrentFileIsMissing) {
  // A damaged store must never be re-created as an empty one.
  {
    auto store = OpenOrDie(dir_);
    ASSERT_NE(store, nullptr);
    WriteBatch b;
    b.Put(Family::kTrials, "t1", "x");
    CommitOrDie(*store, b);
  }
  fs::remove(dir_ + "/CURRENT");
  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ + "/CURRENT"));
}

TEST_F(RocksDbStoreTest, RefusesForeignRocksDbWhenItHasNoMetaFamily) {
  MakeRawRocksDb(dir_, {"users"}, "k", "v");
  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status().message(), "not a ztune data directory"))
      << r.status().ToString();
  EXPECT_EQ(RawFamilies(dir_), (std::vector<std::string>{"default", "users"}));  // untouched
}

TEST_F(RocksDbStoreTest, RefusesRocksDbWhenMetaHasNoSchemaButDataExists) {
  MakeRawRocksDb(dir_, {"meta", "trials"}, "k", "v");
  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status().message(), "schema")) << r.status().ToString();
  EXPECT_EQ(RawFamilies(dir_), (std::vector<std::string>{"default", "meta", "trials"}));
}

TEST_F(RocksDbStoreTest, FinishesInitializationWhenCreationWasInterrupted) {
  // What a crash between creating the families and writing the schema leaves.
  MakeRawRocksDb(dir_, {"meta", "experiments", "trials", "results", "checkpoints"}, "", "");
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->Get(Family::kMeta, kMetaSchema), std::to_string(kSchemaVersion));
}

TEST_F(RocksDbStoreTest, RefusesStoreWhenSchemaIsNewer) {
  CreateWithSchema(dir_, "99");
  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status().message(), "store schema 99 is newer than this ztune (supports " +
                                                 std::to_string(kSchemaVersion) + ")"))
      << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "upgrade ztune")) << r.status().ToString();
}

// A store of an older schema opens as it is (the head migrates its records
// when it loads them): its schema record is left alone.
TEST_F(RocksDbStoreTest, OpensAStoreOfAnOlderSchemaUnchanged) {
  CreateWithSchema(dir_, "1");
  auto r = RocksDbStore::Open(dir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*(*r)->Get(Family::kMeta, kMetaSchema), "1");
}

TEST_F(RocksDbStoreTest, ReportsCorruptionWhenSchemaIsUnreadable) {
  for (const char* bad : {"abc", "", "1x", "0", "-3"}) {
    TempDir tmp;
    CreateWithSchema(tmp.path(), bad);
    auto r = RocksDbStore::Open(tmp.path());
    ASSERT_FALSE(r.ok()) << "schema '" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  }
}

TEST_F(RocksDbStoreTest, OpenReportsCorruptionWhenTrialsSstIsDamaged) {
  WriteBatch b;
  for (int i = 0; i < 400; ++i)
    b.Put(Family::kTrials, "t" + std::to_string(i), RandomBytes(1000, i));
  WriteAndFlush(dir_, b);
  const std::string sst = LargestFile(dir_, ".sst");
  ASSERT_FALSE(sst.empty());
  testing::DamageMiddle(sst);

  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok()) << "a damaged store opened";
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), dir_ + " is corrupt")) << r.status().ToString();

  // Told that its caller reads the family itself (the head's start), the
  // open leaves it to that read, whose error is as clear.
  RocksDbStoreOptions head_like;
  head_like.read_trials_at_open = false;
  auto opened = RocksDbStore::Open(dir_, head_like);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const Status scanned =
      (*opened)->Scan(Family::kTrials, "", [](std::string_view, std::string_view) { return true; });
  EXPECT_EQ(scanned.code(), StatusCode::kCorruption) << scanned.ToString();
  EXPECT_TRUE(Contains(scanned.message(), dir_ + " is corrupt (scan of trials)"))
      << scanned.ToString();
  EXPECT_TRUE(Contains(scanned.message(), "`ztune-head --data-dir " + dir_ + " --salvage`"))
      << scanned.ToString();
}

TEST_F(RocksDbStoreTest, VerifyAndReadsReportCorruptionWhenResultsSstIsDamaged) {
  // Results are not read at Open (they grow without bound); Verify finds the
  // damage and reads of the damaged block fail loudly instead of looking empty.
  WriteBatch b;
  for (uint64_t i = 0; i < 400; ++i)
    b.Put(Family::kResults, ResultKey("t1", i), RandomBytes(1000, i));
  WriteAndFlush(dir_, b);
  const std::string sst = LargestFile(dir_, ".sst");
  ASSERT_FALSE(sst.empty());
  testing::DamageMiddle(sst);

  auto r = RocksDbStore::Open(dir_);
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    return;
  }
  RocksDbStore& store = **r;
  const Status verified = store.Verify();
  EXPECT_EQ(verified.code(), StatusCode::kCorruption) << verified.ToString();
  EXPECT_TRUE(Contains(verified.message(), dir_)) << verified.ToString();

  int corrupt_reads = 0;
  for (uint64_t i = 0; i < 400; ++i) {
    auto got = store.Get(Family::kResults, ResultKey("t1", i));
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kCorruption) << got.status().ToString();
      ++corrupt_reads;
    } else {
      EXPECT_EQ(*got, RandomBytes(1000, i)) << "iteration " << i;  // never absent or wrong
    }
  }
  EXPECT_GT(corrupt_reads, 0);
  const Status scanned = store.Scan(Family::kResults, TrialPrefix("t1"),
                                    [](std::string_view, std::string_view) { return true; });
  EXPECT_EQ(scanned.code(), StatusCode::kCorruption) << scanned.ToString();
}

TEST_F(RocksDbStoreTest, VerifyAndReadsReportCorruptionWhenBlobIsDamaged) {
  WriteBatch b;
  // Three 1 MiB checkpoints: the middle of the blob file is inside the second.
  for (uint64_t i = 0; i < 3; ++i) {
    b.Put(Family::kCheckpoints, CheckpointKey("t1", i), RandomBytes(1 << 20, i));
  }
  WriteAndFlush(dir_, b);
  const std::string blob = LargestFile(dir_, ".blob");
  ASSERT_FALSE(blob.empty()) << "checkpoints did not go to a blob file";
  testing::DamageMiddle(blob);

  auto r = RocksDbStore::Open(dir_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  RocksDbStore& store = **r;
  const Status verified = store.Verify();
  EXPECT_EQ(verified.code(), StatusCode::kCorruption) << verified.ToString();

  int corrupt_reads = 0;
  for (uint64_t i = 0; i < 3; ++i) {
    auto got = store.Get(Family::kCheckpoints, CheckpointKey("t1", i));
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kCorruption) << got.status().ToString();
      ++corrupt_reads;
    } else {
      EXPECT_EQ(*got, RandomBytes(1 << 20, i)) << "checkpoint " << i;
    }
  }
  EXPECT_EQ(corrupt_reads, 1);
}

TEST_F(RocksDbStoreTest, OpenFailsWhenManifestIsDamaged) {
  WriteBatch b;
  for (int i = 0; i < 50; ++i) b.Put(Family::kTrials, "t" + std::to_string(i), "x");
  WriteAndFlush(dir_, b);
  std::string path;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) path = e.path().string();
  }
  ASSERT_FALSE(path.empty());
  testing::DamageMiddle(path);

  auto r = RocksDbStore::Open(dir_);
  ASSERT_FALSE(r.ok()) << "a store with a damaged MANIFEST opened";
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
}

TEST_F(RocksDbStoreTest, SecondOpenIsUnavailableWhenStoreIsOpenInThisProcess) {
  auto first = OpenOrDie(dir_);
  ASSERT_NE(first, nullptr);
  auto second = RocksDbStore::Open(dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_TRUE(Contains(second.status().message(), "is in use by another process"))
      << second.status().ToString();
  first.reset();
  EXPECT_NE(OpenOrDie(dir_), nullptr);
}

TEST_F(RocksDbStoreTest, OpenIsUnavailableWhenAnotherProcessHoldsTheStore) {
  {
    testutil::ChildProcess holder({"hold", dir_});
    ASSERT_GT(holder.pid(), 0);
    const std::optional<std::string> line = holder.ReadLine(std::chrono::milliseconds(10000));
    ASSERT_EQ(line, "ready");

    auto r = RocksDbStore::Open(dir_);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), dir_ + " is in use by another process"))
        << r.status().ToString();
  }  // kills the holder; the kernel releases its lock
  EXPECT_NE(OpenOrDie(dir_), nullptr);
}

TEST_F(RocksDbStoreTest, ApproximateCountTracksNumberOfKeys) {
  auto store = OpenOrDie(dir_);
  ASSERT_NE(store, nullptr);
  WriteBatch b;
  for (uint64_t i = 0; i < 1000; ++i) b.Put(Family::kResults, ResultKey("t1", i), "{}");
  CommitOrDie(*store, b);
  auto n = store->ApproximateCount(Family::kResults);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_NEAR(static_cast<double>(*n), 1000.0, 100.0);
  auto trials = store->ApproximateCount(Family::kTrials);
  ASSERT_TRUE(trials.ok());
  EXPECT_EQ(*trials, 0u);
}

}  // namespace
}  // namespace ztune::storage
