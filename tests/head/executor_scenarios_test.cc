// Ray Tune's executor scenarios (test_ray_trial_executor.py, test_trial_runner_*,
// test_actor_reuse.py), ported to the socket-free TrialRunner with scripted
// workers and a fake clock.
#include <sstream>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "head/stored_result.h"
#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fakes/fake_worker_fleet.h"
#include "tests/fakes/recording_command_sink.h"

namespace ztune::head {
namespace {

using testing::FakeWorkerFleet;
using testing::RecordingCommandSink;

class ExecutorScenarioTest : public ::testing::Test {
 protected:
  ExecutorScenarioTest() {
    RunnerOptions o;
    o.heartbeat_ms = 100;
    o.liveness = 3;
    o.pg_removal_delay_ms = 2000;
    o.insufficient_resources_warn_ms = 60'000;
    o.strict_invariants = true;
    runner_ = std::make_unique<TrialRunner>(store_, sink_, clock_, o);
    EXPECT_TRUE(runner_->Load().ok());
    fleet_ = std::make_unique<FakeWorkerFleet>(*runner_, sink_, store_);
  }

  std::string Submit(const std::string& spec) {
    auto r = runner_->Submit(Json::parse(spec));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["experiment_id"].get<std::string>() : "";
  }
  const Trial& T(const TrialId& id) { return *runner_->FindTrial(id); }
  std::vector<TrialId> Trials(const std::string& exp) {
    return runner_->FindExperiment(exp)->trial_ids;
  }
  int64_t Count(const std::string& exp, TrialStatus s) {
    const auto& c = runner_->FindExperiment(exp)->counts;
    auto it = c.find(s);
    return it == c.end() ? 0 : it->second;
  }
  void Turn(int n = 1) {
    for (int i = 0; i < n; ++i) {
      fleet_->Turn();
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
    }
  }
  bool RunUntil(const std::function<bool()>& cond, int max_turns = 3000) {
    for (int i = 0; i < max_turns; ++i) {
      if (cond()) return true;
      Turn();
    }
    return cond();
  }
  bool Finished(const std::string& exp) { return runner_->FindExperiment(exp)->finished; }
  // Commits what the runner changed since the last turn.
  void Commit() {
    storage::WriteBatch batch;
    runner_->FlushTo(batch);
    if (!batch.empty()) {
      EXPECT_TRUE(store_.Commit(batch).ok());
    }
  }
  std::vector<Json> Results(const std::string& id) {
    Commit();
    std::vector<Json> out;
    EXPECT_TRUE(store_
                    .Scan(storage::Family::kResults, storage::TrialPrefix(id),
                          [&](std::string_view, std::string_view v) {
                            out.push_back(ParseStoredResult(v).value());
                            return true;
                          })
                    .ok());
    return out;
  }
  void ExpectIterationsOnce(const std::string& id, int64_t n) {
    auto r = Results(id);
    ASSERT_EQ(r.size(), static_cast<size_t>(n)) << id;
    for (int64_t i = 1; i <= n; ++i) EXPECT_EQ(r[i - 1]["training_iteration"], i) << id;
  }
  // Reconcile after everything ended: no staging, ready, in-use or cached
  // groups, every worker's ledger full again.
  void ExpectClean() {
    Turn(3);
    clock_.AdvanceMs(2500);  // past the removal delay
    Turn(3);
    EXPECT_EQ(runner_->groups().NumInUse(), 0);
    EXPECT_EQ(runner_->groups().NumStagingTotal(), 0);
    // Nothing is kept per request shape once no trial of it waits.
    EXPECT_EQ(runner_->groups().NumPools(), 0u);
    size_t shapes = 0;
    runner_->scheduler().ForEachWaitingRequest(
        [&](const std::string&, const PlacementRequest&, size_t) { ++shapes; });
    EXPECT_EQ(shapes, 0u);
    for (const auto& [id, w] : runner_->registry().workers()) {
      if (w.alive) {
        EXPECT_EQ(runner_->ledger().AvailableOf(id), w.total) << id;
      }
    }
  }

  storage::InMemoryStore store_;
  RecordingCommandSink sink_;
  FakeClock clock_;
  std::unique_ptr<TrialRunner> runner_;
  std::unique_ptr<FakeWorkerFleet> fleet_;
};

// start -> train -> stop with {CPU: 1}.
TEST_F(ExecutorScenarioTest, StartsTrainsAndStops) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 1000}})");
  Turn();
  TrialId id = Trials(exp)[0];
  EXPECT_EQ(T(id).status, TrialStatus::kRunning);
  EXPECT_EQ(runner_->DebugString(), "Resources requested: 1/1 CPUs, 0/0 GPUs");
  Turn(3);
  EXPECT_GT(T(id).iteration, 0);
  ASSERT_TRUE(runner_->Stop(id).ok());
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated);
  ExpectClean();
  EXPECT_EQ(fleet_->stops, 1);
}

// 4 CPU / 2 GPU, four {CPU:1, GPU:1} trials -> at most 2 RUNNING; stopping one
// lets the next start; a stopped PENDING trial never starts.
TEST_F(ExecutorScenarioTest, GpuTrialsRespectDevicesAndStopFreesSlots) {
  fleet_->Register("w", 4, 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 4,
      "resources": {"bundles": [{"CPU": 1, "GPU": 1}]}, "stop": {"training_iteration": 100000}})");
  Turn(2);
  auto ids = Trials(exp);
  EXPECT_EQ(Count(exp, TrialStatus::kRunning), 2);
  EXPECT_EQ(T(ids[0]).status, TrialStatus::kRunning);
  EXPECT_EQ(T(ids[1]).status, TrialStatus::kRunning);
  EXPECT_EQ(runner_->DebugString(), "Resources requested: 2/4 CPUs, 2/2 GPUs");
  EXPECT_TRUE(runner_->HasResourcesForTrial(ids[2]));  // its group is staging
  ASSERT_TRUE(runner_->Stop(ids[0]).ok());
  Turn(2);
  EXPECT_EQ(T(ids[2]).status, TrialStatus::kRunning);
  ASSERT_TRUE(runner_->Stop(ids[3]).ok());  // PENDING
  EXPECT_EQ(T(ids[3]).status, TrialStatus::kTerminated);
  Turn(5);
  EXPECT_EQ(T(ids[3]).attempt, 0u);  // never started
  EXPECT_EQ(Count(exp, TrialStatus::kRunning), 2);
  ASSERT_TRUE(runner_->Stop(exp).ok());
  ExpectClean();
}

// pause -> PAUSED with a memory checkpoint -> resume restores the state.
TEST_F(ExecutorScenarioTest, PauseKeepsAMemoryCheckpointAndResumeRestoresIt) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 12}})");
  Turn(4);
  TrialId id = Trials(exp)[0];
  ASSERT_TRUE(runner_->PauseTrial(id, /*hold=*/true).ok());
  Turn(2);
  ASSERT_EQ(T(id).status, TrialStatus::kPaused);
  EXPECT_FALSE(T(id).memory_checkpoint.empty());
  const int64_t paused_at = T(id).iteration;
  EXPECT_GT(paused_at, 0);
  Turn(5);  // held: stays paused, its resources are free
  EXPECT_EQ(T(id).status, TrialStatus::kPaused);
  EXPECT_EQ(runner_->groups().NumInUse(), 0);
  ASSERT_TRUE(runner_->Resume(id).ok());
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated);
  EXPECT_EQ(T(id).num_restores, 1);
  EXPECT_EQ(fleet_->restores, 1);
  ExpectIterationsOnce(id, 12);
  // The restored actor continued where the paused one stopped.
  auto results = Results(id);
  EXPECT_EQ(results[paused_at]["actor"].get<int64_t>(), 2);
  EXPECT_EQ(results[paused_at - 1]["actor"].get<int64_t>(), 1);
  EXPECT_FALSE(runner_->Resume(id).ok());
  ExpectClean();
}

// buffer 7, checkpoint frequency 3 -> batches of 3, checkpoints at 3, 6, 9.
TEST_F(ExecutorScenarioTest, CheckpointFrequencyCapsBufferedResults) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 9},
      "result_buffer_length": 7, "result_buffer_min_time_s": 1, "checkpoint": {"frequency": 3}})");
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  TrialId id = Trials(exp)[0];
  std::vector<int64_t> at;
  for (const auto& c : T(id).checkpoints) at.push_back(c.iteration);
  EXPECT_EQ(at, (std::vector<int64_t>{3, 6, 9}));
  for (const auto& t : fleet_->trains) {
    EXPECT_EQ(t.buffer_length, 3);
    EXPECT_GE(t.buffer_time_s, 1.0);
  }
}

// a user-requested checkpoint (should_checkpoint) ends a buffered batch and is saved.
TEST_F(ExecutorScenarioTest, UserCheckpointEndsABufferedBatch) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 20},
      "param_space": {"user_checkpoint_freq": 10}, "result_buffer_length": 8})");
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  TrialId id = Trials(exp)[0];
  std::vector<int64_t> at;
  for (const auto& c : T(id).checkpoints) at.push_back(c.iteration);
  EXPECT_EQ(at, (std::vector<int64_t>{10, 20}));
  ExpectIterationsOnce(id, 20);
}

// max_failures -1 retries forever.
TEST_F(ExecutorScenarioTest, InfiniteRetriesKeepGoing) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 6},
      "checkpoint": {"frequency": 1}, "max_failures": -1})");
  TrialId id = Trials(exp)[0];
  for (int k = 2; k <= 6; ++k) fleet_->FailAt(id, k);  // one failure at each iteration 2..6
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(RunUntil([&] { return T(id).num_failures > round || Finished(exp); }));
    fleet_->FailAt(id, T(id).iteration + 1);
  }
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated);
  EXPECT_GE(T(id).num_failures, 5);
  ExpectIterationsOnce(id, 6);
}

// fail_fast: the first trial error stops the experiment.
TEST_F(ExecutorScenarioTest, FailFastStopsTheExperiment) {
  fleet_->Register("w", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2, "fail_fast": true,
      "stop": {"training_iteration": 100}})");
  auto ids = Trials(exp);
  fleet_->FailAt(ids[0], 3, /*once=*/false);
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(ids[0]).status, TrialStatus::kError);
  EXPECT_EQ(T(ids[1]).status, TrialStatus::kTerminated);
  EXPECT_LT(T(ids[1]).iteration, 100);
  EXPECT_TRUE(runner_->FindExperiment(exp)->stopped);
  ExpectClean();
}

// reuse_actors + a scheduler that pauses every trial in turn -> one actor
// serves all four trials; num_resets reaches 4, 5, 6, 7 (Ray's
// testTrialReuseEnabled).
TEST_F(ExecutorScenarioTest, ActorReuseServesTrialsPausedInTurn) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 4, "reuse_actors": true,
      "stop": {"training_iteration": 4}})");
  auto ids = Trials(exp);
  std::set<std::string> pause_asked;
  ASSERT_TRUE(RunUntil([&] {
    for (const auto& id : ids) {
      const Trial& t = T(id);
      // Pause after the first result of each slice (a PAUSE-always scheduler).
      if (t.status == TrialStatus::kRunning && t.iteration % 2 == 1 &&
          !pause_asked.count(id + "#" + std::to_string(t.iteration))) {
        pause_asked.insert(id + "#" + std::to_string(t.iteration));
        EXPECT_TRUE(runner_->PauseTrial(id, /*hold=*/false).ok());
      }
    }
    return Finished(exp);
  }));
  std::vector<int64_t> resets;
  for (const auto& id : ids) {
    EXPECT_EQ(T(id).status, TrialStatus::kTerminated);
    ExpectIterationsOnce(id, 4);
    resets.push_back(T(id).last_result.Get()["num_resets"].get<int64_t>());
  }
  EXPECT_EQ(resets, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(fleet_->creates, 1);
  EXPECT_EQ(fleet_->resets, 7);
  ExpectClean();
  EXPECT_EQ(fleet_->stops, 1);  // the one actor, once nobody wants it
}

// reuse with a trainable without reset_config -> that trial ERRORs with Ray's message.
TEST_F(ExecutorScenarioTest, ReuseWithoutResetConfigIsAnError) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "fail", "num_samples": 2, "reuse_actors": true,
      "max_failures": 1, "stop": {"training_iteration": 2}})");
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  auto ids = Trials(exp);
  EXPECT_EQ(T(ids[0]).status, TrialStatus::kTerminated);
  EXPECT_EQ(T(ids[1]).status, TrialStatus::kError);
  EXPECT_NE(T(ids[1]).error.find("reuse requires reset_config()"), std::string::npos)
      << T(ids[1]).error;
  ExpectClean();
}

// an actor whose STOP hangs: its resources come back at the kill deadline
// (+1 s for the worker's word), not before; a graceful stop is waited for.
TEST_F(ExecutorScenarioTest, ForceCleanupReleasesAHangingStopAtItsDeadline) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2, "force_cleanup_s": 3,
      "stop": {"training_iteration": 2}})");
  auto ids = Trials(exp);
  fleet_->hang_stops = true;
  ASSERT_TRUE(RunUntil([&] { return T(ids[0]).status == TrialStatus::kTerminated; }, 50));
  const TimeMs stopped_at = clock_.NowMs();
  ASSERT_TRUE(RunUntil([&] { return T(ids[1]).status == TrialStatus::kRunning; }, 1000));
  const TimeMs waited = clock_.NowMs() - stopped_at;
  EXPECT_GE(waited, 3000);
  EXPECT_LE(waited, 4000 + 100);
  fleet_->hang_stops = false;
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
}

// 2 CPUs; trials needing 1, 1, 2, 1 CPUs all finish: when the 2-CPU trial's
// group cannot be ready, the 1-CPU one behind it starts (no deadlock).
TEST_F(ExecutorScenarioTest, HeterogeneousRequestsNeverDeadlock) {
  fleet_->Register("w", 2);
  std::vector<std::string> exps;
  for (int cpus : {1, 1, 2, 1}) {
    exps.push_back(Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": )" +
                          std::to_string(cpus == 2 ? 3 : 20) + R"(},
        "resources": {"bundles": [{"CPU": )" + std::to_string(cpus) + "}]}}"));
  }
  ASSERT_TRUE(RunUntil([&] {
    for (const auto& e : exps) {
      if (!Finished(e)) return false;
    }
    return true;
  }));
  for (const auto& e : exps) EXPECT_EQ(Count(e, TrialStatus::kTerminated), 1);
  ExpectClean();
}

// [{CPU:1},{CPU:1}x3] SPREAD over four 1-CPU workers: one bundle per worker,
// the actor on bundle 0's worker.
TEST_F(ExecutorScenarioTest, MultiBundleSpreadUsesEveryWorker) {
  for (const char* w : {"a", "b", "c", "d"}) fleet_->Register(w, 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "resources": {"bundles": [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}],
                    "strategy": "SPREAD"}, "stop": {"training_iteration": 5}})");
  Turn();
  auto ids = Trials(exp);
  EXPECT_EQ(T(ids[0]).status, TrialStatus::kRunning);
  EXPECT_EQ(T(ids[1]).status, TrialStatus::kPending);
  const auto* g = runner_->groups().Find(T(ids[0]).group_id);
  ASSERT_NE(g, nullptr);
  std::set<std::string> workers;
  for (const auto& b : g->placement.bundles) workers.insert(b.worker_id);
  EXPECT_EQ(workers.size(), 4u);
  EXPECT_EQ(T(ids[0]).worker_id, g->placement.bundles[0].worker_id);
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  ExpectClean();
}

// a STRICT_PACK group no worker can hold waits, and the insufficient-resources
// warning names the request and the largest worker.
TEST_F(ExecutorScenarioTest, UnplaceableStrictPackWaitsAndIsNamedInTheWarning) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  std::string exp = Submit(R"({"trainable": "quadratic",
      "resources": {"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_PACK"},
      "stop": {"training_iteration": 5}})");
  fleet_->Register("a", 1);
  fleet_->Register("b", 1);
  for (int i = 0; i < 700; ++i) {
    Turn();
    clock_.AdvanceMs(90);
  }
  spdlog::default_logger()->sinks().pop_back();
  EXPECT_EQ(Count(exp, TrialStatus::kPending), 1);
  std::string text = log.str();
  EXPECT_NE(text.find("[{CPU: 1}, {CPU: 1}] STRICT_PACK"), std::string::npos) << text;
  EXPECT_NE(text.find("largest worker has {CPU: 1}"), std::string::npos) << text;
}

// export_formats: the actor exports before it stops.
TEST_F(ExecutorScenarioTest, ExportsWhenATrialTerminates) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "export_formats": ["json"],
      "stop": {"training_iteration": 3}})");
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  Turn(2);
  const Trial& t = T(Trials(exp)[0]);
  ASSERT_TRUE(t.exports.is_object()) << t.exports.dump();
  EXPECT_EQ(Json::parse(t.exports["json"].get<std::string>())["iteration"], 3);
  EXPECT_EQ(fleet_->exports, 1);
}

// a paused (not held) trial waits behind PENDING ones and resumes on any worker.
TEST_F(ExecutorScenarioTest, PausedTrialsResumeAfterPendingOnes) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 6}})");
  auto ids = Trials(exp);
  Turn(2);
  ASSERT_EQ(T(ids[0]).status, TrialStatus::kRunning);
  ASSERT_TRUE(runner_->PauseTrial(ids[0], /*hold=*/false).ok());
  ASSERT_TRUE(RunUntil([&] { return T(ids[1]).status == TrialStatus::kRunning; }, 50));
  EXPECT_EQ(T(ids[0]).status, TrialStatus::kPaused);
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  ExpectIterationsOnce(ids[0], 6);
  ExpectIterationsOnce(ids[1], 6);
  EXPECT_EQ(T(ids[0]).num_restores, 1);
  ExpectClean();
}

// A checkpoint that fails to restore is given up (Ray, TUNE_RESTORE_RETRY_NUM
// = 0): the retry starts from scratch instead of failing on it again, which
// spent max_failures (or looped forever at -1) on a damaged checkpoint. A
// checkpoint saved after that is used again.
TEST_F(ExecutorScenarioTest, AFailedRestoreGivesTheCheckpointUpAndRestartsFromScratch) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": -1,
      "stop": {"training_iteration": 12}, "checkpoint": {"frequency": 3}})");
  Turn();
  const TrialId id = Trials(exp)[0];
  fleet_->FailAt(id, 5);             // fails after the checkpoint at 3 ...
  fleet_->fail_restores = 1;         // ... whose restore fails
  ASSERT_TRUE(RunUntil([&] { return T(id).attempt == 3; }));
  EXPECT_EQ(T(id).num_failures, 2);
  EXPECT_NE(T(id).error_log[1].find("failed to restore from checkpoint: checkpoint is damaged"),
            std::string::npos)
      << T(id).error_log[1];
  EXPECT_EQ(fleet_->restores, 1);  // attempt 3 starts from scratch: no RESTORE
  fleet_->FailAt(id, 8);           // a new checkpoint (6) exists by then: restored
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated);
  EXPECT_EQ(T(id).num_failures, 3);
  EXPECT_EQ(fleet_->restores, 2);
  ExpectIterationsOnce(id, 12);
  ExpectClean();
}

// A failure that arrives in the same head turn as the checkpoint saved just
// before it: the retry restores that checkpoint, not nothing ("checkpoint N
// of TRIAL unreadable (missing); starting from scratch", 1 run in 4, when the
// retry read the store before the turn's commit), and counts one failure.
TEST_F(ExecutorScenarioTest, ARetryRestoresTheCheckpointSavedInTheSameTurnAsTheFailure) {
  fleet_->Register("w", 2);     // a free slot: the retry starts in the next Tick
  // Two steps per turn (result, SAVE, result, SAVE): the SAVE after result 3
  // and the failing step 4 are answered in the same turn.
  fleet_->answer_rounds = 4;
  std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": 1,
      "stop": {"training_iteration": 8}, "checkpoint": {"frequency": 1}})");
  Turn();
  const TrialId id = Trials(exp)[0];
  fleet_->FailAt(id, 4);
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated) << T(id).error;
  EXPECT_EQ(T(id).num_failures, 1);
  EXPECT_EQ(T(id).num_restores, 1);
  EXPECT_EQ(fleet_->restores, 1);
  ExpectIterationsOnce(id, 8);
  ExpectClean();
}

// Ray's _try_recover: a failed trial restarts at once when resources for it
// are there (here the actor its sibling just left to the cache), ahead of
// the trials waiting; without them it goes to the end of the queue.
TEST_F(ExecutorScenarioTest, ARetryTakesResourcesThatAreThereAtOnceElseGoesToTheBack) {
  fleet_->Register("w", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 4, "max_failures": 2,
      "reuse_actors": true, "stop": {"training_iteration": 4}})");
  Turn();
  const auto ids = Trials(exp);
  ASSERT_EQ(T(ids[0]).status, TrialStatus::kRunning);
  ASSERT_EQ(T(ids[1]).status, TrialStatus::kRunning);
  // Trial 0 ends at 4 and leaves its actor to the cache in the same turn
  // in which trial 1 fails at 4: the cached actor goes to trial 1's retry,
  // not to trial 2, which was waiting.
  fleet_->FailAt(ids[1], 4);
  ASSERT_TRUE(RunUntil([&] { return T(ids[1]).num_failures == 1; }));
  ASSERT_TRUE(RunUntil([&] { return T(ids[1]).status == TrialStatus::kRunning; }));
  EXPECT_EQ(T(ids[2]).status, TrialStatus::kPending);
  EXPECT_EQ(fleet_->resets, 1);
  // No resources at the failure (nothing cached, nothing ready): the end of
  // the queue, behind trial 3 which waits already.
  fleet_->FailAt(ids[2], 2);
  ASSERT_TRUE(RunUntil([&] { return T(ids[2]).num_failures == 1; }));
  EXPECT_EQ(T(ids[3]).status, TrialStatus::kPending);
  ASSERT_TRUE(RunUntil([&] { return T(ids[3]).status == TrialStatus::kRunning; }));
  EXPECT_EQ(T(ids[2]).status, TrialStatus::kPending) << "the retry went ahead of trial 3";
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  for (const auto& id : ids) EXPECT_EQ(T(id).status, TrialStatus::kTerminated) << id;
  ExpectClean();
}

// A worker that held only a bundle of a trial's placement group dies: the
// trial fails (and is retried), its actor on the live worker gets a STOP,
// and that worker's resources stay booked until the STOP completes (they
// were freed at once, under an actor still running, and only trials whose
// actor was on the dead worker were failed).
TEST_F(ExecutorScenarioTest, ADeadWorkerHoldingABundleEndsTheActorOnTheLiveOne) {
  fleet_->Register("w1", 1);
  fleet_->Register("w2", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": 1,
      "resources": {"bundles": [{"CPU": 1}, {"CPU": 1}], "strategy": "STRICT_SPREAD"},
      "force_cleanup_s": 1, "stop": {"training_iteration": 100}})");
  Turn();
  const TrialId id = Trials(exp)[0];
  ASSERT_TRUE(RunUntil([&] { return T(id).iteration >= 3; }));
  const WorkerId actor_worker = T(id).worker_id;
  const WorkerId other = actor_worker == "w1" ? "w2" : "w1";
  fleet_->hang_stops = true;  // the live actor takes its time to stop
  fleet_->Kill(other);
  ASSERT_TRUE(RunUntil([&] { return T(id).num_failures == 1; }, 100));
  EXPECT_NE(T(id).error.find("which held a bundle of its placement group, died"),
            std::string::npos)
      << T(id).error;
  EXPECT_EQ(T(id).phase, TrialPhase::kIdle);
  Turn(3);
  EXPECT_DOUBLE_EQ(runner_->ledger().AvailableOf(actor_worker).Get("CPU"), 0)
      << "freed while its actor is still stopping";
  clock_.AdvanceMs(2100);  // past the kill deadline (1 s) and the reply grace (1 s)
  Turn();
  EXPECT_DOUBLE_EQ(runner_->ledger().AvailableOf(actor_worker).Get("CPU"), 1);
  fleet_->hang_stops = false;
  fleet_->Register("w3", 1);
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated) << T(id).error;
  EXPECT_EQ(T(id).attempt, 2u);
  ExpectClean();
}

// timeouts.step_s: a step that never returns fails its attempt (naming the
// request, the worker and the setting) and frees the slot; the retry runs
// to the end. Healthy steps, answered within a turn, never time out.
TEST_F(ExecutorScenarioTest, AHungStepFailsItsAttemptAndTheRetryFinishes) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": 1,
      "stop": {"training_iteration": 20}, "timeouts": {"step_s": 0.5}})");
  Turn();
  const TrialId id = Trials(exp)[0];
  ASSERT_TRUE(RunUntil([&] { return T(id).iteration >= 5; }));
  fleet_->hang = [&](const protocol::Body& b) {
    auto* train = std::get_if<protocol::Train>(&b);
    return train != nullptr && train->attempt == 1;
  };
  const uint64_t attempt = T(id).attempt;
  Turn(49);  // 490 ms: within the step's 500 ms
  EXPECT_EQ(T(id).num_failures, 0);
  ASSERT_TRUE(RunUntil([&] { return T(id).attempt > attempt; }, 10));
  EXPECT_EQ(T(id).num_failures, 1);
  EXPECT_NE(T(id).error.find("TRAIN of attempt 1 got no answer from worker w"), std::string::npos)
      << T(id).error;
  EXPECT_NE(T(id).error.find("within 0.5 s (spec timeouts.step_s)"), std::string::npos)
      << T(id).error;
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }));
  EXPECT_EQ(T(id).status, TrialStatus::kTerminated);
  ExpectIterationsOnce(id, 20);
  ExpectClean();
}

// timeouts.setup_s: a setup that never returns fails its attempt; without
// max_failures the trial ends in ERROR and the experiment finishes.
TEST_F(ExecutorScenarioTest, AHungSetupFailsTheTrial) {
  fleet_->Register("w", 1);
  fleet_->hang = [](const protocol::Body& b) {
    return std::holds_alternative<protocol::CreateActor>(b);
  };
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 5},
      "timeouts": {"setup_s": 2}})");
  Turn();
  const TrialId id = Trials(exp)[0];
  Turn(195);
  EXPECT_EQ(T(id).status, TrialStatus::kRunning);
  ASSERT_TRUE(RunUntil([&] { return Finished(exp); }, 20));
  EXPECT_EQ(T(id).status, TrialStatus::kError);
  EXPECT_NE(T(id).error.find("CREATE_ACTOR of attempt 1 got no answer from worker w within 2 s "
                             "(spec timeouts.setup_s)"),
            std::string::npos)
      << T(id).error;
  ExpectClean();
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// save persistent -> a new trial restores from it -> it continues from the
// checkpoint's iteration (Ray's restore_path; iterations_since_restore
// restarts on the worker).
TEST_F(ExecutorScenarioTest, NewTrialRestoresFromAnotherTrialsCheckpoint) {
  fleet_->Register("w", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 4},
      "checkpoint": {"frequency": 4}})");
  ASSERT_TRUE(RunUntil([&] { return T(Trials(exp)[0]).status == TrialStatus::kTerminated; }));
  TrialId first = Trials(exp)[0];
  // The experiment is finished; a new one restores from the first's checkpoint.
  std::string exp2 = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 7},
      "max_concurrent_trials": 1, "num_samples": 1})");
  EXPECT_EQ(runner_->AddTrial(exp2, Json::object(), "e9999_00000").status().code(),
            StatusCode::kNotFound);
  auto id = runner_->AddTrial(exp2, Json::object(), first);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(RunUntil([&] { return Finished(exp2); }));
  const Trial& t = T(*id);
  EXPECT_EQ(t.status, TrialStatus::kTerminated);
  EXPECT_EQ(t.num_restores, 1);
  auto r = Results(*id);
  ASSERT_EQ(r.size(), 3u);  // iterations 5, 6, 7
  EXPECT_EQ(r.front()["training_iteration"], 5);
  EXPECT_EQ(r.back()["training_iteration"], 7);
}

}  // namespace
}  // namespace ztune::head
