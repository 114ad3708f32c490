// The fixture of the TrialRunner's unit tests: a runner over an in-memory
// store with a fake clock, scripted workers (FakeWorkerFleet) answering what
// it sends, and strict invariants (every phase change and trial checked).
// Used by trial_runner_test.cc and trial_runner_phases_test.cc.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "head/stored_result.h"
#include "head/trial_runner.h"
#include "storage/in_memory_store.h"
#include "storage/keys.h"
#include "tests/fakes/fake_worker_fleet.h"
#include "tests/fakes/recording_command_sink.h"

namespace ztune::head {

using testing::FakeWorkerFleet;
using testing::RecordingCommandSink;

class TrialRunnerTest : public ::testing::Test {
 protected:
  TrialRunnerTest() { Reset(); }

  void Reset(RunnerOptions options = DefaultOptions()) {
    fleet_.reset();
    runner_ = std::make_unique<TrialRunner>(store_, sink_, clock_, options);
    ASSERT_TRUE(runner_->Load().ok());
    // As HeadServer::Start: what Load changed (the new epoch) is committed first.
    storage::WriteBatch loaded;
    runner_->FlushTo(loaded);
    ASSERT_TRUE(store_.Commit(loaded).ok());
    fleet_ = std::make_unique<FakeWorkerFleet>(*runner_, sink_, store_);
  }

  // Commits what the runner changed since the last commit (a head turn's end).
  void Commit() {
    storage::WriteBatch batch;
    runner_->FlushTo(batch);
    ASSERT_TRUE(store_.Commit(batch).ok());
  }

  // kill -9 of the head: what it had queued is lost, uncommitted changes are
  // gone; a new head loads the same store, while the workers keep their
  // actors and outboxes.
  void CrashHead() {
    sink_.TakeAll();
    auto actors = fleet_->actors;
    auto outbox = fleet_->outbox;
    Reset();
    fleet_->actors = actors;
    fleet_->outbox = outbox;
  }

  static RunnerOptions DefaultOptions() {
    RunnerOptions o;
    o.heartbeat_ms = 100;
    o.liveness = 3;
    o.pg_removal_delay_ms = 2000;
    o.strict_invariants = true;
    return o;
  }

  std::string Submit(const std::string& spec) {
    auto r = runner_->Submit(Json::parse(spec));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["experiment_id"].get<std::string>() : "";
  }

  // Commits what the runner has not stored yet, as the head's turn does.
  void CommitRunner() {
    storage::WriteBatch batch;
    runner_->FlushTo(batch);
    ASSERT_TRUE(store_.Commit(batch).ok());
  }

  int64_t CountStatus(const std::string& exp, TrialStatus s) {
    const Experiment* e = runner_->FindExperiment(exp);
    auto it = e->counts.find(s);
    return it == e->counts.end() ? 0 : it->second;
  }

  // Runs turns until the experiment finishes (bounded).
  void RunToEnd(const std::string& exp, int max_turns = 2000, int64_t* max_running = nullptr) {
    for (int i = 0; i < max_turns && !runner_->FindExperiment(exp)->finished; ++i) {
      fleet_->Turn();
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
      if (max_running) *max_running = std::max(*max_running, CountStatus(exp, TrialStatus::kRunning));
    }
    ASSERT_TRUE(runner_->FindExperiment(exp)->finished);
    // Commit the last turn and let the workers answer the final STOPs.
    for (int i = 0; i < 3; ++i) fleet_->Turn();
  }

  // Runs turns (with heartbeats) until trial `id` has stored `n` results.
  void RunUntilIteration(const TrialId& id, int64_t n) {
    for (int i = 0; i < 10 * n + 1000 && runner_->FindTrial(id)->iteration < n; ++i) {
      fleet_->Turn();
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
    }
    ASSERT_GE(runner_->FindTrial(id)->iteration, n);
  }

  // One worker "w1" (1 CPU) and one quadratic trial that stops at `stop`,
  // run until it has stored `n` results; returns its experiment.
  std::string StartQuadraticTrialAt(int64_t stop, int64_t n) {
    fleet_->Register("w1", 1);
    std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": )" +
                             std::to_string(stop) + "}}");
    runner_->Tick();
    RunUntilIteration(runner_->FindExperiment(exp)->trial_ids[0], n);
    return exp;
  }

  // Runs head turns (Tick, commit, then each answer handled on its own,
  // heartbeats) until `done()` or `max_turns`, and returns the phases trial
  // `id` went through: its phase before the first turn, then each change.
  std::vector<TrialPhase> PhaseTrace(const TrialId& id, const std::function<bool()>& done,
                                     int max_turns = 200) {
    std::vector<TrialPhase> trace{runner_->FindTrial(id)->phase};
    auto note = [&] {
      const TrialPhase p = runner_->FindTrial(id)->phase;
      if (p != trace.back()) trace.push_back(p);
    };
    for (int i = 0; i < max_turns && !done(); ++i) {
      runner_->Tick();
      note();
      Commit();
      fleet_->AnswerEach(note);
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
    }
    return trace;
  }

  std::vector<Json> StoredResults(const TrialId& trial_id) {
    std::vector<Json> out;
    auto s = store_.Scan(storage::Family::kResults, storage::TrialPrefix(trial_id),
                         [&](std::string_view, std::string_view v) {
                           out.push_back(ParseStoredResult(v).value());
                           return true;
                         });
    EXPECT_TRUE(s.ok());
    return out;
  }

  storage::InMemoryStore store_;
  RecordingCommandSink sink_;
  FakeClock clock_;
  std::unique_ptr<TrialRunner> runner_;
  std::unique_ptr<FakeWorkerFleet> fleet_;
};

}  // namespace ztune::head
