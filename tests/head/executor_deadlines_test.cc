// Executor request deadlines on a fake clock: a driver request's clock starts
// when it becomes the oldest of its trial (the worker runs a trial's commands
// in order), a resend starts it again, and an answered request arms the next.
#include <gtest/gtest.h>

#include "head/executor.h"
#include "tests/fakes/recording_command_sink.h"

namespace ztune::head {
namespace {

class ExecutorDeadlineTest : public ::testing::Test {
 protected:
  ExecutorDeadlineTest() : executor_(sink_, clock_) {
    trial_.trial_id = "e0001_00000";
    trial_.experiment_id = "e0001";
    trial_.attempt = 1;
    trial_.worker_id = "w";
    executor_.SetEpoch(1);
  }

  // The rids sent so far, in order.
  std::vector<uint64_t> SentRids() {
    std::vector<uint64_t> rids;
    for (const auto& s : sink_.TakeAll()) {
      std::visit(
          [&](const auto& b) {
            if constexpr (requires { b.rid; }) rids.push_back(b.rid);
          },
          s.message.body);
    }
    return rids;
  }

  Answer ReplyFor(bool result_batch = false) const {
    return Answer{result_batch, trial_.trial_id, trial_.attempt, "w"};
  }

  testing::RecordingCommandSink sink_;
  FakeClock clock_;
  Executor executor_;
  Trial trial_;
};

TEST_F(ExecutorDeadlineTest, APipelinedRequestsClockStartsWhenTheOneBeforeIsAnswered) {
  const RequestTimeouts timeouts{/*setup_ms=*/2000, /*step_ms=*/1000, /*checkpoint_ms=*/0};
  executor_.StartTrial(trial_, ActorCode{"noop", "", ""}, "w", {{"CPU", 1}}, {}, nullptr,
                       TrainBuffer{}, timeouts);
  const std::vector<uint64_t> rids = SentRids();  // CREATE_ACTOR, TRAIN
  ASSERT_EQ(rids.size(), 2u);
  clock_.AdvanceMs(1500);  // the setup takes 1.5 s: within its 2 s, and the step waits
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
  ASSERT_TRUE(executor_.Take(rids[0], ReplyFor()).has_value());
  clock_.AdvanceMs(999);  // the step's second starts now, not at the send
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
  clock_.AdvanceMs(1);
  std::vector<Future> expired = executor_.TakeExpiredRequests();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].type, FutureType::kTrain);
  EXPECT_EQ(expired[0].budget_ms, 1000);
  EXPECT_EQ(executor_.Find(rids[1]), nullptr);
  EXPECT_TRUE(executor_.DriverRidsOf(trial_.trial_id).empty());
}

TEST_F(ExecutorDeadlineTest, ASetupThatHangsExpiresAndNoLimitNeverDoes) {
  executor_.StartTrial(trial_, ActorCode{"noop", "", ""}, "w", {{"CPU", 1}}, {}, nullptr,
                       TrainBuffer{}, RequestTimeouts{2000, 0, 0});
  SentRids();
  clock_.AdvanceMs(1999);
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
  clock_.AdvanceMs(1);
  auto expired = executor_.TakeExpiredRequests();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].type, FutureType::kCreate);

  Trial other = trial_;
  other.trial_id = "e0001_00001";
  executor_.ContinueTraining(other, TrainBuffer{}, RequestTimeouts{});  // no step limit
  clock_.AdvanceMs(1'000'000'000);
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
}

TEST_F(ExecutorDeadlineTest, ATrainGetsAStepPerBufferedResultAndAResendStartsAgain) {
  executor_.ContinueTraining(trial_, TrainBuffer{10, 0.5}, RequestTimeouts{0, 100, 0});
  const uint64_t rid = SentRids().at(0);
  clock_.AdvanceMs(1000);  // 10 steps of 100 ms and the buffer's 0.5 s: 1.5 s
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
  executor_.Resend(rid);  // the worker reconnected: the request may only now arrive
  clock_.AdvanceMs(1499);
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
  clock_.AdvanceMs(1);
  EXPECT_EQ(executor_.TakeExpiredRequests().size(), 1u);
}

TEST_F(ExecutorDeadlineTest, AnAnsweredOrForgottenRequestNeverExpires) {
  executor_.Save(trial_, CheckpointStorage::kPersistent, RequestTimeouts{0, 0, 500});
  const uint64_t save = SentRids().at(0);
  executor_.ContinueTraining(trial_, TrainBuffer{}, RequestTimeouts{0, 500, 0});
  ASSERT_TRUE(executor_.Take(save, ReplyFor()).has_value());
  executor_.ForgetTrial(trial_.trial_id);
  clock_.AdvanceMs(10'000);
  EXPECT_TRUE(executor_.TakeExpiredRequests().empty());
  EXPECT_EQ(executor_.NumFutures(), 0u);
}

// An answered request leaves nothing behind (answered SAVEs' deadline entries
// lived on for their whole budget: 2.4 KB per trial of 50 checkpoints).
TEST_F(ExecutorDeadlineTest, AnsweredRequestsLeaveNoDeadlineBehind) {
  for (int i = 0; i < 100; ++i) {
    executor_.Save(trial_, CheckpointStorage::kPersistent, RequestTimeouts{0, 0, 3'600'000});
    const uint64_t rid = SentRids().at(0);
    EXPECT_EQ(executor_.NumDeadlines(), 1u);
    ASSERT_TRUE(executor_.Take(rid, ReplyFor()).has_value());
    EXPECT_EQ(executor_.NumDeadlines(), 0u);
  }
  executor_.StopActor(trial_, 1000);
  const uint64_t stop = SentRids().at(0);
  EXPECT_EQ(executor_.NumDeadlines(), 1u);
  ASSERT_TRUE(executor_.Take(stop, ReplyFor()).has_value());
  EXPECT_EQ(executor_.NumDeadlines(), 0u);
}

}  // namespace
}  // namespace ztune::head
