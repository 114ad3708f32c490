// The runner with an experiment's own scheduler (ASHA, median stopping,
// HyperBand, PBT), on the fake fleet and
// a fake clock: the trials ASHA stops and where, by hand computation; its
// state stored with each trial; the same decisions after a head crash; and
// results that lack what the scheduler judges by.
#include <cmath>
#include <map>
#include <string>

#include "head/store_check.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

// Four trials on one 1-CPU worker, so they run one after another in grid
// order. The fake trainable's loss is 100 (1 - 2 lr)^(2i); ASHA minimises it
// with rf 2 (the cutoff is the median of what a rung recorded) and rungs at
// 1, 2, 4, 8 (max_t). Signed values are -loss:
//   lr 0.1  : -64 at 1, -40.96 at 2, -16.78 at 4: never stopped by a rung;
//             stopped at max_t 8 (stop_last_trials).
//   lr 0.05 : -81 at rung 1 < cutoff -64: stopped at 1.
//   lr 0.3  : -16 > -72.5 at 1, -2.56 > -40.96 at 2, -0.066 > -16.78 at 4:
//             stopped at 8.
//   lr 0.01 : -96.04 < median(-64, -81, -16) = -64: stopped at 1.
constexpr char kAshaSpec[] = R"({"trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.1, 0.05, 0.3, 0.01]}},
    "metric": "loss", "mode": "min",
    "scheduler": {"type": "asha", "grace_period": 1, "max_t": 8, "reduction_factor": 2},
    "stop": {"training_iteration": 100}})";

class TrialRunnerSchedulerTest : public TrialRunnerTest {
 protected:
  // The stored record of trial `k` of `exp`.
  Json StoredRecord(const std::string& exp, size_t k) {
    const TrialId id = runner_->FindExperiment(exp)->trial_ids[k];
    auto stored = store_.Get(storage::Family::kTrials, id.str());
    EXPECT_TRUE(stored.ok() && stored->has_value()) << id;
    return stored.ok() && stored->has_value() ? Json::parse(**stored) : Json();
  }
  // Final iteration of every trial, by lr.
  std::map<double, int64_t> StopIterations(const std::string& exp) {
    std::map<double, int64_t> out;
    for (const TrialId& id : runner_->FindExperiment(exp)->trial_ids) {
      const Trial* t = runner_->FindTrial(id);
      EXPECT_EQ(t->status, TrialStatus::kTerminated) << id;
      out[t->config["lr"].get<double>()] = t->iteration;
    }
    return out;
  }
  static std::map<double, int64_t> Expected() { return {{0.1, 8}, {0.05, 1}, {0.3, 8}, {0.01, 1}}; }

  // Registers `workers` workers of 1 CPU, submits `spec`, runs `crash_after`
  // turns and then (when > 0) kills the head with -9 and re-registers the
  // workers with the new one, and runs the experiment to its end. Returns
  // the experiment's id.
  std::string RunWithCrash(const char* spec, int crash_after, int workers = 1,
                           int max_turns = 2000) {
    for (int w = 1; w <= workers; ++w) fleet_->Register(WorkerId("w" + std::to_string(w)), 1);
    const std::string exp = Submit(spec);
    for (int i = 0; i < crash_after; ++i) {
      fleet_->Turn();
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
    }
    if (crash_after > 0) {
      EXPECT_FALSE(runner_->FindExperiment(exp)->finished) << "the crash comes mid-run";
      CrashHead();
      for (int w = 1; w <= workers; ++w) fleet_->Reregister(WorkerId("w" + std::to_string(w)), 1);
    }
    RunToEnd(exp, max_turns);
    return exp;
  }
};

TEST_F(TrialRunnerSchedulerTest, AshaStopsTheTrialsAHandComputationSays) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(kAshaSpec);
  RunToEnd(exp);
  EXPECT_EQ(StopIterations(exp), Expected());
  // No result past a stop is stored.
  const TrialId second = runner_->FindExperiment(exp)->trial_ids[1];
  EXPECT_EQ(StoredResults(second).size(), 1u);
}

// The values ASHA recorded are stored with each trial: the first trial's at
// rungs 1, 2, 4 from its results and at 8 from its completion.
TEST_F(TrialRunnerSchedulerTest, AshaStateIsStoredWithTheTrial) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(kAshaSpec);
  RunToEnd(exp);
  const Json state = StoredRecord(exp, 0).at("scheduler");
  EXPECT_EQ(state.at("bracket"), 0);
  const Json& rungs = state.at("rungs");
  ASSERT_EQ(rungs.size(), 4u) << state.dump();
  const double expected[][2] = {{1, 64}, {2, 40.96}, {4, 16.777216}, {8, 2.81474976710656}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rungs[i][0].get<double>(), expected[i][0]);
    EXPECT_NEAR(rungs[i][1].get<double>(), -expected[i][1], 1e-9) << state.dump();
  }
}

// kill -9 of the head after each turn of the run in turn (the run takes 20
// turns): the restarted head rebuilds ASHA from the stored
// trials, and the trials stop where the uninterrupted run stops them.
class AshaCrashTest : public TrialRunnerSchedulerTest, public ::testing::WithParamInterface<int> {};

TEST_P(AshaCrashTest, AshaDecidesTheSameAfterAHeadCrash) {
  EXPECT_EQ(StopIterations(RunWithCrash(kAshaSpec, GetParam())), Expected());
}

INSTANTIATE_TEST_SUITE_P(EveryTurn, AshaCrashTest, ::testing::Range(1, 20));

TEST_F(TrialRunnerSchedulerTest, AResultWithoutTheSchedulersMetricFailsTheTrialNamingIt) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 1,
      "scheduler": {"type": "asha", "metric": "accuracy", "mode": "max"},
      "stop": {"training_iteration": 5}})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kError);
  EXPECT_NE(t->error.find("no 'accuracy'"), std::string::npos) << t->error;
  EXPECT_NE(t->error.find("scheduler asha"), std::string::npos) << t->error;
  EXPECT_NE(t->error.find("loss"), std::string::npos) << "lists the keys reported: " << t->error;
  EXPECT_EQ(t->iteration, 0) << "nothing of the refused result is stored";
}

// A damaged scheduler state in a stored trial stops the restarted head with
// Corruption naming the trial, instead of deciding on garbage, and --check
// reports it.
TEST_F(TrialRunnerSchedulerTest, ADamagedStoredStateIsCorruptionAtLoad) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(kAshaSpec);
  RunToEnd(exp);
  const TrialId first = runner_->FindExperiment(exp)->trial_ids[0];
  Json record = StoredRecord(exp, 0);
  record["scheduler"]["bracket"] = 7;
  storage::WriteBatch damage;
  damage.Put(storage::Family::kTrials, first.str(), record.dump());
  ASSERT_TRUE(store_.Commit(damage).ok());
  TrialRunner again(store_, sink_, clock_, DefaultOptions());
  const Status loaded = again.Load();
  EXPECT_EQ(loaded.code(), StatusCode::kCorruption) << loaded.ToString();
  EXPECT_NE(loaded.message().find(first.str()), std::string::npos) << loaded.ToString();
  // `ztune-head --check` says so too, instead of calling the store consistent.
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_NE(report->ToText().find("asha state of trial " + first.str()), std::string::npos)
      << report->ToText();
}

// Median stopping on the same four trials: with one slot, a trial that has
// no peer at its time yet yields to the waiting ones at every result (Ray's
// time slicing: PAUSE with a memory checkpoint, queued again), so the trials
// take turns; a trial whose best loss is worse than the median of the
// others' running means is stopped. Iterations 1..6, grace 1.
constexpr char kMedianSpec[] = R"({"trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.1, 0.05, 0.3, 0.01]}},
    "metric": "loss", "mode": "min",
    "scheduler": {"type": "median_stopping", "time_attr": "training_iteration",
                  "grace_period": 1, "min_samples_required": 1},
    "stop": {"training_iteration": 6}})";

class MedianStoppingRunnerTest : public TrialRunnerSchedulerTest {
 protected:
  // Runs the experiment to its end, with a head crash after turn
  // `crash_after` (0: none); the final iteration of each trial by lr.
  std::map<double, int64_t> Run(int crash_after) {
    return StopIterations(RunWithCrash(kMedianSpec, crash_after));
  }
};

TEST_F(MedianStoppingRunnerTest, TrialsTakeTurnsAndTheWorstAreStopped) {
  const std::map<double, int64_t> stops = Run(0);
  EXPECT_EQ(stops.at(0.3), 6) << "the best lr runs to the end";
  int stopped_early = 0;
  for (const auto& [lr, iteration] : stops) stopped_early += iteration < 6;
  EXPECT_GE(stopped_early, 1);
  EXPECT_GT(fleet_->saves, 0) << "trials yielded with memory checkpoints";
}

// The run without a crash, on a fixture of its own (its own store, fleet
// and clock).
std::map<double, int64_t> MedianReference() {
  struct Reference : MedianStoppingRunnerTest {
    void TestBody() override {}
    using MedianStoppingRunnerTest::Run;
  };
  static const std::map<double, int64_t> reference = Reference().Run(0);
  return reference;
}

class MedianStoppingCrashTest : public MedianStoppingRunnerTest,
                                public ::testing::WithParamInterface<int> {};

// kill -9 of the head after each turn of the run (16) in turn: the same
// trials stop at the same iterations as in the run without a crash. This
// needs a pause decided before the crash to be done after it (the trial's
// record keeps pause_requested while the pause is under way) and a trial a
// scheduler paused to keep its place behind the PENDING ones (it stays
// PAUSED at load); without either, the trials ran in another order after a
// crash at turn 2 and the rule stopped lr 0.1 at 3 instead of 2.
TEST_P(MedianStoppingCrashTest, DecidesTheSameAfterAHeadCrash) {
  EXPECT_EQ(Run(GetParam()), MedianReference());
}

INSTANTIATE_TEST_SUITE_P(EveryTurn, MedianStoppingCrashTest, ::testing::Range(1, 17));

// HyperBand with max_t 4 and eta 2 (3 brackets per band: (n0, r0) = (3, 4),
// (3, 2), (4, 1)) on six trials and two 1-CPU workers (so that a slot frees
// while a bracket waits and only its held-back paused trials are left to
// start). Losses are
// 100 (1 - 2 lr)^(2i):
//   bracket s=0 (lr 0.1, 0.05, 0.3) has no halving: each pauses at 4 until
//     the last gets there; then all three stop at 4.
//   bracket s=1 (lr 0.01, 0.2, 0.4) halves at 2 (losses 92.2, 12.96, 0.16):
//     keeps ceil(3/2) = 2; lr 0.01 stops at 2, lr 0.4 (the trigger) goes on
//     to 4 and pauses there; lr 0.2, paused at 2, is released, resumes from
//     its memory checkpoint and completes the bracket at 4.
constexpr char kHyperBandSpec[] = R"({"trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.1, 0.05, 0.3, 0.01, 0.2, 0.4]}},
    "metric": "loss", "mode": "min",
    "scheduler": {"type": "hyperband", "max_t": 4, "reduction_factor": 2},
    "result_buffer_length": 8,
    "stop": {"training_iteration": 100}})";

class HyperBandRunnerTest : public TrialRunnerSchedulerTest {
 protected:
  // Runs the experiment to its end, with a head crash after turn
  // `crash_after` (0: none); the final iteration of each trial by lr.
  std::map<double, int64_t> Run(int crash_after) {
    exp_ = RunWithCrash(kHyperBandSpec, crash_after, /*workers=*/2);
    return StopIterations(exp_);
  }
  static std::map<double, int64_t> Expected() {
    return {{0.1, 4}, {0.05, 4}, {0.3, 4}, {0.01, 2}, {0.2, 4}, {0.4, 4}};
  }
  std::string exp_;
};

TEST_F(HyperBandRunnerTest, PausedTrialsResumeFromMemoryCheckpointsAfterTheHalving) {
  EXPECT_EQ(Run(0), Expected());
  // lr 0.2 paused at 2 with a memory checkpoint and resumed from it: one
  // restore, and its results are 1..4 without a gap or a repeat.
  const TrialId released = runner_->FindExperiment(exp_)->trial_ids[4];
  EXPECT_EQ(runner_->FindTrial(released)->num_restores, 1);
  const std::vector<Json> results = StoredResults(released);
  ASSERT_EQ(results.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(results[i]["training_iteration"], i + 1);
  EXPECT_GT(fleet_->saves, 0) << "pauses took memory checkpoints";
  // Its bracket halved once: every trial of it stored that.
  for (size_t k = 3; k < 6; ++k) {
    EXPECT_EQ(StoredRecord(exp_, k).at("scheduler"),
              (Json{{"band", 0}, {"bracket", 1}, {"halvings", 1}}));
  }
  EXPECT_EQ(StoredRecord(exp_, 0).at("scheduler"),
            (Json{{"band", 0}, {"bracket", 0}, {"halvings", 0}}));
}

// Three trials, all in bracket s=0, on two workers: the first two pause at 4
// together, the third starts, and a slot stays free while the two paused
// trials wait for their bracket. They must not run again (each would pass 4
// and pause again); the bracket then stops all three at 4.
TEST_F(HyperBandRunnerTest, HeldBackTrialsDoNotStartWhileTheirBracketWaits) {
  fleet_->Register("w1", 1);
  fleet_->Register("w2", 1);
  exp_ = Submit(R"({"trainable": "quadratic",
      "param_space": {"lr": {"grid_search": [0.1, 0.05, 0.3]}},
      "metric": "loss", "mode": "min",
      "scheduler": {"type": "hyperband", "max_t": 4, "reduction_factor": 2}})");
  RunToEnd(exp_);
  EXPECT_EQ(StopIterations(exp_), (std::map<double, int64_t>{{0.1, 4}, {0.05, 4}, {0.3, 4}}));
  for (const TrialId& id : runner_->FindExperiment(exp_)->trial_ids) {
    EXPECT_EQ(runner_->FindTrial(id)->num_restores, 0) << id;
  }
}

class HyperBandCrashTest : public HyperBandRunnerTest, public ::testing::WithParamInterface<int> {};

// kill -9 of the head after each turn of the run in turn: paused trials lose
// their memory checkpoints (they run again from scratch, their stored
// results are not repeated), decided pauses and halvings hold, and the
// trials stop where the uninterrupted run stops them.
TEST_P(HyperBandCrashTest, DecidesTheSameAfterAHeadCrash) {
  EXPECT_EQ(Run(GetParam()), Expected());
}

INSTANTIATE_TEST_SUITE_P(EveryTurn, HyperBandCrashTest, ::testing::Range(1, 17));

// PBT on four trials and one 1-CPU worker (so the order of events is
// fixed): every 2 iterations a trial is ranked; the best checkpoints, the
// worst clones a best one (new lr, explored) and waits PAUSED; the others
// yield to the waiting ones. Actor reuse on: a clone gets a cached actor
// RESET with its new config.
constexpr char kPbtSpec[] = R"({"trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.01, 0.02, 0.05, 0.3]}},
    "metric": "loss", "mode": "min", "reuse_actors": true, "seed": 5,
    "scheduler": {"type": "pbt", "time_attr": "training_iteration",
                  "perturbation_interval": 2,
                  "hyperparam_mutations": {"lr": {"uniform": [0.001, 0.45]}}},
    "stop": {"training_iteration": 8}})";

class PbtRunnerTest : public TrialRunnerSchedulerTest {
 protected:
  // Runs the experiment to its end, with a head crash after turn
  // `crash_after` (0: none). Returns each trial's lineage and final config.
  Json Run(int crash_after, const char* spec = kPbtSpec) {
    exp_ = RunWithCrash(spec, crash_after, /*workers=*/1, /*max_turns=*/4000);
    Json out = Json::array();
    for (const TrialId& id : runner_->FindExperiment(exp_)->trial_ids) {
      const Trial* t = runner_->FindTrial(id);
      EXPECT_EQ(t->status, TrialStatus::kTerminated) << id;
      Json lineage = Json::array();
      for (const ExploitRecord& x : t->exploits) {
        lineage.push_back(Json{{"iteration", x.iteration},
                               {"donor", x.donor},
                               {"donor_iteration", x.donor_iteration},
                               {"new_config", x.new_config}});
      }
      out.push_back(Json{
          {"trial", id}, {"iteration", t->iteration}, {"config", t->config}, {"lineage", lineage}});
    }
    return out;
  }
  std::string exp_;
};

TEST_F(PbtRunnerTest, TheWorstCloneTheBestAndGoOnFromTheirIteration) {
  const Json run = Run(0);
  int exploits = 0;
  for (const Json& t : run) {
    EXPECT_EQ(t["iteration"], 8) << t.dump();
    for (const Json& x : t["lineage"]) {
      ++exploits;
      EXPECT_NE(x["donor"], t["trial"]);
      EXPECT_EQ(x["donor_iteration"].get<int64_t>() % 2, 0) << "donors checkpoint when ranked";
    }
    if (!t["lineage"].empty()) {
      EXPECT_EQ(t["config"], t["lineage"].back()["new_config"]) << "its config is the last one";
    }
  }
  EXPECT_GE(exploits, 2) << run.dump(2);
  EXPECT_GT(fleet_->resets, 0) << "clones took cached actors, RESET with their new config";
  // Every trial's results run 1..8 without a gap, as the store checker
  // demands (a clone's own results past the donor's iteration are replaced).
  for (const TrialId& id : runner_->FindExperiment(exp_)->trial_ids) {
    const std::vector<Json> results = StoredResults(id);
    ASSERT_EQ(results.size(), 8u) << id;
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(results[i]["training_iteration"], i + 1) << id;
  }
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
  // The lineage is stored with the trial.
  bool stored = false;
  for (size_t k = 0; k < 4; ++k) stored = stored || StoredRecord(exp_, k).contains("exploits");
  EXPECT_TRUE(stored);
}

// The run without a crash, on a fixture of its own.
Json PbtReference() {
  struct Reference : PbtRunnerTest {
    void TestBody() override {}
    using PbtRunnerTest::Run;
  };
  static const Json reference = Reference().Run(0);
  return reference;
}

class PbtCrashTest : public PbtRunnerTest, public ::testing::WithParamInterface<int> {};

// kill -9 of the head after each turn of the run (68) in turn: the same exploits
// (trial, iteration, donor, donor iteration, explored config) and the same
// final configs as without a crash.
TEST_P(PbtCrashTest, ExploitsTheSameAfterAHeadCrash) {
  EXPECT_EQ(Run(GetParam()), PbtReference()) << "crash after turn " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(EveryTurn, PbtCrashTest, ::testing::Range(1, 69));

// Synchronous PBT, the same population: every trial waits PAUSED at
// iterations 2, 4 and 6 until all four are there; then the worst clones a
// best one at that very iteration.
constexpr char kSyncPbtSpec[] = R"({"trainable": "quadratic",
    "param_space": {"lr": {"grid_search": [0.01, 0.02, 0.05, 0.3]}},
    "metric": "loss", "mode": "min", "reuse_actors": true, "seed": 5,
    "scheduler": {"type": "pbt", "time_attr": "training_iteration",
                  "perturbation_interval": 2, "synch": true,
                  "hyperparam_mutations": {"lr": {"uniform": [0.001, 0.45]}}},
    "stop": {"training_iteration": 8}})";

TEST_F(PbtRunnerTest, SynchronousClonesOnlyAtSyncPointsOnceAllArrived) {
  const Json run = Run(0, kSyncPbtSpec);
  int exploits = 0;
  for (const Json& t : run) {
    EXPECT_EQ(t["iteration"], 8) << t.dump();
    for (const Json& x : t["lineage"]) {
      ++exploits;
      // Cloned at the sync point, from a donor at the same point.
      EXPECT_EQ(x["iteration"], x["donor_iteration"]) << run.dump(2);
      EXPECT_EQ(x["iteration"].get<int64_t>() % 2, 0) << run.dump(2);
      EXPECT_NE(x["donor"], t["trial"]);
    }
  }
  // One clone per sync (quantile 0.25 of 4), at 2, 4 and 6.
  EXPECT_EQ(exploits, 3) << run.dump(2);
  for (const TrialId& id : runner_->FindExperiment(exp_)->trial_ids) {
    EXPECT_EQ(runner_->FindTrial(id)->scheduler_state["sync"], 8) << id;
  }
  auto report = CheckStore(store_);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->ToText();
}

Json SyncPbtReference() {
  struct Reference : PbtRunnerTest {
    void TestBody() override {}
    using PbtRunnerTest::Run;
  };
  static const Json reference = Reference().Run(0, kSyncPbtSpec);
  return reference;
}

class SyncPbtCrashTest : public PbtRunnerTest, public ::testing::WithParamInterface<int> {};

// kill -9 of the head after each turn of the synchronous run (70) in turn: the
// same clones and final configs as without a crash.
TEST_P(SyncPbtCrashTest, ExploitsTheSameAfterAHeadCrash) {
  EXPECT_EQ(Run(GetParam(), kSyncPbtSpec), SyncPbtReference()) << "crash after turn " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(EveryTurn, SyncPbtCrashTest, ::testing::Range(1, 71));

}  // namespace
}  // namespace ztune::head
