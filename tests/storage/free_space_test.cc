// FreeSpaceGuard with a fake disk and a fake clock: when it refuses, and that
// it probes the file system only as often as its recheck settings say.
// Also the CRC32C that salvage uses to check blob records.
#include "storage/free_space.h"

#include <gtest/gtest.h>

#include <string>

#include "storage/blob_file_scan.h"

namespace ztune::storage {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class FreeSpaceGuardTest : public ::testing::Test {
 protected:
  FreeSpaceProbe Probe() {
    return [this](const std::string& dir) -> Result<uint64_t> {
      EXPECT_EQ(dir, "/data");
      ++calls_;
      if (fail_) return Status::IOError("statvfs failed");
      return free_;
    };
  }

  FakeClock clock_;
  uint64_t free_ = 100 * kMiB;
  bool fail_ = false;
  int calls_ = 0;
};

TEST_F(FreeSpaceGuardTest, RefusesWhenWriteWouldCrossReserve) {
  FreeSpaceGuard guard("/data", 10 * kMiB, 1000, 16 * kMiB, Probe(), clock_);
  EXPECT_TRUE(guard.Reserve(5 * kMiB).ok());
  free_ = 12 * kMiB;
  clock_.AdvanceMs(1000);
  EXPECT_TRUE(guard.Reserve(2 * kMiB).ok());  // exactly the reserve remains
  const Status refused = guard.Reserve(2 * kMiB + 1);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find("/data"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("min_free_bytes"), std::string::npos) << refused.message();
}

TEST_F(FreeSpaceGuardTest, ProbesOncePerIntervalWhenCommitsAreSmall) {
  FreeSpaceGuard guard("/data", 10 * kMiB, 1000, 16 * kMiB, Probe(), clock_);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(guard.Reserve(1000).ok());
    guard.Wrote(1000);
    clock_.AdvanceMs(5);
  }
  EXPECT_EQ(calls_, 1);  // 500 ms, 100 kB: the cached figure holds
  clock_.AdvanceMs(500);
  ASSERT_TRUE(guard.Reserve(1000).ok());
  EXPECT_EQ(calls_, 2);
}

TEST_F(FreeSpaceGuardTest, ReprobesWhenBytesWrittenReachRecheckBytes) {
  FreeSpaceGuard guard("/data", 10 * kMiB, 60000, 16 * kMiB, Probe(), clock_);
  ASSERT_TRUE(guard.Reserve(kMiB).ok());
  guard.Wrote(kMiB);
  ASSERT_TRUE(guard.Reserve(14 * kMiB).ok());
  EXPECT_EQ(calls_, 1);
  guard.Wrote(14 * kMiB);
  ASSERT_TRUE(guard.Reserve(kMiB).ok());  // 16 MiB since the probe
  EXPECT_EQ(calls_, 2);
}

TEST_F(FreeSpaceGuardTest, SubtractsWrittenBytesBetweenProbes) {
  free_ = 20 * kMiB;
  FreeSpaceGuard guard("/data", 10 * kMiB, 60000, 1000 * kMiB, Probe(), clock_);
  ASSERT_TRUE(guard.Reserve(kMiB).ok());
  guard.Wrote(8 * kMiB);  // the estimate is now 12 MiB; the disk says 20
  free_ = 11 * kMiB;      // someone else wrote too
  const Status refused = guard.Reserve(3 * kMiB);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(calls_, 2) << "the estimate said no, so the disk was asked before refusing";
}

TEST_F(FreeSpaceGuardTest, AcceptsAgainWhenSpaceIsFreed) {
  free_ = 10 * kMiB;
  FreeSpaceGuard guard("/data", 10 * kMiB, 60000, 1000 * kMiB, Probe(), clock_);
  EXPECT_EQ(guard.Reserve(1).code(), StatusCode::kResourceExhausted);
  free_ = 50 * kMiB;
  EXPECT_TRUE(guard.Reserve(1).ok()) << "a refusal re-probes; no waiting for the interval";
}

TEST_F(FreeSpaceGuardTest, ReportsProbeFailureAsIOError) {
  fail_ = true;
  FreeSpaceGuard guard("/data", 10 * kMiB, 1000, 16 * kMiB, Probe(), clock_);
  EXPECT_EQ(guard.Reserve(1).code(), StatusCode::kIOError);
}

TEST_F(FreeSpaceGuardTest, NeverProbesWhenReserveIsZero) {
  free_ = 0;
  FreeSpaceGuard guard("/data", 0, 1000, 16 * kMiB, Probe(), clock_);
  EXPECT_TRUE(guard.Reserve(1 << 30).ok());
  EXPECT_TRUE(guard.CheckNow().ok());
  EXPECT_EQ(calls_, 0);
}

TEST(StatvfsFreeBytesTest, MeasuresTmpAndFailsOnMissingPath) {
  Result<uint64_t> tmp = StatvfsFreeBytes("/tmp");
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  EXPECT_GT(*tmp, 0u);
  EXPECT_EQ(StatvfsFreeBytes("/nonexistent/ztune").status().code(), StatusCode::kIOError);
}

TEST(Crc32cTest, MatchesKnownValuesAndRocksDbMask) {
  // The standard CRC-32C check value, and RocksDB's crc32c_test expectations.
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(0, zeros.data(), zeros.size()), 0x8a9136aau);
  // Extend(Value(a), b) == Value(a + b)
  EXPECT_EQ(Crc32c(Crc32c(0, "hello ", 6), "world", 5), Crc32c(0, "hello world", 11));
  EXPECT_NE(MaskCrc(0x12345678u), 0x12345678u);
}

}  // namespace
}  // namespace ztune::storage
