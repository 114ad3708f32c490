// Head crash recovery through the real binaries.
#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

// head killed with -9 mid-run -> restarted on the same data dir -> the workers
// re-register with their live actors -> every trial continues on its actor
// (attempt 1, no restore) and stores iterations 1..60 exactly once.
TEST(RecoveryE2ETest, HeadKilledMidRunReattachesLiveActors) {
  LocalCluster cluster("head-kill");
  cluster.StartHead({"--reattach-grace-ms", "10000"});
  cluster.StartWorker("a", 2);
  cluster.StartWorker("b", 2);
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  std::string spec = cluster.dir() + "/spec.json";
  std::ofstream(spec) << R"({"trainable": "sleep", "num_samples": 4,
      "param_space": {"sleep_s": 0.02}, "stop": {"training_iteration": 60},
      "checkpoint": {"frequency": 10}})";
  auto r = cluster.Cli("submit " + spec, /*stdout_only=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.out << cluster.Logs();
  std::string exp = r.out.substr(0, r.out.find_first_of(" \n"));
  ASSERT_TRUE(WaitFor([&] {
    Json trials = TrialsOf(cluster, exp);
    if (trials.size() != 4) return false;
    for (const auto& t : trials) {
      if (t["status"] != "RUNNING" || t["iteration"].get<int64_t>() < 12) return false;
    }
    return true;
  })) << cluster.Logs();

  cluster.head().Kill(SIGKILL);
  cluster.StartHead({"--reattach-grace-ms", "10000"});
  r = cluster.Cli("wait " + exp + " --timeout 60");
  ASSERT_EQ(r.exit_code, 0) << r.out << cluster.Logs();

  for (const auto& t : TrialsOf(cluster, exp)) {
    const std::string id = t["trial_id"];
    EXPECT_EQ(t["status"], "TERMINATED") << id;
    EXPECT_EQ(t["attempt"], 1) << id << cluster.Logs();
    EXPECT_EQ(t["num_restores"], 0) << id;
    EXPECT_EQ(t["num_failures"], 0) << id;
    Json results = cluster.CliJson("results " + id);
    ASSERT_EQ(results["results"].size(), 60u) << id;
    for (int64_t i = 1; i <= 60; ++i) {
      EXPECT_EQ(results["results"][i - 1]["training_iteration"], i) << id;
    }
  }
  Json workers = cluster.CliJson("workers");
  for (const auto& w : workers["workers"]) {
    if (w["alive"].get<bool>()) {
      EXPECT_EQ(w["resources_available"]["CPU"], 2) << w.dump();
    }
  }
}

// head killed while no worker comes back -> trials restart from checkpoints
// on a new worker once the grace period is over.
TEST(RecoveryE2ETest, TrialsOfAWorkerThatNeverReturnsRestartFromCheckpoints) {
  LocalCluster cluster("head-kill-lost");
  cluster.StartHead({"--reattach-grace-ms", "500"});
  cluster.StartWorker("a", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  std::string spec = cluster.dir() + "/spec.json";
  std::ofstream(spec) << R"({"trainable": "sleep", "param_space": {"sleep_s": 0.02},
      "stop": {"training_iteration": 40}, "checkpoint": {"frequency": 5}})";
  auto r = cluster.Cli("submit " + spec, /*stdout_only=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::string exp = r.out.substr(0, r.out.find_first_of(" \n"));
  ASSERT_TRUE(WaitFor([&] {
    Json trials = TrialsOf(cluster, exp);
    return trials.size() == 1 && trials[0]["iteration"].get<int64_t>() >= 12;
  })) << cluster.Logs();
  cluster.head().Kill(SIGKILL);
  cluster.worker(0).Kill(SIGKILL);
  cluster.StartHead({"--reattach-grace-ms", "500"});
  cluster.StartWorker("b", 1);
  r = cluster.Cli("wait " + exp + " --timeout 60");
  ASSERT_EQ(r.exit_code, 0) << r.out << cluster.Logs();
  Json t = TrialsOf(cluster, exp)[0];
  EXPECT_EQ(t["status"], "TERMINATED");
  EXPECT_EQ(t["attempt"], 2);
  EXPECT_EQ(t["num_restores"], 1);
  Json results = cluster.CliJson("results " + t["trial_id"].get<std::string>());
  ASSERT_EQ(results["results"].size(), 40u);
  for (int64_t i = 1; i <= 40; ++i) EXPECT_EQ(results["results"][i - 1]["training_iteration"], i);
}

}  // namespace
}  // namespace ztune::e2e
