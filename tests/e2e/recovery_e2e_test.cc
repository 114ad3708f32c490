// Head crash recovery through the real binaries.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "storage/keys.h"
#include "storage/rocksdb_store.h"
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

// A store written by a ztune of schema 1 (a trial's checkpoint records and
// error_log inside its record) -> a head of schema 2 starts on it, moves them
// to records of their own in its first commit and writes schema 2; the
// client sees the same checkpoints and errors, and --check finds the store
// consistent.
TEST(RecoveryE2ETest, AHeadMigratesASchemaOneStore) {
  LocalCluster cluster("schema-1");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 2)) << cluster.Logs();
  // Each trial fails once at iteration 3 and retries from its checkpoint.
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "fail", "num_samples": 2,
      "param_space": {"fail_at": 3}, "max_failures": 1,
      "stop": {"training_iteration": 6}, "checkpoint": {"frequency": 2}})",
                                     "fail");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  std::map<std::string, Json> before;
  for (const auto& t : TrialsOf(cluster, exp)) before[t["trial_id"]] = t;
  ASSERT_EQ(before.size(), 2u);
  for (const auto& [id, t] : before) {
    ASSERT_EQ(t["error_log"].size(), 1u) << t.dump();
    ASSERT_EQ(t["checkpoints"].size(), 3u) << t.dump();
  }
  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  cluster.worker(0).Stop();

  {  // Written back as schema 1 would have written it.
    auto store = storage::RocksDbStore::Open(cluster.data_dir());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    storage::WriteBatch b;
    for (const auto& [id, doc] : before) {
      auto record = (*store)->Get(storage::Family::kTrials, id);
      ASSERT_TRUE(record.ok() && record->has_value()) << id;
      Json j = Json::parse(**record);
      j["checkpoints"] = Json::array();
      j["error_log"] = Json::array();
      ASSERT_TRUE((*store)
                      ->Scan(storage::Family::kTrials, storage::TrialPrefix(id),
                             [&](std::string_view k, std::string_view v) {
                               auto parts = storage::ParseTrialChildKey(k);
                               if (!parts) return true;
                               Json child = Json::parse(v);
                               if (parts->kind == storage::kTrialCheckpointRecord) {
                                 j["checkpoints"].push_back(child);
                               } else {
                                 j["error_log"].push_back(child["entry"]);
                               }
                               b.Delete(storage::Family::kTrials, std::string(k));
                               return true;
                             })
                      .ok());
      b.Put(storage::Family::kTrials, id, j.dump());
    }
    b.Put(storage::Family::kMeta, storage::kMetaSchema, "1");
    ASSERT_TRUE((*store)->Commit(b).ok());
  }

  cluster.StartHead();
  std::map<std::string, Json> after;
  for (const auto& t : TrialsOf(cluster, exp)) after[t["trial_id"]] = t;
  for (const auto& [id, t] : before) {
    EXPECT_EQ(after[id]["checkpoints"], t["checkpoints"]) << id;
    EXPECT_EQ(after[id]["error_log"], t["error_log"]) << id;
    EXPECT_EQ(after[id]["status"], "TERMINATED") << id;
  }
  ASSERT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
  auto check = e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_EQ(check.exit_code, 0) << check.out;
  auto store = storage::RocksDbStore::OpenReadOnly(cluster.data_dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(*(*store)->Get(storage::Family::kMeta, storage::kMetaSchema),
            std::to_string(storage::kSchemaVersion));
  for (const auto& [id, t] : before) {
    Json record = Json::parse(**(*store)->Get(storage::Family::kTrials, id));
    EXPECT_FALSE(record.contains("checkpoints")) << id;
    EXPECT_FALSE(record.contains("error_log")) << id;
  }
}

}  // namespace
}  // namespace ztune::e2e
