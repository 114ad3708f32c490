// child commits batches in a loop -> SIGKILL at a varied moment -> reopen:
// every batch is whole or absent, and every batch reported committed is there.
//
// SIGKILL kills the process, not the machine, so this checks WriteBatch
// atomicity across families and WAL recovery after an abrupt stop; that a
// returned Commit survives power loss rests on WriteOptions::sync (one WAL
// fsync per Commit), which a test cannot observe without a fault-injecting
// filesystem.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "storage/rocksdb_store.h"
#include "tests/storage/child_process.h"
#include "tests/fakes/temp_dir.h"

namespace ztune::storage {
namespace {

using std::chrono::milliseconds;

constexpr int kKeysPerBatch = 50;

// Parses "b<N>_<k>" into N; -1 if the key has another shape.
long BatchOf(std::string_view key) {
  if (key.size() < 2 || key[0] != 'b') return -1;
  const size_t underscore = key.find('_');
  if (underscore == std::string_view::npos) return -1;
  return std::stol(std::string(key.substr(1, underscore - 1)));
}

struct KillPlan {
  int commits_before_kill;  // reports to read before the kill
  int extra_delay_us;       // then wait this long, so the kill lands mid-batch
};

class CrashAtomicityTest : public ::testing::TestWithParam<KillPlan> {};

TEST_P(CrashAtomicityTest, BatchesAreWholeOrAbsentWhenWriterIsKilled) {
  const KillPlan plan = GetParam();
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("db");

  long max_reported = -1;
  {
    testutil::ChildProcess child({"commit-loop", dir, std::to_string(kKeysPerBatch)});
    ASSERT_GT(child.pid(), 0);
    for (int i = 0; i < plan.commits_before_kill; ++i) {
      const std::optional<std::string> line = child.ReadLine(milliseconds(10000));
      ASSERT_TRUE(line.has_value()) << "child stopped reporting after " << i << " commits";
      ASSERT_EQ(line->rfind("error", 0), std::string::npos) << *line;
      max_reported = std::stol(*line);
    }
    if (plan.extra_delay_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(plan.extra_delay_us));
    child.Kill();
    const int status = child.Wait();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "wait status " << status;
    // Reports written before the kill count too: each followed a returned Commit.
    while (const std::optional<std::string> line = child.ReadLine(milliseconds(1000))) {
      ASSERT_EQ(line->rfind("error", 0), std::string::npos) << *line;
      max_reported = std::stol(*line);
    }
  }
  ASSERT_GE(max_reported, plan.commits_before_kill - 1);

  auto opened = RocksDbStore::Open(dir);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  RocksDbStore& store = **opened;

  auto counter = store.Get(Family::kMeta, "counter");
  ASSERT_TRUE(counter.ok()) << counter.status().ToString();
  ASSERT_TRUE(counter->has_value())
      << "no batch survived although " << max_reported + 1 << " were reported committed";
  const long last = std::stol(**counter);
  EXPECT_GE(last, max_reported) << "a batch reported as committed is missing";

  // Count the keys of every batch found, across both families it wrote.
  std::map<long, int> keys_per_batch;
  for (Family f : {Family::kResults, Family::kTrials}) {
    const Status s = store.Scan(f, "", [&](std::string_view k, std::string_view v) {
      const long n = BatchOf(k);
      EXPECT_GE(n, 0) << "unexpected key " << k;
      const std::string expected = "v" + std::string(k.substr(1)) + std::string(100, '.');
      EXPECT_EQ(v, expected) << "key " << k;
      ++keys_per_batch[n];
      return true;
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Batches 0..last are complete; nothing of a later (torn) batch exists.
  ASSERT_EQ(keys_per_batch.size(), static_cast<size_t>(last + 1))
      << "batches found: " << keys_per_batch.size() << ", counter says " << last + 1;
  for (const auto& [n, count] : keys_per_batch) {
    EXPECT_LE(n, last) << "batch " << n << " present beyond the counter";
    EXPECT_EQ(count, kKeysPerBatch) << "batch " << n << " is partial";
  }
}

INSTANTIATE_TEST_SUITE_P(KillMoments, CrashAtomicityTest,
                         ::testing::Values(KillPlan{1, 0}, KillPlan{2, 150}, KillPlan{5, 400},
                                           KillPlan{13, 50}, KillPlan{30, 900}, KillPlan{60, 0}),
                         [](const ::testing::TestParamInfo<KillPlan>& info) {
                           return "After" + std::to_string(info.param.commits_before_kill) +
                                  "CommitsPlus" + std::to_string(info.param.extra_delay_us) + "us";
                         });

}  // namespace
}  // namespace ztune::storage
