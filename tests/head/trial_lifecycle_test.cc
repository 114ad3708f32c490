// TrialLifecycle: the trial state machine on its own, over a real
// ActorManager, Executor, PlacementGroupManager, TrialBook and FifoScheduler
// with a fake clock and a recording command sink: legal and illegal phase
// changes, the single exit (EndAttempt) from the phases that keep indexes,
// failures and retries, the end of an experiment, and the next-step commands.
#include "head/trial_lifecycle.h"

#include <set>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "head/search_space.h"
#include "storage/keys.h"
#include "tests/head/runner_parts_fixture.h"

namespace ztune::head {
namespace {

class TrialLifecycleTest : public RunnerPartsTest {
 protected:
  TrialLifecycleTest() {
    ledger_.AddWorker(WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 8}}), {});
    Experiment e;
    e.experiment_id = "e0001";
    e.spec.resources =
        PlacementRequest::FromJson(Json::parse(R"({"bundles":[{"CPU":1}]})")).value();
    e.next_variant = 2;
    e.total_variants = 2;  // the search has yielded everything
    exp_ = &book_.AddExperiment(std::move(e));
    searcher_.Start(exp_->experiment_id, SearchAlgSpec{}, SearchSpace::Parse(Json::object()).value());
  }

  // A new PENDING trial of the experiment, not queued.
  Trial& Added() { return book_.AddTrial(*exp_, Json{{"lr", 0.1}}); }

  // Starts `t` as the runner does: out of the queue, RUNNING, the next
  // attempt, an actor on w1 in a fresh group, phase starting.
  void Start(Trial& t) {
    lifecycle_.Dequeue(t);
    book_.SetStatus(t, TrialStatus::kRunning);
    t.attempt++;
    groups_.Stage(exp_->spec.resources);
    groups_.Update();
    const uint64_t group = groups_.TakeReady(exp_->request_key, t.trial_id).value();
    actors_.Hold(t, WorkerId("w1"), group);
    ASSERT_TRUE(lifecycle_.SetPhase(t, TrialPhase::kStarting));
  }

  // A trial waiting for the experiment's shape (the demand a cached actor serves).
  Trial& Waiting() {
    Trial& t = Added();
    lifecycle_.Enqueue(t);
    return t;
  }

  static std::string Key(const Trial& t) {
    return "w1/" + t.trial_id.str() + "/" + std::to_string(t.attempt);
  }

  Experiment* exp_ = nullptr;
};

// Without strict invariants an illegal change is refused: false, the phase unchanged.
TEST_F(TrialLifecycleTest, AnIllegalPhaseChangeIsRefusedAndLeavesThePhase) {
  Trial& t = Added();
  EXPECT_FALSE(lifecycle_.SetPhase(t, TrialPhase::kTraining)) << "idle -> training";
  EXPECT_EQ(t.phase, TrialPhase::kIdle);
  Start(t);
  ASSERT_TRUE(lifecycle_.SetPhase(t, TrialPhase::kPausing));
  EXPECT_FALSE(lifecycle_.SetPhase(t, TrialPhase::kTraining)) << "pausing -> training";
  EXPECT_EQ(t.phase, TrialPhase::kPausing);
  EXPECT_TRUE(lifecycle_.SetPhase(t, TrialPhase::kIdle));
  EXPECT_EQ(t.phase, TrialPhase::kIdle);
}

// With strict invariants an illegal change, or a broken invariant, aborts.
TEST_F(TrialLifecycleTest, StrictInvariantsAbortOnAnIllegalChangeOrABrokenInvariant) {
  TrialLifecycle strict(LifecycleParts(), /*strict_invariants=*/true);
  Trial& t = Added();
  EXPECT_DEATH(strict.SetPhase(t, TrialPhase::kPausing), "");
  EXPECT_TRUE(strict.SetPhase(t, TrialPhase::kIdle)) << "idle -> idle is legal";
  strict.CheckInvariants(t);  // PENDING and idle: consistent, no abort
  book_.SetStatus(t, TrialStatus::kRunning);  // RUNNING while idle
  EXPECT_DEATH(strict.CheckInvariants(t), "");
}

// A status change off the table is refused (logged; the status stays) or,
// with strict invariants, aborts; a legal one reaches the book's counts.
TEST_F(TrialLifecycleTest, AnIllegalStatusChangeIsRefused) {
  Trial& t = Added();
  EXPECT_FALSE(lifecycle_.SetStatus(t, TrialStatus::kError)) << "ERROR only from RUNNING";
  EXPECT_EQ(t.status, TrialStatus::kPending);
  ASSERT_TRUE(lifecycle_.SetStatus(t, TrialStatus::kTerminated));
  EXPECT_EQ(exp_->counts[TrialStatus::kTerminated], 1);
  EXPECT_FALSE(lifecycle_.SetStatus(t, TrialStatus::kPending)) << "TERMINATED is final";
  EXPECT_EQ(t.status, TrialStatus::kTerminated);
  TrialLifecycle strict(LifecycleParts(), /*strict_invariants=*/true);
  EXPECT_DEATH(strict.SetStatus(t, TrialStatus::kRunning), "");
}

// The exit from resetting leaves the actors' RESET index and stops the actor
// under both keys (never caches it), and the trial ends idle without an actor.
TEST_F(TrialLifecycleTest, EndAttemptFromResettingLeavesTheResetIndexAndStopsBothKeys) {
  Waiting();
  Waiting();
  Trial& old = Added();
  Start(old);
  actors_.Release(old, /*reusable=*/true, /*max_cached=*/16);
  ASSERT_TRUE(lifecycle_.SetPhase(old, TrialPhase::kIdle));
  const CachedActor cached = actors_.TakeCached(exp_->request_key).value();
  Trial& fresh = Added();
  book_.SetStatus(fresh, TrialStatus::kRunning);
  fresh.attempt = 1;
  actors_.BeginReset(fresh.trial_id, cached);
  actors_.Hold(fresh, cached.worker_id, cached.group_id);
  ASSERT_TRUE(lifecycle_.SetPhase(fresh, TrialPhase::kResetting));
  ASSERT_NE(actors_.ResetOf(fresh.trial_id), nullptr);
  sink_.TakeAll();

  lifecycle_.EndAttempt(fresh, ActorEnd::kReuseOrStop);
  EXPECT_EQ(fresh.phase, TrialPhase::kIdle);
  EXPECT_EQ(actors_.ResetOf(fresh.trial_id), nullptr);
  EXPECT_EQ(Stops(), (std::set<std::string>{Key(old), Key(fresh)}));
  EXPECT_EQ(actors_.NumCached(exp_->request_key), 0u) << "no settled key to cache it under";
  EXPECT_EQ(fresh.worker_id, "");
  EXPECT_EQ(fresh.group_id, 0u);
  EXPECT_EQ(actors_.ActorsOn(WorkerId("w1")), 0);
}

// The exit from awaiting a re-attach forgets the recorded worker and the
// wait, stops nothing (no actor was adopted), clears the intents and marks
// the trial for the commit.
TEST_F(TrialLifecycleTest, EndAttemptFromAwaitingReattachForgetsTheWorkerAndTheWait) {
  Trial& t = Added();
  book_.SetStatus(t, TrialStatus::kRunning);
  t.attempt = 1;
  t.actor_worker = WorkerId("w1");
  t.placement.bundles.push_back({WorkerId("w1"), ResourceSet::FromDoubles({{"CPU", 1}}), {}});
  ASSERT_TRUE(lifecycle_.SetPhase(t, TrialPhase::kAwaitingReattach));
  waits_.AwaitReattach(t.trial_id, t.actor_worker, clock_.NowMs() + 600);
  t.pause_requested = true;
  storage::WriteBatch before;
  book_.WriteDirty(before);  // nothing marked from here on

  lifecycle_.EndAttempt(t, ActorEnd::kStop);
  EXPECT_EQ(t.phase, TrialPhase::kIdle);
  EXPECT_EQ(t.actor_worker, "");
  EXPECT_TRUE(t.placement.bundles.empty());
  EXPECT_FALSE(waits_.AwaitingReattach(t.trial_id));
  EXPECT_TRUE(waits_.empty());
  EXPECT_FALSE(t.pause_requested);
  EXPECT_TRUE(sink_.sent.empty()) << "no actor to stop";
  storage::WriteBatch after;
  book_.WriteDirty(after);
  EXPECT_NE(after.NewestWrite(storage::Family::kTrials, t.trial_id.str()), nullptr);
}

// A failure within max_failures is retried: PENDING and queued again, its
// actor stopped, its error record in the turn's batch; one more is ERROR.
// A user's pause outlives a retried failure of the attempt it was waiting
// for: the trial is PAUSED and held (out of the queue) until resumed, as
// after a lost start; it was queued and ran again, and resume was refused.
TEST_F(TrialLifecycleTest, AHeldPauseOutlivesARetriedFailure) {
  exp_->spec.max_failures = 1;
  Trial& t = Added();
  Start(t);
  t.pause_requested = true;
  t.held = true;
  lifecycle_.FailTrial(t, "boom", /*retry=*/true);
  EXPECT_EQ(t.status, TrialStatus::kPaused);
  EXPECT_TRUE(t.held);
  EXPECT_EQ(t.num_failures, 1);
  EXPECT_EQ(scheduler_.NumWaiting(exp_->request_key), 0u) << "held: not queued";
  lifecycle_.CheckInvariants(t);
}

TEST_F(TrialLifecycleTest, AFailureWithinMaxFailuresRequeuesAndOnePastItEndsInError) {
  exp_->spec.max_failures = 1;
  Trial& t = Added();
  Start(t);
  const std::string first_stop = Key(t);
  sink_.TakeAll();
  lifecycle_.FailTrial(t, "boom", /*retry=*/true);
  EXPECT_EQ(t.status, TrialStatus::kPending);
  EXPECT_EQ(t.phase, TrialPhase::kIdle);
  EXPECT_EQ(t.num_failures, 1);
  EXPECT_EQ(t.error, "boom");
  ASSERT_EQ(t.error_log.size(), 1u);
  EXPECT_EQ(t.error_log[0].rfind("Failure # 1 (occurred at ", 0), 0u) << t.error_log[0];
  EXPECT_EQ(scheduler_.NumWaiting(exp_->request_key), 1u);
  EXPECT_EQ(Stops(), (std::set<std::string>{first_stop}));
  const auto* record = batch_.NewestWrite(
      storage::Family::kTrials,
      storage::TrialChildKey(t.trial_id.str(), storage::kTrialErrorRecord, 1));
  ASSERT_NE(record, nullptr);
  EXPECT_FALSE(record->is_delete);
  EXPECT_EQ(Json::parse(record->value)["entry"], t.error_log[0]);

  Start(t);
  lifecycle_.FailTrial(t, "boom again", /*retry=*/true);
  EXPECT_EQ(t.status, TrialStatus::kError);
  EXPECT_EQ(t.num_failures, 2);
  EXPECT_EQ(scheduler_.NumWaiting(exp_->request_key), 0u);
  EXPECT_EQ(exp_->counts[TrialStatus::kError], 1);
  EXPECT_NE(batch_.NewestWrite(
                storage::Family::kTrials,
                storage::TrialChildKey(t.trial_id.str(), storage::kTrialErrorRecord, 2)),
            nullptr);
}

// The experiment finishes when its last live trial finishes and its search is done.
TEST_F(TrialLifecycleTest, FinishingTheLastTrialOfAFinishedSearchFinishesTheExperiment) {
  Trial& a = Added();
  Trial& b = Added();
  Start(a);
  Start(b);
  sink_.TakeAll();
  lifecycle_.FinishTrial(a, TrialStatus::kTerminated);
  EXPECT_EQ(a.status, TrialStatus::kTerminated);
  EXPECT_EQ(a.phase, TrialPhase::kIdle);
  EXPECT_FALSE(exp_->finished) << "b still runs";
  EXPECT_TRUE(searcher_.Searching(exp_->experiment_id));
  lifecycle_.FinishTrial(b, TrialStatus::kTerminated);
  EXPECT_TRUE(exp_->finished);
  EXPECT_FALSE(searcher_.Searching(exp_->experiment_id));
  EXPECT_EQ(exp_->live_trials, 0);
  EXPECT_EQ(Stops(), (std::set<std::string>{Key(a), Key(b)}));
}

// StopExperiment terminates the running and the queued trials (returned in
// creation order), leaves a finished one as it is, and ends the experiment.
TEST_F(TrialLifecycleTest, StopExperimentTerminatesEveryUnfinishedTrialAndReturnsThem) {
  exp_->total_variants = 5;  // its search could go on
  Trial& errored = Added();
  Start(errored);
  lifecycle_.FailTrial(errored, "x", /*retry=*/false);
  ASSERT_EQ(errored.status, TrialStatus::kError);
  Trial& running = Added();
  Start(running);
  Trial& queued = Waiting();
  std::vector<TrialId> stopped;
  lifecycle_.StopExperiment(*exp_, &stopped);
  EXPECT_EQ(stopped, (std::vector<TrialId>{running.trial_id, queued.trial_id}));
  EXPECT_EQ(running.status, TrialStatus::kTerminated);
  EXPECT_EQ(queued.status, TrialStatus::kTerminated);
  EXPECT_EQ(errored.status, TrialStatus::kError);
  EXPECT_EQ(scheduler_.NumWaiting(exp_->request_key), 0u);
  EXPECT_TRUE(exp_->stopped);
  EXPECT_TRUE(exp_->finished);
  EXPECT_FALSE(searcher_.Searching(exp_->experiment_id));
}

// ContinueOrPause trains on (TRAIN, training) unless a pause was asked for:
// then a memory SAVE (pausing); a pausing trial sends nothing more.
TEST_F(TrialLifecycleTest, ContinueOrPauseTrainsOnOrSendsAMemorySaveAndPauses) {
  Trial& t = Added();
  Start(t);
  sink_.TakeAll();
  lifecycle_.ContinueOrPause(t);
  EXPECT_EQ(t.phase, TrialPhase::kTraining);
  EXPECT_EQ(sink_.Count<protocol::Train>(), 1u);
  sink_.TakeAll();

  t.pause_requested = true;
  lifecycle_.ContinueOrPause(t);
  EXPECT_EQ(t.phase, TrialPhase::kPausing);
  EXPECT_FALSE(t.pause_requested);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].worker_id, "w1");
  const auto* save = std::get_if<protocol::Save>(&sink_.sent[0].message.body);
  ASSERT_NE(save, nullptr);
  EXPECT_EQ(save->storage, "memory");
  EXPECT_EQ(save->trial_id, t.trial_id.str());
  EXPECT_EQ(save->attempt, 1u);
  sink_.TakeAll();
  lifecycle_.StartPause(t);  // pausing -> pausing is illegal: refused
  EXPECT_TRUE(sink_.sent.empty());
  EXPECT_EQ(t.phase, TrialPhase::kPausing);
}

// The result buffer is capped at the checkpoint frequency, and at 1 with a
// checkpoint at the end; the timeouts are the spec's seconds in ms.
TEST_F(TrialLifecycleTest, TheBufferIsCappedByTheCheckpointPolicy) {
  Trial& t = Added();
  exp_->spec.result_buffer_length = 10;
  EXPECT_EQ(lifecycle_.BufferFor(t).length, 10);
  exp_->spec.checkpoint.frequency = 4;
  EXPECT_EQ(lifecycle_.BufferFor(t).length, 4);
  exp_->spec.checkpoint.frequency = 20;
  EXPECT_EQ(lifecycle_.BufferFor(t).length, 10);
  exp_->spec.checkpoint.at_end = true;
  EXPECT_EQ(lifecycle_.BufferFor(t).length, 1);
  exp_->spec.timeouts.step_s = 2.5;
  const RequestTimeouts timeouts = lifecycle_.TimeoutsFor(t);
  EXPECT_EQ(timeouts.setup_ms, 3'600'000);
  EXPECT_EQ(timeouts.step_ms, 2500);
  EXPECT_EQ(timeouts.checkpoint_ms, 3'600'000);
}

}  // namespace
}  // namespace ztune::head
