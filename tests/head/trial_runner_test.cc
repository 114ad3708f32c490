#include "head/trial_runner.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "common/base64.h"
#include "head/client_service.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fakes/fake_worker_fleet.h"
#include "tests/fakes/recording_command_sink.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

// 16 trials, 2 workers x 2 CPUs -> never more than 4 RUNNING, all TERMINATED,
// iterations 1..N stored exactly once with the closed-form values.
TEST_F(TrialRunnerTest, RunsEveryTrialWithinClusterCapacity) {
  fleet_->Register("w1", 2);
  fleet_->Register("w2", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 4,
      "param_space": {"lr": {"grid_search": [0.01, 0.05, 0.1, 0.2]}},
      "stop": {"training_iteration": 7}, "metric": "loss", "mode": "min"})");
  int64_t max_running = 0;
  RunToEnd(exp, 2000, &max_running);
  EXPECT_LE(max_running, 4);
  EXPECT_EQ(max_running, 4);
  const Experiment* e = runner_->FindExperiment(exp);
  ASSERT_EQ(e->trial_ids.size(), 16u);
  for (const auto& id : e->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated);
    auto results = StoredResults(id);
    ASSERT_EQ(results.size(), 7u);
    for (int64_t i = 1; i <= 7; ++i) {
      EXPECT_EQ(results[i - 1]["training_iteration"], i);
      EXPECT_DOUBLE_EQ(results[i - 1]["x"].get<double>(), FakeWorkerFleet::Quadratic(t->config, i));
    }
    EXPECT_TRUE(results.back()["done"].get<bool>());
  }
  EXPECT_NE(runner_->book().BestTrial(*e), nullptr);
  EXPECT_EQ(runner_->groups().NumInUse(), 0);
  EXPECT_DOUBLE_EQ(runner_->ledger().Available().Get("CPU"), 4);
}

TEST_F(TrialRunnerTest, GridCrossesWithNumSamples) {
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 3,
      "param_space": {"a": {"grid_search": [1, 2]}, "b": {"grid_search": ["x", "y", "z"]},
                      "lr": {"uniform": [0.01, 0.1]}}})");
  const Experiment* e = runner_->FindExperiment(exp);
  EXPECT_EQ(e->total_variants, 18u);
  EXPECT_EQ(e->trial_ids.size(), 16u);  // bounded by max_pending_trials (16)
  std::map<std::pair<int, std::string>, int> combos;
  for (const auto& id : e->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    combos[{t->config["a"].get<int>(), t->config["b"].get<std::string>()}]++;
  }
  EXPECT_EQ(combos.size(), 6u);
}

TEST_F(TrialRunnerTest, RejectsInfeasibleRequestNamingTheLargestWorker) {
  fleet_->Register("w1", 2);
  auto r = runner_->Submit(Json::parse(
      R"({"trainable": "quadratic", "resources": {"bundles": [{"CPU": 3}]}})"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("CPU: 3"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("largest worker has {CPU: 2}"), std::string::npos);
  EXPECT_TRUE(runner_->experiments().empty());
  storage::WriteBatch batch;
  runner_->FlushTo(batch);
  EXPECT_TRUE(batch.empty());
}

TEST_F(TrialRunnerTest, RejectsInvalidSpecsWithTheKeyName) {
  struct Case {
    const char* spec;
    const char* key;
  } cases[] = {
      {R"({"trainable": "quadratic", "nmu_samples": 3})", "nmu_samples"},
      {R"({"trainable": "quadratic", "num_samples": 0})", "num_samples"},
      {R"({"num_samples": 2})", "trainable"},
      {R"({"trainable": "quadratic", "param_space": {"lr": {"loguniform": [0, 1]}}})", "lr"},
      {R"({"trainable": "quadratic", "metric": "loss"})", "mode"},
      {R"({"trainable": "quadratic", "stop": {"loss": "low"}})", "stop.loss"},
      {R"({"trainable": "quadratic", "checkpoint": {"frequency": -1}})", "checkpoint.frequency"},
      {R"({"trainable": "quadratic", "resources": {"strategy": "SIDEWAYS"}})", "strategy"},
      {R"({"trainable": "quadratic", "timeouts": 5})", "timeouts"},
      {R"({"trainable": "quadratic", "timeouts": {"stpe_s": 5}})", "stpe_s"},
      {R"({"trainable": "quadratic", "timeouts": {"step_s": 0}})", "timeouts.step_s"},
      {R"({"trainable": "quadratic", "timeouts": {"setup_s": -1}})", "timeouts.setup_s"},
      {R"({"trainable": "quadratic", "timeouts": {"checkpoint_s": 1e8}})",
       "timeouts.checkpoint_s"},
      {R"({"trainable": "quadratic", "timeouts": {"step_s": "1h"}})", "timeouts.step_s"},
  };
  for (const auto& c : cases) {
    auto r = runner_->Submit(Json::parse(c.spec));
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(runner_->experiments().empty());
}

TEST_F(TrialRunnerTest, RejectsTrainableNoWorkerHosts) {
  fleet_->Register("w1", 2);
  auto r = runner_->Submit(Json::parse(R"({"trainable": "resnet"})"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("resnet"), std::string::npos);
  EXPECT_NE(r.status().message().find("quadratic"), std::string::npos);
}

TEST_F(TrialRunnerTest, CheckpointsAtFrequencyAndKeepsTheBest) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 10},
      "checkpoint": {"frequency": 3, "num_to_keep": 2, "score_attribute": "loss",
                     "score_order": "min"}})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(fleet_->saves, 3);  // at 3, 6, 9
  ASSERT_EQ(t->checkpoints.size(), 2u);
  // Loss decreases, so the best two (lowest loss) are the newest: 6 and 9.
  EXPECT_EQ(t->checkpoints[0].iteration, 6);
  EXPECT_EQ(t->checkpoints[1].iteration, 9);
  int stored = 0;
  ASSERT_TRUE(store_.Scan(storage::Family::kCheckpoints, storage::TrialPrefix(t->trial_id),
                          [&](std::string_view, std::string_view) { return ++stored, true; })
                  .ok());
  EXPECT_EQ(stored, 2);
}

// The `checkpoint` client op serves a kept checkpoint's stored bytes in
// base64 pages: the newest by default, one by iteration, NotFound (listing
// what is kept) otherwise.
TEST_F(TrialRunnerTest, TheCheckpointOpServesAKeptCheckpointsBytes) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 10},
      "checkpoint": {"frequency": 3, "num_to_keep": 2}})");
  RunToEnd(exp);
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  ClientService clients(*runner_);
  auto ask = [&](Json request) {
    request["op"] = "checkpoint";
    request["trial_id"] = id;
    return clients.Handle(request, ClientCaller::Anonymous());
  };
  Json newest = ask(Json::object());
  ASSERT_TRUE(newest.value("ok", false)) << newest.dump();
  EXPECT_EQ(newest["iteration"], 9);
  EXPECT_EQ(Base64Decode(newest["data"].get<std::string>()).value(), "ckpt:9");
  EXPECT_EQ(newest["size"], 6);
  EXPECT_TRUE(newest["next_offset"].is_null());
  // Paged: two bytes at a time, from the same checkpoint.
  std::string bytes;
  Json offset = 0;
  while (!offset.is_null()) {
    Json page = ask(Json{{"iteration", 6}, {"offset", offset}, {"limit", 2}});
    ASSERT_TRUE(page.value("ok", false)) << page.dump();
    EXPECT_EQ(page["iteration"], 6);
    bytes += Base64Decode(page["data"].get<std::string>()).value();
    offset = page["next_offset"];
  }
  EXPECT_EQ(bytes, "ckpt:6");
  Json missing = ask(Json{{"iteration", 3}});
  EXPECT_EQ(missing["error"]["code"], "NotFound");
  EXPECT_NE(missing["error"]["message"].get<std::string>().find("kept: 6, 9"), std::string::npos)
      << missing.dump();
  Json unknown = clients.Handle(Json{{"op", "checkpoint"}, {"trial_id", "e0099_00000"}},
                                ClientCaller::Anonymous());
  EXPECT_EQ(unknown["error"]["code"], "NotFound");
  Json bad = ask(Json{{"iteration", "6"}});
  EXPECT_EQ(bad["error"]["code"], "InvalidArgument");
}

// `workers` always names CPU and GPU, also when a worker has none of one
// (scripts and dashboards read them without a default).
TEST_F(TrialRunnerTest, TheWorkersOpAlwaysNamesCpuAndGpu) {
  fleet_->Register("w-cpu", 2);
  fleet_->Register("w-gpu", 0, 1);
  ClientService clients(*runner_);
  Json reply = clients.Handle(Json{{"op", "workers"}}, ClientCaller::Anonymous());
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  std::map<std::string, Json> by_name;
  for (const Json& w : reply["workers"]) by_name[w["name"].get<std::string>()] = w;
  ASSERT_EQ(by_name.size(), 2u) << reply.dump();
  for (const char* field : {"resources_total", "resources_available"}) {
    EXPECT_EQ(by_name["w-cpu"][field]["CPU"], 2) << reply.dump();
    EXPECT_EQ(by_name["w-cpu"][field]["GPU"], 0) << reply.dump();
    EXPECT_EQ(by_name["w-gpu"][field]["CPU"], 0) << reply.dump();
    EXPECT_EQ(by_name["w-gpu"][field]["GPU"], 1) << reply.dump();
  }
}

TEST_F(TrialRunnerTest, KeepsTheLatestCheckpointEvenWhenItScoresWorst) {
  fleet_->Register("w1", 1);
  // Order max on loss: older checkpoints score better, yet the newest stays.
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 9},
      "checkpoint": {"frequency": 3, "num_to_keep": 1, "score_attribute": "loss"}})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  ASSERT_EQ(t->checkpoints.size(), 2u);
  EXPECT_EQ(t->checkpoints[0].iteration, 3);
  EXPECT_EQ(t->checkpoints[1].iteration, 9);
}

TEST_F(TrialRunnerTest, BufferedTrainingIsCappedByCheckpointFrequency) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 9},
      "result_buffer_length": 7, "checkpoint": {"frequency": 3}})");
  RunToEnd(exp);
  ASSERT_FALSE(fleet_->trains.empty());
  for (const auto& t : fleet_->trains) EXPECT_EQ(t.buffer_length, 3);
  EXPECT_EQ(fleet_->saves, 3);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->checkpoints.size(), 3u);
  EXPECT_EQ(StoredResults(t->trial_id).size(), 9u);
}

TEST_F(TrialRunnerTest, CheckpointAtEndDisablesBuffering) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 4},
      "result_buffer_length": 7, "checkpoint": {"at_end": true}})");
  RunToEnd(exp);
  for (const auto& t : fleet_->trains) EXPECT_EQ(t.buffer_length, 1);
  EXPECT_EQ(fleet_->saves, 1);
}

// failure at iteration 3 -> retried from the newest checkpoint (iteration 2).
TEST_F(TrialRunnerTest, RetriesAFailedTrialFromItsCheckpoint) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 6},
      "checkpoint": {"frequency": 2}, "max_failures": 1})");
  runner_->Tick();
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  fleet_->FailAt(id, 3);
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->num_failures, 1);
  EXPECT_EQ(t->attempt, 2u);
  EXPECT_EQ(t->num_restores, 1);
  ASSERT_EQ(t->error_log.size(), 1u);
  EXPECT_NE(t->error_log[0].find("Failure # 1"), std::string::npos);
  EXPECT_NE(t->error_log[0].find("injected"), std::string::npos);
  auto results = StoredResults(id);
  ASSERT_EQ(results.size(), 6u);
  for (int64_t i = 1; i <= 6; ++i) EXPECT_EQ(results[i - 1]["training_iteration"], i);
}

TEST_F(TrialRunnerTest, ErrorsWhenFailuresExceedMaxFailures) {
  for (int64_t max_failures : {0, 1, 2}) {
    Reset();
    fleet_->Register("w1", 1);
    std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 5},
        "max_failures": )" + std::to_string(max_failures) + "}");
    runner_->Tick();
    const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
    fleet_->FailAt(id, 2, /*once=*/false);
    RunToEnd(exp);
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kError) << max_failures;
    EXPECT_EQ(t->num_failures, max_failures + 1);
    EXPECT_EQ(t->attempt, static_cast<uint64_t>(max_failures + 1));
  }
}

TEST_F(TrialRunnerTest, StartFailureIsAnErrorWithTheWorkersMessage) {
  fleet_->Register("w1", 1, 0, {"quadratic", "missing"});
  std::string exp = Submit(R"({"trainable": "missing", "max_failures": 3})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kError);
  EXPECT_NE(t->error.find("unknown trainable 'missing'"), std::string::npos) << t->error;
  EXPECT_EQ(runner_->groups().NumInUse(), 0);
}

// The rule for starts that fail (docs/spec.md, max_failures): a setup that
// raised is retried within max_failures like any failure (Ray); a worker that
// does not host the trainable ends the trial in ERROR at once.
TEST_F(TrialRunnerTest, AFailedSetupIsRetriedWithinMaxFailures) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": 1,
      "param_space": {"setup_fail_attempts": 1}, "stop": {"training_iteration": 3}})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kTerminated) << t->error;
  EXPECT_EQ(t->num_failures, 1);
  EXPECT_NE(t->error_log[0].find("failed to start: setup raised: injected"), std::string::npos)
      << t->error_log[0];

  std::string exp2 = Submit(R"({"trainable": "quadratic", "max_failures": 1,
      "param_space": {"setup_fail_attempts": 5}, "stop": {"training_iteration": 3}})");
  RunToEnd(exp2);
  const Trial* t2 = runner_->FindTrial(runner_->FindExperiment(exp2)->trial_ids[0]);
  EXPECT_EQ(t2->status, TrialStatus::kError);
  EXPECT_EQ(t2->num_failures, 2);
}

TEST_F(TrialRunnerTest, TrialsArePlacedOnlyOnWorkersThatHostTheirTrainable) {
  fleet_->Register("w1", 4, 0, {"quadratic"});
  fleet_->Register("w2", 1, 0, {"quadratic", "noop"});
  // w1 has room for every trial but does not host noop: the trials queue for
  // w2's single CPU instead of failing on w1 (they did before placement
  // looked at trainables).
  std::string exp = Submit(R"({"trainable": "noop", "num_samples": 3,
      "stop": {"training_iteration": 3}})");
  RunToEnd(exp);
  for (const auto& id : runner_->FindExperiment(exp)->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated) << id << ": " << t->error;
    EXPECT_EQ(t->num_failures, 0) << id;
  }
  EXPECT_EQ(fleet_->created_on[WorkerId("w1")], 0);
  EXPECT_EQ(fleet_->created_on[WorkerId("w2")], 3);
}

TEST_F(TrialRunnerTest, MissingStoppingCriterionIsATrialError) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"accuracy": 0.9}})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kError);
  EXPECT_NE(t->error.find("stopping criterion 'accuracy'"), std::string::npos);
}

// Ray's _should_stop: `done: true` ends the trial before any stopping
// criterion is looked up, so a done result need not carry the criterion's key.
TEST_F(TrialRunnerTest, ADoneResultWithoutTheStoppingCriterionsKeyTerminates) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "param_space": {"done_at": 3},
      "stop": {"accuracy": 0.9}})");
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kError) << "iterations 1-2 lack the key: " << t->error;

  std::string exp2 = Submit(R"({"trainable": "quadratic", "param_space": {"done_at": 1},
      "stop": {"accuracy": 0.9}})");
  RunToEnd(exp2);
  const Trial* t2 = runner_->FindTrial(runner_->FindExperiment(exp2)->trial_ids[0]);
  EXPECT_EQ(t2->status, TrialStatus::kTerminated) << t2->error;
  EXPECT_EQ(t2->iteration, 1);
}

TEST_F(TrialRunnerTest, NestedStoppingCriterion) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 3}})");
  RunToEnd(exp);
  EXPECT_EQ(CountStatus(exp, TrialStatus::kTerminated), 1);
  Json r{{"a", {{"b", 2}}}};
  ASSERT_NE(FindFlatKey(r, "a/b"), nullptr);
  EXPECT_EQ(*FindFlatKey(r, "a/b"), 2);
  EXPECT_EQ(FindFlatKey(r, "a/c"), nullptr);
}

// worker dies -> its trials fail over to the other worker; resources released.
TEST_F(TrialRunnerTest, FailsOverTrialsOfADeadWorker) {
  fleet_->Register("w1", 1);
  fleet_->Register("w2", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 50}, "checkpoint": {"frequency": 5}, "max_failures": 1})");
  for (int i = 0; i < 12; ++i) {
    fleet_->Turn();
    fleet_->Heartbeat();
  }
  EXPECT_EQ(CountStatus(exp, TrialStatus::kRunning), 2);
  fleet_->Kill("w1");
  // Past the liveness window (100 ms x 3) with only w2 heartbeating.
  for (int i = 0; i < 5; ++i) {
    clock_.AdvanceMs(100);
    fleet_->Heartbeat();
    fleet_->Turn();
  }
  EXPECT_FALSE(runner_->registry().FindAlive("w1"));
  RunToEnd(exp, 5000);
  const Experiment* e = runner_->FindExperiment(exp);
  int failed_over = 0;
  for (const auto& id : e->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated);
    if (t->num_failures == 1) {
      ++failed_over;
      EXPECT_NE(t->error.find("worker w1"), std::string::npos) << t->error;
      EXPECT_EQ(t->num_restores, 1);
    }
    auto results = StoredResults(id);
    ASSERT_EQ(results.size(), 50u);
    for (int64_t i = 1; i <= 50; ++i) EXPECT_EQ(results[i - 1]["training_iteration"], i);
  }
  EXPECT_EQ(failed_over, 1);
  EXPECT_DOUBLE_EQ(runner_->ledger().Available().Get("CPU"), 1);
}

TEST_F(TrialRunnerTest, DropsResultsOfAStaleAttempt) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 3}})");
  fleet_->Turn();
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  const int64_t before = runner_->FindTrial(id)->iteration;
  protocol::ResultBatch stale;
  stale.rid = 999;
  stale.trial_id = id;
  stale.attempt = 7;
  stale.results.push_back(
      {1, protocol::RawResult::FromJson(Json{{"training_iteration", before + 1}, {"loss", -1}})});
  runner_->HandleResultBatch("w1", stale);
  EXPECT_EQ(runner_->FindTrial(id)->iteration, before);
  RunToEnd(exp);
  for (const auto& r : StoredResults(id)) EXPECT_NE(r["loss"], -1);
}

TEST_F(TrialRunnerTest, StopsATrialAndAnExperiment) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 3,
      "stop": {"training_iteration": 1000}})");
  fleet_->Turn();
  const auto ids = runner_->FindExperiment(exp)->trial_ids;
  auto stopped = runner_->Stop(ids[2]);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(*stopped, std::vector<TrialId>{ids[2]});
  EXPECT_EQ(runner_->FindTrial(ids[2])->status, TrialStatus::kTerminated);
  auto all = runner_->Stop(exp);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  for (int i = 0; i < 5; ++i) fleet_->Turn();
  EXPECT_TRUE(runner_->FindExperiment(exp)->finished);
  EXPECT_EQ(runner_->groups().NumInUse(), 0);
  EXPECT_FALSE(runner_->Stop("nope").ok());
}

TEST_F(TrialRunnerTest, AddTrialRunsTheGivenConfig) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 2}})");
  auto id = runner_->AddTrial(exp, Json{{"lr", 0.25}, {"x0", 4}});
  ASSERT_TRUE(id.ok());
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(*id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->config["lr"], 0.25);
  EXPECT_EQ(runner_->FindExperiment(exp)->trial_ids.size(), 2u);
  EXPECT_FALSE(runner_->AddTrial(exp, Json{{"lr", 1}}).ok());  // finished
  EXPECT_EQ(runner_->AddTrial("e9999", Json::object()).status().code(), StatusCode::kNotFound);
}

// Trials added while the search still has variants to yield (add-trial, a
// resume that restarts errored trials) do not move the search: every grid
// point still runs exactly once. (They advanced its cursor: one grid point
// was skipped and another sampled twice.)
TEST_F(TrialRunnerTest, AddedTrialsDoNotSkipAVariantOfTheSearch) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "max_concurrent_trials": 1,
      "param_space": {"x0": {"grid_search": [1, 2, 3, 4]}},
      "stop": {"training_iteration": 1}})");
  ASSERT_EQ(runner_->FindExperiment(exp)->trial_ids.size(), 1u) << "lazy: one at a time";
  ASSERT_TRUE(runner_->AddTrial(exp, Json{{"x0", 100}}).ok());
  RunToEnd(exp);
  std::multiset<int> x0s;
  for (const TrialId& id : runner_->FindExperiment(exp)->trial_ids) {
    x0s.insert(runner_->FindTrial(id)->config["x0"].get<int>());
  }
  EXPECT_EQ(x0s, (std::multiset<int>{1, 2, 3, 4, 100}));
  EXPECT_EQ(runner_->FindExperiment(exp)->TotalTrials(), 5u);
}

// head restart mid-run -> RUNNING trials resume from checkpoints, no trial is
// sampled twice, results stay exactly once.
TEST_F(TrialRunnerTest, ResumesFromTheStoreAfterARestart) {
  fleet_->Register("w1", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 3,
      "param_space": {"x0": {"grid_search": [1, 2, 3]}},
      "stop": {"training_iteration": 12}, "checkpoint": {"frequency": 4},
      "max_concurrent_trials": 2})");
  for (int i = 0; i < 30; ++i) fleet_->Turn();
  // Whatever was in flight is lost with the old head.
  sink_.TakeAll();
  Reset();
  fleet_->Register("w1", 2);
  RunToEnd(exp, 5000);
  const Experiment* e = runner_->FindExperiment(exp);
  ASSERT_EQ(e->trial_ids.size(), 9u);
  std::map<int, int> per_x0;
  for (const auto& id : e->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated);
    per_x0[t->config["x0"].get<int>()]++;
    auto results = StoredResults(id);
    ASSERT_EQ(results.size(), 12u) << id;
    for (int64_t i = 1; i <= 12; ++i) {
      EXPECT_EQ(results[i - 1]["training_iteration"], i);
      EXPECT_DOUBLE_EQ(results[i - 1]["x"].get<double>(), FakeWorkerFleet::Quadratic(t->config, i));
    }
  }
  EXPECT_EQ(per_x0, (std::map<int, int>{{1, 3}, {2, 3}, {3, 3}}));
}

TEST_F(TrialRunnerTest, DebugStringShowsUsedOverTotal) {
  fleet_->Register("w1", 4, 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 4,
      "resources": {"bundles": [{"CPU": 1, "GPU": 1}]}, "stop": {"training_iteration": 1000}})");
  fleet_->Turn();
  EXPECT_EQ(CountStatus(exp, TrialStatus::kRunning), 2);
  EXPECT_EQ(runner_->DebugString(), "Resources requested: 2/4 CPUs, 2/2 GPUs");
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// worker frozen past the liveness window -> its trial moves on (attempt 2) ->
// the worker wakes up: its late results are dropped, its stale actor stopped.
TEST_F(TrialRunnerTest, FencesAWorkerThatWakesUpAfterBeingDeclaredDead) {
  fleet_->Register("w1", 1);
  fleet_->Register("w2", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 40},
      "max_failures": 1})");
  for (int i = 0; i < 3; ++i) fleet_->Turn();
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  const WorkerId frozen = runner_->FindTrial(id)->worker_id;
  const WorkerId other = frozen == "w1" ? "w2" : "w1";
  fleet_->Kill(frozen);
  for (int i = 0; i < 6; ++i) {
    clock_.AdvanceMs(100);
    runner_->HandleHeartbeat(other);
    fleet_->Turn();
  }
  ASSERT_EQ(runner_->FindTrial(id)->attempt, 2u);
  ASSERT_EQ(runner_->FindTrial(id)->worker_id, other);
  const int64_t before = runner_->FindTrial(id)->iteration;
  size_t mark = sink_.sent.size();

  // The frozen worker's late batch for attempt 1 (it never re-registered).
  protocol::ResultBatch late;
  late.rid = 1;
  late.trial_id = id;
  late.attempt = 1;
  late.results.push_back(
      {99, protocol::RawResult::FromJson(Json{{"training_iteration", before + 1}, {"loss", -7}})});
  runner_->HandleResultBatch(frozen, late);
  EXPECT_EQ(runner_->FindTrial(id)->iteration, before);
  storage::WriteBatch batch;
  runner_->FlushTo(batch);
  EXPECT_TRUE(store_.Commit(batch).ok());
  int stops = 0, acks = 0;
  for (size_t i = mark; i < sink_.sent.size(); ++i) {
    const auto& s = sink_.sent[i];
    if (s.worker_id != frozen) continue;
    if (auto* st = std::get_if<protocol::Stop>(&s.message.body)) {
      EXPECT_EQ(st->attempt, 1u);
      ++stops;
    }
    if (const auto* ack = std::get_if<protocol::Ack>(&s.message.body)) {
      protocol::ForEachAck(*ack, [&](const protocol::AckEntry&) { ++acks; });
    }
  }
  EXPECT_EQ(stops, 1);
  EXPECT_EQ(acks, 1);  // acknowledged so its outbox does not replay it forever
  mark = sink_.sent.size();

  // It re-registers listing that actor: told to stop it again.
  protocol::Register r;
  r.worker_id = frozen;
  r.resources = {{"CPU", 1}};
  r.trainables = {"quadratic"};
  r.live_actors = {{id, 1, 0, 1, false, {}}};
  runner_->HandleRegister(r);
  int restops = 0;
  for (size_t i = mark; i < sink_.sent.size(); ++i) {
    restops += std::holds_alternative<protocol::Stop>(sink_.sent[i].message.body) ? 1 : 0;
  }
  EXPECT_EQ(restops, 1);
  RunToEnd(exp);
  for (const auto& res : StoredResults(id)) EXPECT_NE(res["loss"], -7);
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// head killed mid-run -> restarted on the same store -> the workers re-register
// with their live actors -> trials continue on them: no restore, no new
// attempt, unacknowledged results replayed, every iteration stored once.
TEST_F(TrialRunnerTest, ReattachesLiveActorsAfterAHeadRestart) {
  fleet_->Register("w1", 2);
  fleet_->Register("w2", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 6,
      "stop": {"training_iteration": 30}, "checkpoint": {"frequency": 10}})");
  for (int i = 0; i < 8; ++i) fleet_->Turn();
  // The crash: the last turn's results were never committed, and what the
  // head had queued is lost.
  CrashHead();
  const Experiment* e = runner_->FindExperiment(exp);
  EXPECT_EQ(e->counts.at(TrialStatus::kRunning), 4);
  fleet_->Reregister("w1", 2);
  fleet_->Reregister("w2", 2);
  EXPECT_GT(fleet_->replayed, 0);
  RunToEnd(exp, 5000);
  for (const auto& id : runner_->FindExperiment(exp)->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated);
    EXPECT_EQ(t->attempt, 1u) << id;
    EXPECT_EQ(t->num_restores, 0) << id;
    EXPECT_EQ(t->num_failures, 0) << id;
    auto results = StoredResults(id);
    ASSERT_EQ(results.size(), 30u) << id;
    for (int64_t i = 1; i <= 30; ++i) {
      EXPECT_EQ(results[i - 1]["training_iteration"], i);
      EXPECT_DOUBLE_EQ(results[i - 1]["x"].get<double>(), FakeWorkerFleet::Quadratic(t->config, i));
    }
  }
  EXPECT_EQ(fleet_->restores, 0);
  EXPECT_DOUBLE_EQ(runner_->ledger().Available().Get("CPU"), 4);
}

// A user's pause withdrawn before it took effect stays withdrawn across a head
// restart (the stored `held` was left true, and re-attach paused the trial).
TEST_F(TrialRunnerTest, AResumeBeforeThePauseTookEffectSurvivesARestart) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 1000}})");
  for (int i = 0; i < 3; ++i) fleet_->Turn();
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  ASSERT_TRUE(runner_->PauseTrial(id, /*hold=*/true).ok());
  Commit();  // held = true is stored
  ASSERT_TRUE(runner_->Resume(id).ok());
  Commit();
  {
    auto stored = store_.Get(storage::Family::kTrials, id);
    ASSERT_TRUE(stored.ok() && stored->has_value());
    EXPECT_EQ(Json::parse(**stored).value("held", true), false) << "the withdrawn pause is stored";
  }
  CrashHead();
  fleet_->Reregister("w1", 1);
  for (int i = 0; i < 5; ++i) fleet_->Turn();
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kRunning);
  EXPECT_FALSE(t->held);
  EXPECT_EQ(fleet_->saves, 0) << "no pause checkpoint";
}

// A trial stopped while it waits for its actor to re-attach stays stopped:
// neither its worker coming back (its actor gets a STOP) nor the grace
// running out brings it back (it was queued again, or given the actor and
// trained on).
TEST_F(TrialRunnerTest, ATrialStoppedDuringTheReattachGraceStaysStopped) {
  fleet_->Register("w1", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 1000}})");
  for (int i = 0; i < 5; ++i) fleet_->Turn();
  CrashHead();
  const auto ids = runner_->FindExperiment(exp)->trial_ids;
  ASSERT_EQ(runner_->FindTrial(ids[0])->status, TrialStatus::kRunning);
  ASSERT_TRUE(runner_->Stop(ids[0]).ok());
  ASSERT_TRUE(runner_->Stop(ids[1]).ok());
  EXPECT_EQ(runner_->FindTrial(ids[0])->status, TrialStatus::kTerminated);
  const int64_t stops_before = fleet_->stops;
  fleet_->Reregister("w1", 2);  // trial 0's worker comes back with both actors
  for (int i = 0; i < 3; ++i) fleet_->Turn();
  EXPECT_EQ(fleet_->stops, stops_before + 2) << "the stopped trials' actors must be stopped";
  clock_.AdvanceMs(10'000);  // far past the grace
  for (int i = 0; i < 5; ++i) {
    fleet_->Turn();
    fleet_->Heartbeat();
  }
  for (const auto& id : ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated) << id;
    EXPECT_EQ(t->phase, TrialPhase::kIdle) << id;
  }
  EXPECT_TRUE(runner_->FindExperiment(exp)->finished);
  EXPECT_DOUBLE_EQ(runner_->ledger().Available().Get("CPU"), 2);
}

// A worker that comes back after a head restart with less than its actors'
// recorded placements hold: what fits is re-attached, the rest is stopped and
// started again (re-reserving without a capacity check booked CPUs twice).
TEST_F(TrialRunnerTest, ActorsWhosePlacementNoLongerFitsAreStartedAgain) {
  fleet_->Register("w1", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 40}, "checkpoint": {"frequency": 2}})");
  for (int i = 0; i < 6; ++i) fleet_->Turn();
  CrashHead();
  const int64_t stops_before = fleet_->stops;
  fleet_->Reregister("w1", 1);  // came back with one CPU
  fleet_->Turn();
  EXPECT_EQ(fleet_->stops, stops_before + 1);
  EXPECT_DOUBLE_EQ(runner_->ledger().AvailableOf("w1").Get("CPU"), 0);
  RunToEnd(exp, 5000);
  std::vector<uint64_t> attempts;
  for (const auto& id : runner_->FindExperiment(exp)->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated) << id;
    EXPECT_EQ(t->num_failures, 0) << id;
    attempts.push_back(t->attempt);
    EXPECT_EQ(StoredResults(id).size(), 40u) << id;
  }
  std::sort(attempts.begin(), attempts.end());
  EXPECT_EQ(attempts, (std::vector<uint64_t>{1, 2}));
}

// a worker that does not come back within the grace period: its trials
// restart from their newest persistent checkpoint elsewhere.
TEST_F(TrialRunnerTest, RestartsTrialsWhoseWorkerNeverReturns) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 30},
      "checkpoint": {"frequency": 5}})");
  for (int i = 0; i < 12; ++i) fleet_->Turn();
  sink_.TakeAll();
  Reset();
  fleet_->Register("w2", 1);  // a different worker; w1 is gone
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  for (int i = 0; i < 5; ++i) {
    fleet_->Turn();
    clock_.AdvanceMs(50);
    fleet_->Heartbeat();
  }
  EXPECT_EQ(runner_->FindTrial(id)->attempt, 1u);  // still waiting (grace 600 ms)
  RunToEnd(exp, 5000);
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->attempt, 2u);
  EXPECT_EQ(t->num_restores, 1);
  EXPECT_EQ(t->num_failures, 0);
  auto results = StoredResults(id);
  ASSERT_EQ(results.size(), 30u);
  for (int64_t i = 1; i <= 30; ++i) EXPECT_EQ(results[i - 1]["training_iteration"], i);
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// errored trials -> resume --errored retry keeps their id and restores from
// their checkpoint; --errored restart adds fresh trials; --no-unfinished
// terminates what is left.
TEST_F(TrialRunnerTest, ResumePoliciesRetryRestartAndTerminate) {
  fleet_->Register("w1", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 8}, "checkpoint": {"frequency": 2}})");
  auto ids = runner_->FindExperiment(exp)->trial_ids;
  fleet_->FailAt(ids[0], 5, /*once=*/false);
  fleet_->FailAt(ids[1], 3, /*once=*/false);
  RunToEnd(exp);
  ASSERT_EQ(runner_->FindTrial(ids[0])->status, TrialStatus::kError);
  ASSERT_EQ(runner_->FindTrial(ids[1])->status, TrialStatus::kError);

  fleet_->FailAt(ids[0], 1000);  // fixed
  auto retried = runner_->ResumeExperiment(exp, "retry", true);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ((*retried)["retried"].size(), 2u);
  EXPECT_FALSE(runner_->FindExperiment(exp)->finished);
  fleet_->FailAt(ids[1], 1000);
  RunToEnd(exp);
  for (const auto& id : ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated) << id;
    EXPECT_EQ(t->num_restores, 1) << id;  // from its checkpoint at 4 / 2
    EXPECT_EQ(StoredResults(id).size(), 8u);
  }

  // restart: a new trial with the same config, from scratch.
  std::string exp2 = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 4}})");
  const TrialId bad = runner_->FindExperiment(exp2)->trial_ids[0];
  fleet_->FailAt(bad, 2, /*once=*/false);
  RunToEnd(exp2);
  auto restarted = runner_->ResumeExperiment(exp2, "restart", true);
  ASSERT_TRUE(restarted.ok());
  ASSERT_EQ((*restarted)["restarted"].size(), 1u);
  const TrialId fresh((*restarted)["restarted"][0]["trial_id"].get<std::string>());
  EXPECT_NE(fresh, bad);
  RunToEnd(exp2);
  EXPECT_EQ(runner_->FindTrial(bad)->status, TrialStatus::kError);
  EXPECT_EQ(runner_->FindTrial(fresh)->status, TrialStatus::kTerminated);
  EXPECT_EQ(runner_->FindTrial(fresh)->config, runner_->FindTrial(bad)->config);

  // --no-unfinished: everything still open is terminated, nothing new starts.
  std::string exp3 = Submit(R"({"trainable": "quadratic", "num_samples": 3,
      "stop": {"training_iteration": 100000}})");
  fleet_->Turn();
  auto ended = runner_->ResumeExperiment(exp3, "", false);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ((*ended)["terminated"].size(), 3u);
  EXPECT_TRUE(runner_->FindExperiment(exp3)->finished);
  EXPECT_FALSE(runner_->ResumeExperiment(exp3, "later", true).ok());
  EXPECT_EQ(runner_->ResumeExperiment("e9999", "", true).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// crash while a RESET (actor reuse) is in flight -> the worker still has the
// actor under the finished trial's key: it is stopped; the trial that was to
// reuse it waits out the grace and starts on a fresh actor.
TEST_F(TrialRunnerTest, RestartDuringActorReuseEndsConsistent) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2, "reuse_actors": true,
      "stop": {"training_iteration": 3}})");
  const auto ids = runner_->FindExperiment(exp)->trial_ids;
  // Run until the first trial is done and the RESET for the second is sent.
  for (int i = 0; i < 50 && sink_.Count<protocol::Reset>() == 0; ++i) {
    runner_->Tick();
    storage::WriteBatch b;
    runner_->FlushTo(b);
    ASSERT_TRUE(store_.Commit(b).ok());
    if (sink_.Count<protocol::Reset>() > 0) break;
    fleet_->Turn();
  }
  ASSERT_EQ(sink_.Count<protocol::Reset>(), 1u);
  ASSERT_EQ(runner_->FindTrial(ids[0])->status, TrialStatus::kTerminated);
  CrashHead();  // the RESET never reaches the worker
  fleet_->Reregister("w1", 1);
  RunToEnd(exp, 5000);
  for (const auto& id : ids) {
    EXPECT_EQ(runner_->FindTrial(id)->status, TrialStatus::kTerminated) << id;
    auto results = StoredResults(id);
    ASSERT_EQ(results.size(), 3u) << id;
    for (int64_t i = 1; i <= 3; ++i) EXPECT_EQ(results[i - 1]["training_iteration"], i);
  }
  EXPECT_GE(fleet_->stops, 1);  // the stale actor of the finished trial
  EXPECT_EQ(runner_->groups().NumInUse(), 0);
  EXPECT_DOUBLE_EQ(runner_->ledger().Available().Get("CPU"), 1);
}

// crash while trials wait PENDING with staged groups -> after the restart
// they start, none twice, none lost, no group leaks.
TEST_F(TrialRunnerTest, RestartWithPendingTrialsAndStagedGroupsEndsConsistent) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 3,
      "stop": {"training_iteration": 5}, "checkpoint": {"frequency": 2}})");
  fleet_->Turn();
  EXPECT_EQ(runner_->groups().NumStagingTotal(), 2);
  CrashHead();
  fleet_->Reregister("w1", 1);
  RunToEnd(exp, 5000);
  const auto ids = runner_->FindExperiment(exp)->trial_ids;
  ASSERT_EQ(ids.size(), 3u);
  for (const auto& id : ids) {
    EXPECT_EQ(runner_->FindTrial(id)->status, TrialStatus::kTerminated) << id;
    EXPECT_EQ(runner_->FindTrial(id)->attempt, 1u) << id;
    EXPECT_EQ(StoredResults(id).size(), 5u) << id;
  }
  EXPECT_EQ(runner_->groups().NumInUse(), 0);
  EXPECT_EQ(runner_->groups().NumStagingTotal(), 0);
}

// A TRAIN sent while its worker was reconnecting never arrived. When the
// worker registers again (a new incarnation) with the actor idle, the head
// sends the TRAIN again with the same rid, and the trial goes on: no failure,
// every iteration once.
TEST_F(TrialRunnerTest, ATrainLostInAReconnectIsSentAgainWithTheSameRid) {
  const std::string exp = StartQuadraticTrialAt(6, 2);
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  fleet_->Turn();
  uint64_t lost_rid = 0;
  for (const auto& sent : sink_.TakeAll()) {  // lost on the wire
    if (const auto* train = std::get_if<protocol::Train>(&sent.message.body)) lost_rid = train->rid;
  }
  ASSERT_NE(lost_rid, 0u);
  fleet_->Reregister("w1", 1, /*incarnation=*/2);
  uint64_t resent_rid = 0;
  for (const auto& sent : sink_.sent) {
    if (const auto* train = std::get_if<protocol::Train>(&sent.message.body)) resent_rid = train->rid;
  }
  EXPECT_EQ(resent_rid, lost_rid);
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->num_failures, 0) << t->error;
  EXPECT_EQ(t->attempt, 1u);
  EXPECT_EQ(StoredResults(id).size(), 6u);
}

// A CREATE_ACTOR lost the same way: the worker reports no such actor; the
// trial starts again under a new attempt, and that is not a failure.
TEST_F(TrialRunnerTest, AStartLostInAReconnectStartsAgainWithoutAFailure) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 3}})");
  for (int i = 0; i < 50 && sink_.Count<protocol::CreateActor>() == 0; ++i) runner_->Tick();
  storage::WriteBatch b;
  runner_->FlushTo(b);
  ASSERT_TRUE(store_.Commit(b).ok());
  ASSERT_EQ(sink_.Count<protocol::CreateActor>(), 1u);
  sink_.TakeAll();  // lost on the wire
  fleet_->Reregister("w1", 1, /*incarnation=*/2);
  RunToEnd(exp);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->num_failures, 0) << t->error;
  EXPECT_EQ(t->attempt, 2u);
  EXPECT_EQ(StoredResults(t->trial_id).size(), 3u);
}

// The head itself did not run for longer than the liveness window (SIGSTOP,
// an overloaded machine): its workers are judged by what arrives afterwards,
// not declared dead for the head's own silence.
TEST_F(TrialRunnerTest, AHeadStallDoesNotKillItsWorkers) {
  const std::string exp = StartQuadraticTrialAt(5, 2);
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  clock_.AdvanceMs(5000);  // stalled: no Tick, nothing read
  runner_->Tick();
  EXPECT_NE(runner_->registry().FindAlive("w1"), nullptr);
  EXPECT_EQ(runner_->FindTrial(id)->status, TrialStatus::kRunning);
  RunToEnd(exp);
  EXPECT_EQ(runner_->FindTrial(id)->num_failures, 0);
  // Liveness still works after a stall: a worker that stays silent dies.
  for (int i = 0; i < 10; ++i) {
    clock_.AdvanceMs(DefaultOptions().heartbeat_ms);
    runner_->Tick();
  }
  EXPECT_EQ(runner_->registry().FindAlive("w1"), nullptr);
}

// Idle head loop turns come a heartbeat and a little apart; they are not
// stalls, and a silent worker dies within its window. (When every such turn
// counted as a stall, the silence clocks restarted at each one and a dead
// worker was never declared dead.)
TEST_F(TrialRunnerTest, IdleLoopTurnsAreNotStallsAndASilentWorkerDies) {
  fleet_->Register("w1", 1);
  runner_->Tick();
  const int64_t hb = DefaultOptions().heartbeat_ms;
  const int64_t window = hb * DefaultOptions().liveness;
  for (int64_t waited = 0; waited <= window + 2 * hb; waited += hb + 1) {
    clock_.AdvanceMs(hb + 1);
    runner_->Tick();
  }
  EXPECT_EQ(runner_->registry().FindAlive("w1"), nullptr);
}

// A REGISTER with amounts no machine has (CPU 1e12 took every trial; two of
// 9e14 overflowed the cluster total; NaN, Inf and negatives became 0) is
// refused and changes nothing; absurd but valid totals add up without overflow.
TEST_F(TrialRunnerTest, ARegisterWithImpossibleResourcesIsRefusedAndChangesNothing) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double cpus : {std::nan(""), inf, -inf, -1.0, 1e15, 9e14, 1e12, 100'001.0}) {
    protocol::Register r;
    r.worker_id = "bad";
    r.resources = {{"CPU", cpus}};
    runner_->HandleRegister(r);
    EXPECT_EQ(runner_->registry().Find("bad"), nullptr) << cpus;
    EXPECT_TRUE(sink_.sent.empty()) << "no REGISTERED for CPU " << cpus;
  }
  protocol::Register dup_gpus;
  dup_gpus.worker_id = "bad";
  dup_gpus.resources = {{"CPU", 1}, {"GPU", 2}};
  dup_gpus.gpu_ids = {0, 0};
  runner_->HandleRegister(dup_gpus);
  EXPECT_EQ(runner_->registry().Find("bad"), nullptr);
  for (int i = 0; i < 200; ++i) {
    protocol::Register big;
    big.worker_id = "big" + std::to_string(i);
    big.resources = {{"CPU", 100'000}, {"memory", 1e14}};
    runner_->HandleRegister(big);
  }
  EXPECT_EQ(runner_->registry().NumAlive(), 200u);
  EXPECT_GT(runner_->ledger().Total().Get("memory"), 1e14) << "saturates, never negative";
}

TEST_F(TrialRunnerTest, SpecSizesAreCheckedForOverflowAndCapped) {
  fleet_->Register("w1", 1);
  struct Case {
    std::string spec;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"({"trainable": "quadratic", "num_samples": 4611686018427387904,
           "param_space": {"a": {"grid_search": [1, 2, 3, 4]}}})", "more than 2^64"},
      {R"({"trainable": "quadratic", "num_samples": 18446744073709551615})",
       "must be at most 9223372036854775807, got 18446744073709551615"},
      {R"({"trainable": "quadratic", "num_samples": 100001})", "--max-trials-per-experiment"},
      {R"({"trainable": "quadratic", "resources": {"bundles": [{"CPU": 1e15}]}})",
       "is infeasible"},
      // tests/fuzz finding resource-sum-overflow: two bundles whose sum overflowed.
      {R"({"trainable": "quadratic", "resources": {"bundles": [{"CPU": 9e14}, {"CPU": 9e14}]}})",
       "is infeasible"},
      {R"({"trainable": "quadratic", "param_space": {"x": {"uniform": [-1e308, 1e308]}}})",
       "must be finite"},
      {R"({"trainable": "quadratic", "name": "evil\n[info] forged log line"})",
       "control characters"},
      {R"({"trainable": "quadratic", "name": "\u001b[2Jcleared"})", "control characters"},
  };
  for (const auto& c : cases) {
    auto r = runner_->Submit(Json::parse(c.spec));
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.spec << " -> " << r.status().message();
  }
  EXPECT_TRUE(runner_->experiments().empty());
  RunnerOptions small = DefaultOptions();
  small.max_trials_per_experiment = 3;
  Reset(small);
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 3})");
  auto added = runner_->AddTrial(exp, Json::object());
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.status().message().find("--max-trials-per-experiment"), std::string::npos);
}

// HasUnflushedChanges: whether a read now would show what no commit holds.
TEST_F(TrialRunnerTest, UnflushedChangesAreThoseTheNextFlushWrites) {
  storage::WriteBatch batch;
  runner_->FlushTo(batch);
  EXPECT_FALSE(runner_->HasUnflushedChanges());
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 3}})");
  EXPECT_TRUE(runner_->HasUnflushedChanges()) << "a submitted experiment";
  batch = storage::WriteBatch();
  runner_->FlushTo(batch);
  EXPECT_FALSE(batch.empty());
  EXPECT_FALSE(runner_->HasUnflushedChanges());
  // Results: each turn that took one has something to write, and nothing is
  // left once it is flushed.
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  int turns_with_changes = 0;
  for (int i = 0; i < 50 && runner_->FindTrial(id)->status != TrialStatus::kTerminated; ++i) {
    fleet_->Turn();
    if (runner_->HasUnflushedChanges()) ++turns_with_changes;
    Commit();
    EXPECT_FALSE(runner_->HasUnflushedChanges());
  }
  EXPECT_EQ(runner_->FindTrial(id)->status, TrialStatus::kTerminated);
  EXPECT_GT(turns_with_changes, 0);
}

// Reads are answered on the head's loop: a reply walks at most one page
// (500 trials, 1,000 results) and says where the next one starts.
TEST_F(TrialRunnerTest, ClientReadsArePaged) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 2500}})");
  for (int i = 0; i < 1199; ++i) ASSERT_TRUE(runner_->AddTrial(exp, Json{{"lr", 0.1}}).ok());
  runner_->Tick();
  const size_t total = runner_->FindExperiment(exp)->trial_ids.size();
  ASSERT_EQ(total, 1200u);
  ClientService clients(*runner_);
  std::vector<TrialId> seen;
  for (const char* op : {"trials", "status"}) {
    seen.clear();
    Json offset = 0;
    int pages = 0;
    while (!offset.is_null()) {
      Json reply = clients.Handle(Json{{"op", op}, {"experiment_id", exp}, {"offset", offset}},
                                  ClientCaller::Anonymous());
      ASSERT_TRUE(reply.value("ok", false)) << reply.dump().substr(0, 300);
      EXPECT_LE(reply["trials"].size(), 500u);
      EXPECT_EQ(reply["total"], total);
      for (const auto& t : reply["trials"]) seen.emplace_back(t["trial_id"].get<std::string>());
      offset = reply["next_offset"];
      ++pages;
    }
    EXPECT_EQ(pages, 3) << op;
    EXPECT_EQ(seen, runner_->FindExperiment(exp)->trial_ids) << op;
  }
  Json bad = clients.Handle(Json{{"op", "trials"}, {"experiment_id", exp}, {"offset", -1}},
                            ClientCaller::Anonymous());
  EXPECT_FALSE(bad.value("ok", true));

  const TrialId first = runner_->FindExperiment(exp)->trial_ids[0];
  RunUntilIteration(first, 2500);
  fleet_->Turn();
  Json page1 =
      clients.Handle(Json{{"op", "results"}, {"trial_id", first}}, ClientCaller::Anonymous());
  ASSERT_EQ(page1["results"].size(), 1000u) << page1.dump().substr(0, 300);
  EXPECT_EQ(page1["next_offset"], 1000);
  Json page3 = clients.Handle(Json{{"op", "results"}, {"trial_id", first}, {"offset", 2000}},
                              ClientCaller::Anonymous());
  ASSERT_EQ(page3["results"].size(), 500u);
  EXPECT_EQ(page3["results"][0]["training_iteration"], 2001);
  EXPECT_TRUE(page3["next_offset"].is_null());
}

// A start is sent only after the commit that stores its attempt: a head
// killed between its Tick and its commit sent nothing of it, so no worker
// ever hosts an attempt the store does not know.
TEST_F(TrialRunnerTest, CreateActorLeavesOnlyAfterTheCommitThatStoresItsAttempt) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 3}})");
  ASSERT_NO_FATAL_FAILURE(CommitRunner());
  for (int i = 0; i < 50 && sink_.Count<protocol::CreateActor>() == 0; ++i) runner_->Tick();
  ASSERT_EQ(sink_.Count<protocol::CreateActor>(), 1u);
  for (const auto& sent : sink_.sent) {
    EXPECT_EQ(sent.timing, SendTiming::kAfterCommit) << protocol::CommandName(sent.message.body);
  }
  fleet_->DeliverOnlyWhatWasSentNow();
  EXPECT_EQ(fleet_->creates, 0);
  CrashHead();
  fleet_->Reregister("w1", 1);
  RunToEnd(exp, 5000);
  const Trial* t = runner_->FindTrial(runner_->FindExperiment(exp)->trial_ids[0]);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->attempt, 1u);
  EXPECT_EQ(t->num_failures, 0) << t->error;
}

// A worker that reports an attempt the store never saw (a store written by a
// head that sent CREATE_ACTOR before its commit, or restored from an older
// copy): the next start uses a later attempt, or the worker, still holding
// that actor, refuses the new one ("already exists") and a healthy trial fails.
TEST_F(TrialRunnerTest, AnAttemptAWorkerReportsIsNeverNamedAgain) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 3}})");
  ASSERT_NO_FATAL_FAILURE(CommitRunner());
  CrashHead();
  runner_->Tick();
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  ASSERT_EQ(runner_->FindTrial(id)->attempt, 0u);
  FakeWorkerFleet::Actor stray;
  stray.worker_id = "w1";
  stray.trainable = "quadratic";
  fleet_->actors[id + "#1"] = stray;
  sink_.TakeAll();
  fleet_->Reregister("w1", 1);
  RunToEnd(exp, 5000);
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->attempt, 2u) << "attempt 1 was named again";
  EXPECT_EQ(t->num_failures, 0) << t->error;
  EXPECT_EQ(StoredResults(id).size(), 3u);
  EXPECT_EQ(fleet_->creates, 1) << "one new actor after the restart";
}

// The same crash with two trials starting at once: every trial runs to the
// end with no failure and each iteration stored once.
TEST_F(TrialRunnerTest, AStartLostInACrashFailsNoTrial) {
  fleet_->Register("w1", 2);
  std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 4}})");
  // The submission is durable before the client hears of it.
  ASSERT_NO_FATAL_FAILURE(CommitRunner());
  for (int i = 0; i < 50 && fleet_->creates == 0; ++i) {
    runner_->Tick();
    if (sink_.Count<protocol::CreateActor>() > 0) break;
    fleet_->Turn();
  }
  ASSERT_GT(sink_.Count<protocol::CreateActor>(), 0u);
  fleet_->DeliverOnlyWhatWasSentNow();
  CrashHead();
  fleet_->Reregister("w1", 2);
  ASSERT_NE(runner_->FindExperiment(exp), nullptr);
  RunToEnd(exp, 5000);
  for (const auto& id : runner_->FindExperiment(exp)->trial_ids) {
    const Trial* t = runner_->FindTrial(id);
    EXPECT_EQ(t->status, TrialStatus::kTerminated) << id;
    EXPECT_EQ(t->num_failures, 0) << id << ": " << t->error;
    EXPECT_EQ(StoredResults(id).size(), 4u) << id;
  }
}

// Issue 8: "done": 1, "yes", null or an object, or "should_checkpoint": "x"
// in a trainable's result aborted the head, again on every replay. Now the
// trial fails with the reason, the batch is acknowledged (never replayed) and
// nothing of it is stored.
TEST_F(TrialRunnerTest, ABufferedBatchIsStoredWholeAndCheckpointedOnce) {
  fleet_->Register("w1", 1);
  std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 50},
      "checkpoint": {"num_to_keep": 5}})");
  runner_->Tick();
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  RunUntilIteration(id, 2);
  fleet_->Turn();
  const Trial* t = runner_->FindTrial(id);
  ASSERT_EQ(t->status, TrialStatus::kRunning);
  const int64_t next = t->iteration + 1;
  // The TRAIN the runner sent for the fleet's last answer: its batch is ours.
  uint64_t train_rid = 0;
  for (const auto& sent : sink_.TakeAll()) {
    if (const auto* train = std::get_if<protocol::Train>(&sent.message.body)) train_rid = train->rid;
  }
  ASSERT_NE(train_rid, 0u);
  // Three results; the middle one asks for a checkpoint (Ray goes on storing
  // the results after it: only a stop ignores the rest).
  protocol::ResultBatch batch;
  batch.rid = train_rid;
  batch.trial_id = id;
  batch.attempt = t->attempt;
  for (int64_t k = 0; k < 3; ++k) {
    Json r{{"training_iteration", next + k}, {"loss", 1.0}};
    if (k == 1) r["should_checkpoint"] = true;
    batch.results.push_back({static_cast<uint64_t>(500 + k), protocol::RawResult::FromJson(r)});
  }
  runner_->HandleResultBatch("w1", batch);
  storage::WriteBatch b;
  runner_->FlushTo(b);
  ASSERT_TRUE(store_.Commit(b).ok());
  EXPECT_EQ(t->iteration, next + 2);
  auto stored = StoredResults(id);
  ASSERT_EQ(stored.size(), static_cast<size_t>(next + 2)) << "no gap after the checkpoint trigger";
  for (size_t k = 0; k < stored.size(); ++k) {
    EXPECT_EQ(stored[k]["training_iteration"], static_cast<int64_t>(k + 1));
  }
  int saves = 0;
  for (const auto& sent : sink_.sent) {
    saves += std::holds_alternative<protocol::Save>(sent.message.body) ? 1 : 0;
  }
  EXPECT_EQ(saves, 1) << "the batch is decided once";
}

TEST_F(TrialRunnerTest, AResultThatSkipsIterationsFailsItsTrialAndStoresNothing) {
  fleet_->Register("w1", 1);
  for (int64_t jump : {int64_t{2}, int64_t{1} << 62}) {
    std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 50}})");
    runner_->Tick();
    const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
    RunUntilIteration(id, 2);
    fleet_->Turn();
    const Trial* t = runner_->FindTrial(id);
    ASSERT_EQ(t->status, TrialStatus::kRunning);
    const int64_t last = t->iteration;
    protocol::ResultBatch batch;
    batch.trial_id = id;
    batch.attempt = t->attempt;
    // A valid next result, then the jump: the batch is refused whole.
    batch.results.push_back({900, protocol::RawResult::FromJson(
                                      Json{{"training_iteration", last + 1}, {"loss", 1.0}})});
    batch.results.push_back({901, protocol::RawResult::FromJson(Json{
                                      {"training_iteration", last + 1 + jump}, {"loss", 1.0}})});
    runner_->HandleResultBatch("w1", batch);
    EXPECT_EQ(t->status, TrialStatus::kError);
    EXPECT_NE(t->error.find("does not follow iteration " + std::to_string(last + 1)),
              std::string::npos)
        << t->error;
    storage::WriteBatch b;
    runner_->FlushTo(b);
    ASSERT_TRUE(store_.Commit(b).ok());
    EXPECT_EQ(StoredResults(id).size(), static_cast<size_t>(last));
    EXPECT_EQ(t->iteration, last);
    bool acked = false;
    for (const auto& sent : sink_.sent) {
      if (const auto* ack = std::get_if<protocol::Ack>(&sent.message.body)) {
        protocol::ForEachAck(*ack, [&](const protocol::AckEntry& e) {
          acked = acked || (e.trial_id == id.str() && e.seq >= 901);
        });
      }
    }
    EXPECT_TRUE(acked);
    for (int i = 0; i < 300; ++i) {  // let the group go before the next round
      fleet_->Turn();
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
    }
  }
}

TEST_F(TrialRunnerTest, AResultWithNonBooleanFlagsFailsItsTrialAndIsAcknowledged) {
  fleet_->Register("w1", 1);
  const std::vector<std::pair<std::string, Json>> bad = {
      {"done", 1}, {"done", "yes"}, {"done", nullptr}, {"done", Json::object()},
      {"should_checkpoint", "x"}};
  for (const auto& [flag, value] : bad) {
    std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 50}})");
    runner_->Tick();  // generates the trial
    ASSERT_EQ(runner_->FindExperiment(exp)->trial_ids.size(), 1u);
    const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
    // (The previous trial's group is released after pg_removal_delay_ms.)
    RunUntilIteration(id, 2);
    const Trial* t = runner_->FindTrial(id);
    ASSERT_EQ(t->status, TrialStatus::kRunning) << flag << "=" << value.dump();
    fleet_->Turn();  // the fleet answers what is pending before the sink is read
    ASSERT_EQ(t->status, TrialStatus::kRunning);
    const int64_t next = t->iteration + 1;
    protocol::ResultBatch batch;
    batch.trial_id = id;
    batch.attempt = t->attempt;
    Json result{{"training_iteration", next}, {"loss", 1.0}};
    result[flag] = value;
    batch.results.push_back({1000, protocol::RawResult::FromJson(result)});
    runner_->HandleResultBatch("w1", batch);
    EXPECT_EQ(t->status, TrialStatus::kError) << flag << "=" << value.dump();
    EXPECT_NE(t->error.find("'" + flag + "' must be true or false"), std::string::npos) << t->error;
    EXPECT_LT(t->iteration, next);
    storage::WriteBatch b;
    runner_->FlushTo(b);
    ASSERT_TRUE(store_.Commit(b).ok());
    EXPECT_EQ(StoredResults(id).size(), static_cast<size_t>(next - 1)) << "nothing of it stored";
    bool acked = false;
    // Looked at, not taken: the fleet still answers the STOP of the actor.
    for (const auto& sent : sink_.sent) {
      if (const auto* ack = std::get_if<protocol::Ack>(&sent.message.body)) {
        protocol::ForEachAck(*ack, [&](const protocol::AckEntry& e) {
          acked = acked || (e.trial_id == id.str() && e.seq >= 1000);
        });
      }
    }
    EXPECT_TRUE(acked) << "a refused batch is acknowledged so that it is never replayed";
  }
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// A result batch stores its results and not the trial record (which repeats
// the last result; rewriting it with every result was a quarter of the head's
// loop time at buffer 1). The record is written at state changes; a restarted
// head reads a live trial's progress back from its newest stored result, and
// the trial goes on from there with every iteration stored once.
TEST_F(TrialRunnerTest, ResultsAreStoredWithoutTheTrialRecordAndARestartReadsThemBack) {
  const std::string exp = StartQuadraticTrialAt(/*stop=*/12, /*n=*/5);
  const TrialId id = runner_->FindExperiment(exp)->trial_ids[0];
  Commit();
  const int64_t reached = runner_->FindTrial(id)->iteration;
  const Json last = runner_->FindTrial(id)->last_result.Get();
  ASSERT_GE(reached, 5);
  auto record = store_.Get(storage::Family::kTrials, id);
  ASSERT_TRUE(record.ok() && record->has_value());
  const Json stored = Json::parse(**record);
  EXPECT_EQ(stored["status"], "RUNNING");
  EXPECT_EQ(stored["iteration"], 0) << "written when the trial started, not with its results";
  EXPECT_EQ(StoredResults(id).size(), static_cast<size_t>(reached));

  CrashHead();
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->iteration, reached);
  EXPECT_EQ(t->last_result.Get(), last);
  fleet_->Reregister("w1", 1);
  RunToEnd(exp);
  t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->iteration, 12);
  const std::vector<Json> results = StoredResults(id);
  ASSERT_EQ(results.size(), 12u);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i]["training_iteration"], static_cast<int64_t>(i + 1));
  }
  // The finished trial's record holds its last result: a restart reads none.
  record = store_.Get(storage::Family::kTrials, id);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ(Json::parse(**record)["iteration"], 12);
  EXPECT_EQ(Json::parse(**record)["last_result"], results.back());
}

// One quadratic trial on "w1" under a train_with_ack_ms, and the timings of
// the TRAINs the runner sent.
class TrainWithAckTest : public TrialRunnerTest {
 protected:
  // Its CREATE_ACTOR and first two TRAINs answered in the same fake
  // millisecond.
  void StartTrial(TimeMs train_with_ack_ms) {
    RunnerOptions o = DefaultOptions();
    o.train_with_ack_ms = train_with_ack_ms;
    Reset(o);
    fleet_->Register("w1", 1);
    Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": 10}})");
    fleet_->Turn();
    fleet_->Turn();
  }
  // Those the last turn's answers made (not yet answered).
  std::vector<SendTiming> TrainTimings() const {
    std::vector<SendTiming> timings;
    for (const auto& sent : sink_.sent) {
      if (std::holds_alternative<protocol::Train>(sent.message.body)) {
        timings.push_back(sent.timing);
      }
    }
    return timings;
  }
};

// A trial whose last TRAIN took at least train_with_ack_ms (from when the
// worker could start on it to its RESULT) continues with SendTiming::kWithAck
// (the server holds the TRAIN for the commit and sends it inside the ACK);
// one that answered sooner continues with kNow.
TEST_F(TrainWithAckTest, ATrialWhoseLastTrainTookLongGetsItsNextWithTheAck) {
  StartTrial(50);
  ASSERT_EQ(TrainTimings(), std::vector<SendTiming>{SendTiming::kNow});
  // Answered a threshold after it was sent: the next waits for the ACK.
  clock_.AdvanceMs(50);
  fleet_->Turn();
  ASSERT_EQ(TrainTimings(), std::vector<SendTiming>{SendTiming::kWithAck});
  clock_.AdvanceMs(49);
  fleet_->Turn();
  ASSERT_EQ(TrainTimings(), std::vector<SendTiming>{SendTiming::kNow});
}

TEST_F(TrainWithAckTest, TrainWithAckMsZeroNeverHoldsATrain) {
  StartTrial(0);
  fleet_->Heartbeat();
  clock_.AdvanceMs(200);  // within the liveness window (100 ms x 3)
  fleet_->Turn();
  EXPECT_EQ(TrainTimings(), std::vector<SendTiming>{SendTiming::kNow});
}

}  // namespace
}  // namespace ztune::head
