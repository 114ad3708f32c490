// Trial schedulers through the real binaries: ASHA stopping most of a
// quadratic search early while its best trial runs to max_t, ASHA's
// decisions surviving kill -9 of the head, and synchronous HyperBand pausing
// trials at their milestones and resuming the survivors of each halving
// from their memory checkpoints, and PBT improving on FIFO with every exploit
// in the trial's lineage, its decisions surviving kill -9 of the head.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

// Starts `cluster`'s head and two workers, "a" and "b", of `cpus` CPUs each,
// and waits until both are registered.
::testing::AssertionResult StartTwoWorkers(LocalCluster& cluster, int cpus) {
  cluster.StartHead();
  cluster.StartWorker("a", cpus);
  cluster.StartWorker("b", cpus);
  if (!cluster.WaitForWorkers(2)) return ::testing::AssertionFailure() << cluster.Logs();
  return ::testing::AssertionSuccess();
}

// The quadratic trainable's loss after i steps: (x0 (1 - 2 lr)^i)^2.
double ClosedFormLoss(double lr, double x0, int64_t i) {
  const double x = x0 * std::pow(1 - 2 * lr, static_cast<double>(i));
  return x * x;
}

// The trial of `trials` whose lr is closest to 0.5, where the quadratic's
// loss falls fastest: at any fixed iteration it has the lowest loss.
std::string BestLrTrial(const Json& trials) {
  std::string best;
  double distance = 1e9;
  for (const Json& t : trials) {
    const double lr = t["config"]["lr"].get<double>();
    if (std::fabs(1 - 2 * lr) < distance) {
      distance = std::fabs(1 - 2 * lr);
      best = t["trial_id"];
    }
  }
  return best;
}

// `ztune status EXP` names `expected` as the best trial, at iteration 27,
// with the closed-form loss of its lr there.
void ExpectBestTrialAt27(LocalCluster& cluster, const std::string& exp,
                         const std::string& expected) {
  const Json status = cluster.CliJson("status " + exp);
  ASSERT_TRUE(status.is_object()) << cluster.Logs();
  ASSERT_TRUE(status["experiments"].is_array() && status["experiments"].size() == 1u)
      << status.dump();
  const Json& best = status["experiments"][0]["best_trial"];
  ASSERT_TRUE(best.is_object()) << status.dump();
  EXPECT_EQ(best["trial_id"], expected) << status.dump();
  EXPECT_EQ(best["iteration"], 27);
  const double lr = best["config"]["lr"].get<double>();
  EXPECT_NEAR(best["value"].get<double>(), ClosedFormLoss(lr, 10, 27),
              1e-9 * std::max(1.0, ClosedFormLoss(lr, 10, 27)));
}

// 16 trials, lr log-uniform, ASHA (rf 3, rungs 1, 3, 9, max_t 27) on 2
// workers x 2 CPUs. At a fixed iteration the loss only grows with
// |1 - 2 lr|, so the trial with the best lr is best at every rung it reaches
// and is never stopped: it runs to max_t, is the experiment's best trial,
// and its final loss is the closed form at 27.
TEST(SchedulerE2ETest, AshaStopsMostTrialsEarlyAndTheBestLrRunsToMaxT) {
  LocalCluster cluster("asha");
  ASSERT_TRUE(StartTwoWorkers(cluster, 2));
  const std::string exp = SubmitSpec(cluster, R"({
    "name": "e2e-asha", "trainable": "quadratic",
    "param_space": {"lr": {"loguniform": [0.001, 0.45]}, "x0": 10},
    "num_samples": 16, "seed": 11, "metric": "loss", "mode": "min",
    "scheduler": {"type": "asha", "grace_period": 1, "max_t": 27, "reduction_factor": 3}})",
                                     "asha");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();

  const Json trials = TrialsOf(cluster, exp);
  ASSERT_EQ(trials.size(), 16u);
  int stopped_early = 0;
  for (const Json& t : trials) {
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    const int64_t iteration = IterationOf(t);
    EXPECT_GE(iteration, 1);
    EXPECT_LE(iteration, 27) << "nothing runs past max_t: " << t.dump();
    if (iteration < 27) ++stopped_early;
  }
  EXPECT_GE(stopped_early, 8) << trials.dump();
  const std::string best_lr_trial = BestLrTrial(trials);
  ExpectBestTrialAt27(cluster, exp, best_lr_trial);

  // What ASHA recorded is shown with the trial: the best trial at the rungs
  // 1, 3 and 9 from its results, and at 27 from its completion.
  const Json doc = GetTrial(cluster, best_lr_trial);
  ASSERT_TRUE(doc["scheduler"].is_object()) << doc.dump();
  ASSERT_EQ(doc["scheduler"]["rungs"].size(), 4u) << doc.dump();
  EXPECT_EQ(doc["scheduler"]["rungs"][3][0], 27.0);
}

// Runs `spec` on a head and one worker of one CPU (so trials run one after
// another, in a fixed order). With `crash`, the head is killed with -9 once
// trial `crash_trial` (its index) has reached iteration `crash_iteration`
// and not ended (running, or paused by PBT between its turns: a turn of two
// 30 ms steps could pass unseen by a poller on a loaded machine), and
// started again on the same data dir. Returns the experiment id
// once it finished ("" if it could not be submitted).
std::string RunSequentially(LocalCluster& cluster, const std::string& spec, const std::string& name,
                            bool crash, int crash_trial, int64_t crash_iteration) {
  cluster.StartHead({"--reattach-grace-ms", "10000"});
  cluster.StartWorker("a", 1);
  EXPECT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, spec, name);
  if (exp.empty()) return exp;
  if (crash) {
    const std::string victim = TrialId(exp, crash_trial);
    EXPECT_TRUE(WaitUnderwayAt(cluster, victim, crash_iteration, std::chrono::seconds(30)))
        << cluster.Logs();
    cluster.head().Kill(SIGKILL);
    cluster.StartHead({"--reattach-grace-ms", "10000"});
  }
  EXPECT_TRUE(WaitFinished(cluster, exp, 120)) << cluster.Logs();
  return exp;
}

// Eight trials one after another (one worker, one CPU), grid order; the
// head is killed with -9 while the fifth trial runs and restarted on the
// same data dir. Every trial stops where a run without the crash stops it.
std::map<std::string, int64_t> RunSequentialAsha(bool crash) {
  LocalCluster cluster(crash ? "asha-crash" : "asha-reference");
  const std::string exp = RunSequentially(cluster, R"({
    "name": "e2e-asha-restart", "trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.1, 0.02, 0.3, 0.01, 0.2, 0.05, 0.4, 0.03]},
                    "x0": 10, "step_sleep_s": 0.05},
    "metric": "loss", "mode": "min",
    "scheduler": {"type": "asha", "grace_period": 1, "max_t": 9, "reduction_factor": 3}})",
                                          "asha", crash, /*crash_trial=*/4, /*crash_iteration=*/2);
  if (exp.empty()) return {};
  std::map<std::string, int64_t> stops;
  for (const Json& t : TrialsOf(cluster, exp)) {
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    stops[t["config"]["lr"].dump()] = IterationOf(t);
  }
  return stops;
}

TEST(SchedulerE2ETest, AshaDecidesTheSameAfterTheHeadIsKilled) {
  const std::map<std::string, int64_t> reference = RunSequentialAsha(/*crash=*/false);
  ASSERT_EQ(reference.size(), 8u);
  int stopped_early = 0;
  for (const auto& [lr, iteration] : reference) stopped_early += iteration < 9;
  ASSERT_GE(stopped_early, 3) << "the run must exercise stops";
  EXPECT_EQ(RunSequentialAsha(/*crash=*/true), reference);
}

// 17 trials under HyperBand (max_t 27, eta 3: brackets of (4, 27), (6, 9),
// (12, 3) trials and first milestones) on 2 workers x 2 CPUs. The brackets
// fill in trial order, so whatever the timing: bracket 0's 4 trials run to
// 27; bracket 1 keeps ceil(6/3) = 2 at 9, which run to 27; bracket 2 holds 7
// trials, keeps 4 at 3 and 2 of those at 9. The loss at a fixed iteration
// grows with |1 - 2 lr|, so the best lr survives every halving and is the
// experiment's best trial.
TEST(SchedulerE2ETest, HyperBandResumesTheSurvivorsOfEachHalvingFromMemoryCheckpoints) {
  LocalCluster cluster("hyperband");
  ASSERT_TRUE(StartTwoWorkers(cluster, 2));
  const std::string exp = SubmitSpec(cluster, R"({
    "name": "e2e-hyperband", "trainable": "quadratic",
    "param_space": {"lr": {"loguniform": [0.001, 0.45]}, "x0": 10},
    "num_samples": 17, "seed": 5, "metric": "loss", "mode": "min",
    "scheduler": {"type": "hyperband", "max_t": 27, "reduction_factor": 3}})",
                                     "hyperband");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 90)) << cluster.Logs();

  const Json trials = TrialsOf(cluster, exp);
  ASSERT_EQ(trials.size(), 17u);
  std::map<int64_t, int> by_iteration;
  for (const Json& t : trials) {
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    by_iteration[IterationOf(t)]++;
  }
  EXPECT_EQ(by_iteration, (std::map<int64_t, int>{{3, 3}, {9, 6}, {27, 8}})) << trials.dump();

  // The survivors of a halving that had paused at its milestone went on from
  // their memory checkpoints: bracket 1 keeps 2 of 6 and bracket 2 4 of 7,
  // and at most one per halving is the trial whose result completed it (it
  // never paused), so at least 1 + 3 restored. A restored trial's loss is
  // the closed form at its iteration, as if it had never stopped.
  int restored = 0;
  for (const Json& t : trials) {
    const Json doc = GetTrial(cluster, t["trial_id"]);
    ASSERT_TRUE(doc["scheduler"].is_object()) << doc.dump();
    const double lr = doc["config"]["lr"].get<double>();
    const int64_t iteration = IterationOf(doc);
    EXPECT_NEAR(doc["last_result"]["loss"].get<double>(), ClosedFormLoss(lr, 10, iteration),
                1e-9 * std::max(1.0, ClosedFormLoss(lr, 10, iteration)))
        << doc.dump();
    if (doc["num_restores"].get<int64_t>() == 0) continue;
    ++restored;
    EXPECT_GT(doc["scheduler"]["bracket"].get<int64_t>(), 0) << "bracket 0 never halves";
    EXPECT_LT(doc["last_result"]["iterations_since_restore"].get<int64_t>(), iteration)
        << "restored from a checkpoint, not from scratch: " << doc.dump();
  }
  EXPECT_GE(restored, 4) << trials.dump();
  ExpectBestTrialAt27(cluster, exp, BestLrTrial(trials));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// 8 trials with small learning rates (log-uniform in [0.001, 0.05]: after 24
// steps most are far from the minimum) on 2 workers, with actor reuse. PBT
// every 4 iterations lets the worst quarter clone the best quarter's state
// and explore its lr; the same search under FIFO keeps the poor ones. PBT's
// median final loss must be lower. Every exploit is in the trial's lineage
// (`ztune trial`), and a clone goes on from the donor's iteration with its
// new lr: its results are 1..24 once each, and after the clone each step
// shrinks x by (1 - 2 lr) of the new config.
TEST(SchedulerE2ETest, PbtImprovesOnFifoAndEveryExploitIsInTheLineage) {
  LocalCluster cluster("pbt");
  ASSERT_TRUE(StartTwoWorkers(cluster, 1));
  const std::string common = R"("trainable": "quadratic",
    "param_space": {"lr": {"loguniform": [0.001, 0.05]}, "x0": 10, "step_sleep_s": 0.002},
    "num_samples": 8, "seed": 3, "metric": "loss", "mode": "min", "reuse_actors": true,
    "stop": {"training_iteration": 24})";
  const std::string pbt = SubmitSpec(cluster, "{" + common + R"(, "name": "e2e-pbt",
    "scheduler": {"type": "pbt", "time_attr": "training_iteration", "perturbation_interval": 4,
                  "hyperparam_mutations": {"lr": {"loguniform": [0.001, 0.45]}}}})",
                                     "pbt");
  ASSERT_FALSE(pbt.empty());
  ASSERT_TRUE(WaitFinished(cluster, pbt, 120)) << cluster.Logs();
  const std::string fifo = SubmitSpec(cluster, "{" + common + R"(, "name": "e2e-fifo"})", "fifo");
  ASSERT_FALSE(fifo.empty());
  ASSERT_TRUE(WaitFinished(cluster, fifo, 120)) << cluster.Logs();

  auto final_losses = [&](const std::string& exp) {
    std::vector<double> out;
    for (const Json& t : TrialsOf(cluster, exp)) {
      EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
      EXPECT_EQ(IterationOf(t), 24) << t.dump();
      out.push_back(t["last_result"]["loss"].get<double>());
    }
    return out;
  };
  const double pbt_median = Median(final_losses(pbt));
  const double fifo_median = Median(final_losses(fifo));
  std::cout << "median final loss: PBT " << pbt_median << ", FIFO " << fifo_median << "\n";
  EXPECT_LT(pbt_median, fifo_median);

  int exploited = 0;
  for (const Json& t : TrialsOf(cluster, pbt)) {
    const std::string id = t["trial_id"];
    const Json doc = GetTrial(cluster, id);
    const Json& lineage = doc["exploits"];
    ASSERT_TRUE(lineage.is_array()) << doc.dump();
    EXPECT_EQ(doc["scheduler"]["exploits"].get<size_t>(), lineage.size()) << doc.dump();
    ExpectResultsOneToN(cluster, id, 24);
    if (lineage.empty()) continue;
    ++exploited;
    for (const Json& x : lineage) {
      EXPECT_NE(x["donor"], id);
      EXPECT_EQ(x["donor_iteration"].get<int64_t>() % 4, 0) << x.dump();
      EXPECT_EQ(x["iteration"].get<int64_t>() % 4, 0) << x.dump();
    }
    const Json& last = lineage.back();
    EXPECT_EQ(doc["config"], last["new_config"]) << doc.dump();
    // `ztune trial ID` shows the lineage: who was cloned, at which iteration.
    const auto shown = cluster.Cli("trial " + id, /*stdout_only=*/true);
    EXPECT_NE(shown.out.find("lineage (PBT exploits, oldest first):"), std::string::npos)
        << shown.out;
    EXPECT_NE(shown.out.find(last["donor"].get<std::string>()), std::string::npos) << shown.out;
    EXPECT_NE(shown.out.find("lr "), std::string::npos) << shown.out;
    const double lr = last["new_config"]["lr"].get<double>();
    const Json results = cluster.CliJson("results " + id)["results"];
    for (int64_t i = last["donor_iteration"].get<int64_t>() + 2; i <= 24; ++i) {
      const double before = results[i - 2]["x"].get<double>();
      const double after = results[i - 1]["x"].get<double>();
      EXPECT_NEAR(after, before * (1 - 2 * lr), 1e-9 * std::max(1.0, std::fabs(before)))
          << id << " at " << i;
    }
  }
  EXPECT_GE(exploited, 2) << "at least the worst quarter was exploited";
}

// Synchronous PBT: 6 trials on 2 workers x 1 CPU, sync points at iterations 4
// and 8 of 12. Every trial waits at each sync point until all six are there,
// so each sync clones exactly the bottom ceil(6 x 0.25) = 2 trials from a top
// trial's checkpoint at that same iteration: 4 clones in all, each at 4 or 8.
TEST(SchedulerE2ETest, SynchronousPbtClonesTheBottomAtEachSyncPoint) {
  LocalCluster cluster("pbt-synch");
  ASSERT_TRUE(StartTwoWorkers(cluster, 1));
  const std::string exp = SubmitSpec(cluster, R"({"name": "e2e-pbt-synch", "trainable": "quadratic",
    "param_space": {"lr": {"loguniform": [0.001, 0.05]}, "x0": 10, "step_sleep_s": 0.002},
    "num_samples": 6, "seed": 4, "metric": "loss", "mode": "min", "reuse_actors": true,
    "stop": {"training_iteration": 12},
    "scheduler": {"type": "pbt", "time_attr": "training_iteration", "perturbation_interval": 4,
                  "synch": true, "hyperparam_mutations": {"lr": {"loguniform": [0.001, 0.45]}}}})",
                                     "pbt-synch");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 120)) << cluster.Logs();
  int clones = 0;
  for (const Json& t : TrialsOf(cluster, exp)) {
    const std::string id = t["trial_id"];
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    EXPECT_EQ(IterationOf(t), 12) << t.dump();
    ExpectResultsOneToN(cluster, id, 12);
    const Json doc = GetTrial(cluster, id);
    EXPECT_EQ(doc["scheduler"]["sync"], 12) << doc.dump();
    for (const Json& x : doc["exploits"]) {
      ++clones;
      EXPECT_NE(x["donor"], id);
      EXPECT_EQ(x["iteration"], x["donor_iteration"]) << x.dump();
      EXPECT_TRUE(x["iteration"] == 4 || x["iteration"] == 8) << x.dump();
    }
  }
  EXPECT_EQ(clones, 4);
}

// Six trials one after another (one worker, one CPU), grid order, PBT every
// 2 iterations to 8; the head is killed with -9 once the fourth trial is
// under way and restarted on the same data dir. The exploits (who, when, whom, the
// explored config) and the final configs equal those of a run without the
// crash.
Json RunSequentialPbt(bool crash) {
  LocalCluster cluster(crash ? "pbt-crash" : "pbt-reference");
  const std::string exp = RunSequentially(cluster, R"({
    "name": "e2e-pbt-restart", "trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.01, 0.3, 0.02, 0.2, 0.05, 0.1]},
                    "x0": 10, "step_sleep_s": 0.03},
    "metric": "loss", "mode": "min", "reuse_actors": true, "seed": 4,
    "scheduler": {"type": "pbt", "time_attr": "training_iteration", "perturbation_interval": 2,
                  "hyperparam_mutations": {"lr": {"uniform": [0.001, 0.45]}}},
    "stop": {"training_iteration": 8}})",
                                          "pbt", crash, /*crash_trial=*/3, /*crash_iteration=*/1);
  if (exp.empty()) return Json();
  Json out = Json::array();
  for (const Json& t : TrialsOf(cluster, exp)) {
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    const Json doc = GetTrial(cluster, t["trial_id"]);
    Json lineage = Json::array();
    for (const Json& x : doc["exploits"]) {
      lineage.push_back(Json{{"iteration", x["iteration"]},
                             {"donor", x["donor"]},
                             {"donor_iteration", x["donor_iteration"]},
                             {"new_config", x["new_config"]}});
    }
    out.push_back(Json{{"trial", t["trial_id"]},
                       {"iteration", IterationOf(t)},
                       {"config", doc["config"]},
                       {"lineage", lineage}});
  }
  return out;
}

TEST(SchedulerE2ETest, PbtExploitsTheSameAfterTheHeadIsKilled) {
  const Json reference = RunSequentialPbt(/*crash=*/false);
  ASSERT_EQ(reference.size(), 6u);
  size_t exploits = 0;
  for (const Json& t : reference) exploits += t["lineage"].size();
  ASSERT_GE(exploits, 2u) << "the run must exploit: " << reference.dump();
  EXPECT_EQ(RunSequentialPbt(/*crash=*/true), reference);
}

}  // namespace
}  // namespace ztune::e2e
