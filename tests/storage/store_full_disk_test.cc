// RocksDbStore on a full disk: the free-space reserve refuses a commit with
// ResourceExhausted before RocksDB can hit ENOSPC and changes nothing; a store
// on a full disk or in a read-only directory can still be opened read-only and
// verified (`ztune-head --check`). With a fake disk (the injectable probe)
// everywhere, and with a real small tmpfs where this process may mount one
// (root); otherwise those tests skip.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "storage/keys.h"
#include "storage/rocksdb_store.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::storage {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Incompressible, so that the WAL and the table files take what they hold.
std::string Random(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(&s[i], &r, 8);
  }
  return s;
}

class FakeDiskTest : public ::testing::Test {
 protected:
  RocksDbStoreOptions Options() {
    RocksDbStoreOptions o;
    o.min_free_bytes = 64 * kMiB;
    o.free_space_probe = [this](const std::string&) -> Result<uint64_t> {
      ++probes_;
      return free_;
    };
    o.clock = &clock_;
    return o;
  }

  TempDir tmp_;
  const std::string dir_ = tmp_.Sub("data");
  FakeClock clock_;
  uint64_t free_ = 10ull << 30;
  int probes_ = 0;
};

TEST_F(FakeDiskTest, CommitIsRefusedBeforeReserveIsCrossedAndChangesNothing) {
  auto opened = RocksDbStore::Open(dir_, Options());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  RocksDbStore& store = **opened;
  WriteBatch first;
  first.Put(Family::kMeta, "counter", "1");
  ASSERT_TRUE(store.Commit(first).ok());

  free_ = 64 * kMiB + 100 * 1024;  // the disk filled up meanwhile
  clock_.AdvanceMs(1000);
  WriteBatch big;
  big.Put(Family::kMeta, "counter", "2");
  big.Put(Family::kCheckpoints, CheckpointKey("t1", 1), std::string(200 * 1024, 'c'));
  const Status refused = store.Commit(big);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_TRUE(Contains(refused.message(), "data directory " + dir_)) << refused.message();
  EXPECT_TRUE(Contains(refused.message(), "nothing was written")) << refused.message();
  EXPECT_EQ(*store.Get(Family::kMeta, "counter"), "1");
  EXPECT_EQ(*store.Get(Family::kCheckpoints, CheckpointKey("t1", 1)), std::nullopt);

  WriteBatch small;
  small.Put(Family::kMeta, "counter", "3");
  EXPECT_TRUE(store.Commit(small).ok()) << "a batch that fits is still taken";

  free_ = 10ull << 30;  // space freed: the next commit goes through at once
  EXPECT_TRUE(store.Commit(big).ok());
  EXPECT_EQ(*store.Get(Family::kMeta, "counter"), "2");
}

TEST_F(FakeDiskTest, CommitsProbeTheDiskOncePerIntervalNotPerCommit) {
  auto opened = RocksDbStore::Open(dir_, Options());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const int after_open = probes_;  // the open's check, and the schema write's
  for (int i = 0; i < 50; ++i) {
    WriteBatch b;
    b.Put(Family::kResults, ResultKey("t1", i), "{}");
    ASSERT_TRUE((*opened)->Commit(b).ok());
    clock_.AdvanceMs(10);
  }
  EXPECT_EQ(probes_ - after_open, 0) << "500 ms and 50 small commits: the cached figure holds";
  clock_.AdvanceMs(500);
  WriteBatch b;
  b.Put(Family::kResults, ResultKey("t1", 50), "{}");
  ASSERT_TRUE((*opened)->Commit(b).ok());
  EXPECT_EQ(probes_ - after_open, 1);
}

TEST_F(FakeDiskTest, OpenIsRefusedOnFullDiskButReadOnlyOpenAndVerifyWork) {
  {
    auto opened = RocksDbStore::Open(dir_, Options());
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    WriteBatch b;
    b.Put(Family::kTrials, "t1", "{}");
    ASSERT_TRUE((*opened)->Commit(b).ok());
  }
  free_ = 10 * kMiB;
  auto refused = RocksDbStore::Open(dir_, Options());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(refused.status().message(), "--check")) << refused.status().message();

  auto checked = RocksDbStore::OpenReadOnly(dir_);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_TRUE((*checked)->read_only());
  EXPECT_TRUE((*checked)->Verify().ok());
  EXPECT_EQ(*(*checked)->Get(Family::kTrials, "t1"), "{}");
  WriteBatch b;
  b.Put(Family::kTrials, "t2", "{}");
  EXPECT_EQ((*checked)->Commit(b).code(), StatusCode::kFailedPrecondition);
}

TEST_F(FakeDiskTest, ReadOnlyOpenIsUnavailableWhileStoreIsHeld) {
  auto held = RocksDbStore::Open(dir_, Options());
  ASSERT_TRUE(held.ok());
  auto checked = RocksDbStore::OpenReadOnly(dir_);
  EXPECT_EQ(checked.status().code(), StatusCode::kUnavailable) << checked.status().ToString();
}

// A tmpfs of `size` mounted on a fresh directory, unmounted at the end. Only
// root may mount; ok() is false otherwise.
class Tmpfs {
 public:
  explicit Tmpfs(const std::string& size) {
    fs::create_directories(tmp_.Sub("mnt"));
    const std::string options = "size=" + size;
    ok_ = ::mount("tmpfs", path().c_str(), "tmpfs", 0, options.c_str()) == 0;
    error_ = ok_ ? "" : std::strerror(errno);
  }
  ~Tmpfs() {
    if (ok_) ::umount2(path().c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string path() const { return tmp_.Sub("mnt"); }
  bool RemountReadOnly() {
    return ::mount("tmpfs", path().c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  TempDir tmp_;
  bool ok_ = false;
  std::string error_;
};

TEST(RealFullDiskTest, ReserveRefusesFirstAndRocksDbOwnEnospcIsAStatusNotAnAbort) {
  Tmpfs disk("24m");
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (" << disk.error() << ")";
  const std::string dir = disk.path() + "/data";
  uint64_t committed = 0;
  {
    RocksDbStoreOptions o;
    o.min_free_bytes = 4 * kMiB;
    o.free_space_recheck_ms = 0;  // a real probe at every commit: exact
    auto opened = RocksDbStore::Open(dir, o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    Status s;
    for (; committed < 128; ++committed) {
      WriteBatch b;
      b.Put(Family::kResults, ResultKey("t1", committed), Random(kMiB / 2, committed));
      s = (*opened)->Commit(b);
      if (!s.ok()) break;
    }
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "min_free_bytes")) << s.message();
    EXPECT_GT(committed, 5u);
    EXPECT_EQ(*(*opened)->Get(Family::kResults, ResultKey("t1", committed)), std::nullopt);
    EXPECT_TRUE((*opened)->Verify().ok());
  }
  {
    // Without the reserve RocksDB runs into ENOSPC itself: a status, never an
    // abort (RocksDB's own info logger used to abort on the next log line).
    // The open itself may be what runs out (its WAL replay flushes the
    // memtables into table files); either way it is a status.
    RocksDbStoreOptions o;
    o.min_free_bytes = 0;
    auto opened = RocksDbStore::Open(dir, o);
    Status s = opened.status();
    for (uint64_t i = committed; s.ok() && i < committed + 128; ++i) {
      WriteBatch b;
      b.Put(Family::kResults, ResultKey("t1", i), Random(kMiB / 2, i));
      s = (*opened)->Commit(b);
    }
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "No space left on device")) << s.message();
  }
  // --check on the full disk.
  auto checked = RocksDbStore::OpenReadOnly(dir);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_TRUE((*checked)->Verify().ok());
  EXPECT_EQ(*(*checked)->Get(Family::kResults, ResultKey("t1", 0)), Random(kMiB / 2, 0));
  EXPECT_EQ(RocksDbStore::Open(dir).status().code(), StatusCode::kResourceExhausted);
}

TEST(ReadOnlyDirectoryTest, StoreCanBeOpenedReadOnlyAndVerified) {
  // Root ignores file modes, so for root the directory is a tmpfs remounted
  // read-only; anyone else gets a chmod 0555 directory.
  std::unique_ptr<Tmpfs> disk;
  std::unique_ptr<TempDir> tmp;
  std::string dir;
  if (::geteuid() == 0) {
    disk = std::make_unique<Tmpfs>("16m");
    if (!disk->ok()) GTEST_SKIP() << "root, but cannot mount a tmpfs (" << disk->error() << ")";
    dir = disk->path() + "/data";
  } else {
    tmp = std::make_unique<TempDir>();
    dir = tmp->Sub("data");
  }
  {
    RocksDbStoreOptions o;
    o.min_free_bytes = kMiB;
    auto opened = RocksDbStore::Open(dir, o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    WriteBatch b;
    b.Put(Family::kTrials, "t1", "{}");
    ASSERT_TRUE((*opened)->Commit(b).ok());
  }
  if (disk) {
    ASSERT_TRUE(disk->RemountReadOnly()) << std::strerror(errno);
  } else {
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                             fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec);
  }
  auto checked = RocksDbStore::OpenReadOnly(dir);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_TRUE((*checked)->Verify().ok());
  EXPECT_EQ(*(*checked)->Get(Family::kTrials, "t1"), "{}");
  checked->reset();
  auto writable = RocksDbStore::Open(dir);
  EXPECT_FALSE(writable.ok()) << "opened a read-only directory for writing";
  if (!disk) fs::permissions(dir, fs::perms::owner_all);  // so TempDir can remove it
}

}  // namespace
}  // namespace ztune::storage
