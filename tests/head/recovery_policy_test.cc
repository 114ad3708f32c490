// The rules of recovery (head/recovery_policy.h), each on its own: what a
// restarted head does with each stored trial, the re-attach grace, how far a
// re-attached actor's replay must come, and what a reconnected worker still
// has of a trial's requests.
#include "head/recovery_policy.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

Trial Stored(TrialStatus status, const WorkerId& actor_worker = "", bool held = false) {
  Trial t;
  t.trial_id = "e0001_00000";
  t.status = status;
  t.actor_worker = actor_worker;
  t.held = held;
  return t;
}

TEST(RecoveryPolicyTest, EachStoredStatusHasOneDispositionAfterARestart) {
  using D = RestartDisposition;
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kRunning, "w1")), D::kAwaitReattach);
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kRunning, "w1", true)), D::kAwaitReattach)
      << "a held pause that the crash interrupted is applied after the re-attach";
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kRunning)), D::kRequeue)
      << "RUNNING without a recorded worker: its actor went with the old head";
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kPending)), D::kRequeue);
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kPaused)), D::kRequeue)
      << "a scheduler's pause lost its memory checkpoint";
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kPaused, "", true)), D::kKeep);
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kTerminated)), D::kKeep);
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kError)), D::kKeep);
  EXPECT_EQ(DispositionAfterRestart(Stored(TrialStatus::kTerminated, "w1")), D::kKeep)
      << "a stale actor_worker never revives a finished trial";
}

TEST(RecoveryPolicyTest, TheGraceIsConfiguredOrTwoLivenessWindows) {
  EXPECT_EQ(ReattachGraceMs(500, 1000, 3), 500);
  EXPECT_EQ(ReattachGraceMs(0, 1000, 3), 6000);
  EXPECT_EQ(ReattachGraceMs(0, 50, 4), 400);
}

TEST(RecoveryPolicyTest, AReplayIsAwaitedOnlyWhenTheActorIsAheadOrMidTrain) {
  protocol::LiveActor live;
  live.iteration = 5;
  EXPECT_EQ(ReplayTarget(5, live), std::nullopt) << "the store has everything";
  EXPECT_EQ(ReplayTarget(7, live), std::nullopt)
      << "an actor restored from an older checkpoint is not ahead";
  EXPECT_EQ(ReplayTarget(3, live), 5) << "two results come back from its outbox";
  live.training = true;
  EXPECT_EQ(ReplayTarget(5, live), 6) << "the TRAIN in flight brings one more";
  EXPECT_EQ(ReplayTarget(3, live), 5);
  EXPECT_EQ(ReplayTarget(9, live), 10);
}

using Requests = std::vector<std::pair<uint64_t, FutureType>>;

TEST(RecoveryPolicyTest, AGoneActorIsALostStartOnlyWhileItsCreateIsInFlight) {
  ReconnectPlan plan = PlanAfterReconnect(nullptr, {{11, FutureType::kCreate}, {12, FutureType::kTrain}},
                                          "w1", 3);
  EXPECT_EQ(plan.action, ReconnectPlan::Action::kRequeueLostStart);
  EXPECT_NE(plan.why.find("CREATE_ACTOR did not reach worker w1"), std::string::npos);
  plan = PlanAfterReconnect(nullptr, {{12, FutureType::kTrain}}, "w1", 3);
  EXPECT_EQ(plan.action, ReconnectPlan::Action::kFail);
  EXPECT_EQ(plan.why, "actor of attempt 3 is gone from worker w1 after it reconnected");
  plan = PlanAfterReconnect(nullptr, {}, "w1", 3);
  EXPECT_EQ(plan.action, ReconnectPlan::Action::kFail) << "an idle actor that vanished";
}

TEST(RecoveryPolicyTest, ARestoreTheWorkerNeverAcceptedStartsTheAttemptAgain) {
  protocol::LiveActor live;
  live.rids = {11};
  ReconnectPlan plan = PlanAfterReconnect(
      &live, {{11, FutureType::kCreate}, {12, FutureType::kRestore}, {13, FutureType::kTrain}},
      "w1", 1);
  EXPECT_EQ(plan.action, ReconnectPlan::Action::kRequeueLostStart);
  EXPECT_NE(plan.why.find("RESTORE did not reach worker w1"), std::string::npos);
  live.rids = {11, 12};
  plan = PlanAfterReconnect(
      &live, {{11, FutureType::kCreate}, {12, FutureType::kRestore}, {13, FutureType::kTrain}},
      "w1", 1);
  EXPECT_EQ(plan.action, ReconnectPlan::Action::kContinue);
}

// A live actor was created (a failed setup leaves none): its CREATE_ACTOR is
// answered; everything else goes again under the same rid, which the worker
// answers from what it has (accepted or not).
TEST(RecoveryPolicyTest, ALiveActorAnswersItsCreateAndEverythingElseIsSentAgain) {
  protocol::LiveActor live;
  live.rids = {11, 12};
  const ReconnectPlan plan = PlanAfterReconnect(
      &live, {{11, FutureType::kCreate}, {12, FutureType::kRestore}, {13, FutureType::kTrain},
              {14, FutureType::kSave}},
      "w1", 1);
  EXPECT_EQ(plan.action, ReconnectPlan::Action::kContinue);
  EXPECT_EQ(plan.created, (std::vector<uint64_t>{11}));
  EXPECT_EQ(plan.resend, (std::vector<uint64_t>{12, 13, 14}));
  EXPECT_TRUE(plan.why.empty());
}

}  // namespace
}  // namespace ztune::head
