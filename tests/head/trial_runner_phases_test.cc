// The phases a trial goes through (head/trial_phase.h), observed answer by
// answer, and the single exit path (TrialLifecycle::EndAttempt). The fixture runs
// with strict invariants: an illegal change or a broken invariant aborts.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "head/client_service.h"
#include "head/stored_result.h"
#include "head/trial_phase.h"
#include "storage/keys.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

std::string Names(const std::vector<TrialPhase>& trace) {
  std::string s;
  for (TrialPhase p : trace) s += (s.empty() ? "" : " ") + std::string(TrialPhaseName(p));
  return s;
}

class TrialRunnerPhasesTest : public TrialRunnerTest {
 protected:
  TrialId FirstTrial(const std::string& exp) {
    const auto& ids = runner_->FindExperiment(exp)->trial_ids;
    EXPECT_FALSE(ids.empty());
    return ids.empty() ? "" : ids[0];
  }
  bool Finished(const std::string& exp) { return runner_->FindExperiment(exp)->finished; }
  // One worker with one CPU, one quadratic trial stopping at `stop_at`, run
  // until it stored `iterations` results. Returns (experiment, trial).
  std::pair<std::string, TrialId> OneTrialAt(int64_t iterations, int64_t stop_at = 1000) {
    fleet_->Register("w1", 1);
    const std::string exp = Submit(R"({"trainable": "quadratic", "stop": {"training_iteration": )" +
                                   std::to_string(stop_at) + "}}");
    const TrialId id = FirstTrial(exp);
    PhaseTrace(id, [&] { return runner_->FindTrial(id)->iteration >= iterations; });
    return {exp, id};
  }
};

// CREATE and the first TRAIN go out together (starting); each result asks
// for the next TRAIN (training) or, when a checkpoint is due, a SAVE (saving);
// the SAVE at the stop ends the attempt.
TEST_F(TrialRunnerPhasesTest, ATrialStartsTrainsSavesAndEndsIdle) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic",
      "stop": {"training_iteration": 4}, "checkpoint": {"frequency": 2}})");
  const TrialId id = FirstTrial(exp);
  const auto trace = PhaseTrace(id, [&] { return Finished(exp); });
  EXPECT_EQ(Names(trace), "idle starting training saving training saving idle");
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_FALSE(t->stop_after_save);
  EXPECT_TRUE(runner_->executor().DriverRidsOf(id).empty());
}

// `trials` shows each trial's phase next to its status.
TEST_F(TrialRunnerPhasesTest, TheTrialsReplyShowsThePhase) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 1000}, "checkpoint": {"frequency": 2}})");
  PhaseTrace(FirstTrial(exp), [&] { return runner_->FindTrial(FirstTrial(exp))->iteration >= 2; });
  ClientService clients(*runner_);
  const Json reply =
      clients.Handle(Json{{"op", "trials"}, {"experiment_id", exp}}, ClientCaller::Anonymous());
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  ASSERT_EQ(reply["trials"].size(), 2u);
  for (const Json& doc : reply["trials"]) {
    const Trial* t = runner_->FindTrial(TrialId(doc["trial_id"].get<std::string>()));
    EXPECT_EQ(doc["phase"], TrialPhaseName(t->phase));
  }
  EXPECT_EQ(reply["trials"][0]["phase"], "saving") << "its checkpoint at iteration 2 is due";
  EXPECT_EQ(reply["trials"][1]["phase"], "idle") << "PENDING: one CPU";
}

// A user's pause takes a memory checkpoint after the step in flight (pausing),
// then the actor goes (idle, PAUSED); resume starts it again from there.
TEST_F(TrialRunnerPhasesTest, APauseGoesThroughPausingAndTheResumeStartsAgain) {
  const auto [exp, id] = OneTrialAt(2, 6);
  ASSERT_EQ(runner_->FindTrial(id)->phase, TrialPhase::kTraining);
  ASSERT_TRUE(runner_->PauseTrial(id, /*hold=*/true).ok());
  EXPECT_EQ(Names(PhaseTrace(id, [&] {
              return runner_->FindTrial(id)->status == TrialStatus::kPaused;
            })),
            "training pausing idle");
  EXPECT_FALSE(runner_->FindTrial(id)->pause_requested);
  ASSERT_TRUE(runner_->Resume(id).ok());
  EXPECT_EQ(Names(PhaseTrace(id, [&] { return Finished(exp); })),
            "idle starting training idle");
  EXPECT_EQ(runner_->FindTrial(id)->status, TrialStatus::kTerminated);
  EXPECT_EQ(runner_->FindTrial(id)->num_restores, 1);
}

// With actor reuse the second trial takes the first one's actor: RESET first
// (resetting), then its TRAIN on the re-keyed actor (starting).
TEST_F(TrialRunnerPhasesTest, AReusedActorIsResetBeforeTheTrialStarts) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic", "num_samples": 2,
      "reuse_actors": true, "stop": {"training_iteration": 3}})");
  PhaseTrace(FirstTrial(exp), [&] { return runner_->FindExperiment(exp)->trial_ids.size() == 2; });
  const TrialId second = runner_->FindExperiment(exp)->trial_ids[1];
  EXPECT_EQ(Names(PhaseTrace(second, [&] { return Finished(exp); })),
            "idle resetting starting training idle");
  EXPECT_EQ(fleet_->resets, 1);
  EXPECT_EQ(fleet_->creates, 1);
}

// After a head restart a RUNNING trial waits for its worker (awaiting
// re-attach, RUNNING, no actor); when the grace runs out it is queued again
// and no index of the wait is left behind.
TEST_F(TrialRunnerPhasesTest, AReattachWaitEndsIdleWhenTheGraceRunsOut) {
  const auto [exp, id] = OneTrialAt(2, 1000);
  CrashHead();
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kRunning);
  EXPECT_EQ(t->phase, TrialPhase::kAwaitingReattach);
  EXPECT_TRUE(runner_->recovery_waits().AwaitingReattach(id));
  EXPECT_GT(runner_->recovery_waits().Deadline(id).value_or(0), 0);
  EXPECT_EQ(t->worker_id, "") << "no actor is held until its worker reports it";
  clock_.AdvanceMs(10'000);  // past the grace; w1 never comes back
  runner_->Tick();
  t = runner_->FindTrial(id);
  EXPECT_EQ(t->phase, TrialPhase::kIdle);
  EXPECT_EQ(t->status, TrialStatus::kPending);
  EXPECT_EQ(runner_->recovery_waits().Deadline(id), std::nullopt);
  EXPECT_TRUE(runner_->recovery_waits().empty());
  EXPECT_EQ(t->actor_worker, "");
  Commit();  // strict invariants check every trial here
}

// A re-attached actor whose worker replays results the old head never
// stored waits for them (awaiting replay: its REGISTER says the actor is
// ahead), then trains on from the last one.
TEST_F(TrialRunnerPhasesTest, AReattachedActorAwaitsItsReplayThenTrains) {
  const auto [exp, id] = OneTrialAt(3, 1000);
  fleet_->Turn();  // its results are answered, never committed: the crash comes first
  CrashHead();
  std::vector<TrialPhase> trace{runner_->FindTrial(id)->phase};
  auto note = [&] {
    const TrialPhase p = runner_->FindTrial(id)->phase;
    if (p != trace.back()) trace.push_back(p);
  };
  fleet_->Reregister("w1", 1, 0, note);
  note();
  const auto rest = PhaseTrace(id, [&] { return runner_->FindTrial(id)->iteration >= 8; });
  trace.insert(trace.end(), rest.begin() + 1, rest.end());
  EXPECT_EQ(Names(trace), "awaiting_reattach awaiting_replay training");
  EXPECT_EQ(runner_->FindTrial(id)->attempt, 1u);
}

// A re-attached actor whose trial's stored last result was its last (done)
// is stopped and its group returned: the re-attach adopted them, so ending
// the trial must release them (the adoption happened in a phase that holds no
// actor, and the exit left both behind).
TEST_F(TrialRunnerPhasesTest, AReattachedTrialThatWasDoneReleasesItsActor) {
  const auto [exp, id] = OneTrialAt(3);
  Commit();  // iteration 3 stored; the actor is at 3 too
  sink_.TakeAll();
  auto actors = fleet_->actors;
  auto outbox = fleet_->outbox;
  {
    // Its last stored result said done (a head that stored it and crashed
    // before ending the trial).
    const std::string key = storage::ResultKey(id, 3);
    auto stored = store_.Get(storage::Family::kResults, key);
    ASSERT_TRUE(stored.ok() && stored->has_value());
    Json j = ParseStoredResult(**stored).value();
    j["done"] = true;
    storage::WriteBatch b;
    b.Put(storage::Family::kResults, key, StoredResultValue(j));
    ASSERT_TRUE(store_.Commit(b).ok());
  }
  Reset();
  fleet_->actors = actors;
  fleet_->outbox = outbox;
  ASSERT_EQ(runner_->FindTrial(id)->phase, TrialPhase::kAwaitingReattach);
  const int64_t stops = fleet_->stops;
  fleet_->Reregister("w1", 1);
  for (int i = 0; i < 3; ++i) fleet_->Turn();  // commits: strict invariants check every trial
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kTerminated);
  EXPECT_EQ(t->phase, TrialPhase::kIdle);
  EXPECT_EQ(t->worker_id, "");
  EXPECT_EQ(fleet_->stops, stops + 1) << "the adopted actor is stopped";
  EXPECT_DOUBLE_EQ(runner_->ledger().Available().Get("CPU"), 1) << "its group is returned";
}

// A worker dies with a TRAIN of its trial in flight. The exit path forgets
// every request of the attempt: nothing of it is left in the executor (its
// futures were kept, one per death, until a deadline expired them, or for
// ever without one).
TEST_F(TrialRunnerPhasesTest, AWorkersDeathLeavesNoRequestOfItsTrialsBehind) {
  fleet_->Register("w1", 1);
  const std::string exp = Submit(R"({"trainable": "quadratic", "max_failures": 3,
      "stop": {"training_iteration": 1000}})");
  const TrialId id = FirstTrial(exp);
  PhaseTrace(id, [&] { return runner_->FindTrial(id)->iteration >= 2; });
  runner_->Tick();
  Commit();
  ASSERT_FALSE(runner_->executor().DriverRidsOf(id).empty()) << "a TRAIN is in flight";
  runner_->HandleDisconnect("w1", "connection reset");
  const Trial* t = runner_->FindTrial(id);
  EXPECT_EQ(t->status, TrialStatus::kPending);
  EXPECT_EQ(t->phase, TrialPhase::kIdle);
  EXPECT_EQ(t->num_failures, 1);
  EXPECT_TRUE(runner_->executor().DriverRidsOf(id).empty());
  EXPECT_EQ(runner_->executor().NumFutures(), 0u);
  Commit();
}

}  // namespace
}  // namespace ztune::head
