// A damaged data directory through the real ztune-head binary:
// an experiment runs -> the head is killed (its commits only in the WAL) ->
// one byte of a WAL record in the middle flips -> the head refuses to start
// and says how to salvage; --check refuses too -> --salvage copies the
// directory aside and reports what it dropped -> --check says consistent and
// the head serves again.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/e2e/cluster.h"
#include "tests/storage/damage_util.h"

namespace ztune::e2e {
namespace {

namespace fs = std::filesystem;

TEST(StoreDamageE2ETest, HeadRefusesDamagedWalAndSalvageMakesItServeAgain) {
  LocalCluster cluster("store-damage");
  cluster.StartHead();
  cluster.StartWorker("a", 2);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const std::string spec = cluster.dir() + "/spec.json";
  std::ofstream(spec) << R"({"trainable": "quadratic", "param_space": {"lr": 0.1},
      "num_samples": 2, "stop": {"training_iteration": 60}})";
  auto r = cluster.Cli("submit " + spec, /*stdout_only=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string exp = r.out.substr(0, r.out.find_first_of(" \n"));
  r = cluster.Cli("wait " + exp + " --timeout 60");
  ASSERT_EQ(r.exit_code, 0) << r.out << cluster.Logs();
  cluster.head().Kill(SIGKILL);
  cluster.worker(0).Kill(SIGKILL);

  // The biggest WAL holds the run; flip a byte inside its middle record.
  std::string wal;
  for (const std::string& f : storage::testutil::FilesIn(cluster.data_dir(), ".log")) {
    if (wal.empty() || fs::file_size(f) > fs::file_size(wal)) wal = f;
  }
  ASSERT_FALSE(wal.empty());
  std::string bytes = storage::testutil::ReadAll(wal);
  const auto records = storage::testutil::LogRecords(bytes);
  // Commits group whatever arrived in one loop turn, so how many records the
  // run makes depends on the machine's load (13 seen under load, 40 idle);
  // the flipped one needs records after it to be mid-log, not a torn tail.
  ASSERT_GE(records.size(), 5u) << "the run's commits are not in the WAL";
  const auto& middle = records[records.size() / 2];
  bytes[middle.payload + (middle.end - middle.payload) / 2] ^= 0x10;
  storage::testutil::WriteAll(wal, bytes);

  const std::string head = std::string(ZTUNE_HEAD_BIN) + " --data-dir " + cluster.data_dir();
  r = e2e::Run("timeout 30 " + head +
               " --worker-endpoint tcp://127.0.0.1:* --client-endpoint tcp://127.0.0.1:*");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_TRUE(Contains(r.out, "data directory " + cluster.data_dir() + " is corrupt")) << r.out;
  EXPECT_TRUE(Contains(r.out, "checksum mismatch")) << r.out;
  EXPECT_TRUE(Contains(r.out, "--salvage")) << r.out;
  r = e2e::Run("timeout 30 " + head + " --check");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_TRUE(Contains(r.out, "is corrupt")) << r.out;

  r = e2e::Run("timeout 60 " + head + " --salvage");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Contains(r.out, "salvaged")) << r.out;
  EXPECT_TRUE(Contains(r.out, "copied, untouched, to " + cluster.data_dir() + ".damaged-"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "method: point-in-time")) << r.out;
  EXPECT_TRUE(Contains(r.out, "commits replayed")) << r.out;

  r = e2e::Run("timeout 60 " + head + " --check");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Contains(r.out, "consistent")) << r.out;
  r = e2e::Run("timeout 60 " + head + " --salvage");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Contains(r.out, "nothing to salvage")) << r.out;

  cluster.StartHead();
  Json experiments = cluster.CliJson("experiments");
  ASSERT_TRUE(experiments.is_object() || experiments.is_array()) << cluster.Logs();
  EXPECT_TRUE(Contains(experiments.dump(), exp)) << experiments.dump();
  for (const auto& entry : fs::directory_iterator(cluster.dir())) {
    if (Contains(entry.path().filename().string(), "data.damaged-")) fs::remove_all(entry.path());
  }
}

}  // namespace
}  // namespace ztune::e2e
