// TurnTimes with synthetic marks (microseconds): the phases of a turn, and
// the bound on how long a turn's results waited inside the head.
#include "head/turn_times.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

// One turn: poll from `entered` to `returned`, the worker drain reads `read`
// messages (to an empty socket unless `capped`), `results` of them result batches, commit from
// `commit_start` to `commit_end`, ACKs sent at `answered`, turn over at `ended`.
struct Turn {
  int64_t entered, returned;  // `entered` tells the scenario; TurnTimes needs only `readable`
  bool readable;
  uint64_t read;
  bool capped;
  int64_t drained, prepared, commit_start, commit_end, answered, ended;
  uint64_t results;  // result batches handled
};

void Play(TurnTimes& t, const Turn& turn) {
  t.PollEntered(turn.readable);
  t.PollReturned(turn.returned);
  t.WorkersDrained(turn.drained, turn.read, !turn.capped);
  t.Prepared(turn.prepared);
  if (turn.commit_end > 0) t.Committed(turn.commit_start, turn.commit_end);
  t.Answered(turn.answered, turn.results);
  t.TurnEnded(turn.ended);
}

TEST(TurnTimesTest, AResultThatWokeAnIdlePollWaitedFromItsReturnNotFromTheLastDrain) {
  TurnTimes t(0);
  // Idle for 500 ms in the poll: the result woke it.
  Play(t,
       {1'000, 501'000, false, 1, false, 501'100, 501'200, 501'300, 503'300, 503'400, 503'500, 1});
  ASSERT_EQ(t.result_wait().count(), 1u);
  EXPECT_EQ(t.result_wait().max_us(), 503'400 - 501'000);
  EXPECT_EQ(t.turn().max_us(), 503'500 - 501'000);
  EXPECT_EQ(t.commit().max_us(), 2'000);
}

TEST(TurnTimesTest, AResultWaitingAsThePollBeganMayHaveArrivedRightAfterTheLastDrain) {
  TurnTimes t(0);
  // Turn 1 drains to an empty socket at 10 ms and commits for 20 ms; a
  // result arrives meanwhile, so turn 2's poll finds it waiting.
  Play(t, {0, 100, false, 3, false, 10'000, 10'500, 10'500, 30'500, 31'000, 31'000, 0});
  Play(t, {31'000, 31'010, true, 1, false, 31'500, 31'600, 31'600, 33'600, 34'000, 34'100, 1});
  ASSERT_EQ(t.result_wait().count(), 1u);
  EXPECT_EQ(t.result_wait().max_us(), 34'000 - 10'000);
}

TEST(TurnTimesTest, MessagesLeftByACappedDrainAreAsOldAsItsOwnBound) {
  TurnTimes t(0);
  // Turn 1 stops on its cap at 40 ms: what it left may have been there since
  // the poll of turn 1 returned (5.01 ms).
  Play(t, {5'000, 5'010, false, 4096, true, 40'000, 41'000, 41'000, 42'000, 43'000, 43'000, 4096});
  Play(t, {43'000, 43'001, true, 10, false, 44'000, 44'100, 44'100, 45'000, 46'000, 46'100, 10});
  // Each result counts: 4,096 waited up to 38 ms, 10 up to 41 ms.
  ASSERT_EQ(t.result_wait().count(), 4106u);
  EXPECT_EQ(t.result_wait().max_us(), 46'000 - 5'010);
  // Turn 2 emptied the socket: turn 3's messages are newer than 44 ms.
  Play(t, {46'100, 46'101, true, 1, false, 46'200, 46'300, 46'300, 47'000, 47'100, 47'200, 1});
  EXPECT_EQ(t.result_wait().count(), 4107u);
  const int64_t smallest = t.result_wait().PercentileUs(0.0);  // 47,100 - 44,000 us
  EXPECT_GE(smallest, 3'100);
  EXPECT_LE(smallest, 3'100 + 3'100 / 8);
  // The median result is one of the first turn's 4,096.
  const int64_t median = t.result_wait().PercentileUs(0.5);
  EXPECT_GE(median, 37'990);
  EXPECT_LE(median, 37'990 + 37'990 / 8);
}

TEST(TurnTimesTest, TurnsThatReadNothingAndCommittedNothingAreNotCounted) {
  TurnTimes t(0);
  Play(t, {0, 100'000, false, 0, false, 100'010, 100'020, 0, 0, 100'030, 100'040, 0});
  EXPECT_EQ(t.turn().count(), 0u);
  EXPECT_EQ(t.result_wait().count(), 0u);
  // A turn that only committed (a timer's change) counts; it acknowledged no
  // result, so it has no wait.
  Play(t, {100'040, 200'000, false, 0, false, 200'010, 200'020, 200'020, 201'020, 201'100, 201'200,
           0});
  EXPECT_EQ(t.turn().count(), 1u);
  EXPECT_EQ(t.commit().count(), 1u);
  EXPECT_EQ(t.result_wait().count(), 0u);
  const Json j = t.ToJson();
  for (const char* k : {"turn", "drain", "handle", "commit", "send", "result_wait"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["send"]["count"], 1);
  // The send phase leaves the commit out: 201,200 - 200,020 - 1,000 us.
  EXPECT_EQ(j["send"]["max_ms"].get<double>(), 0.18);
}

// A turn that hands its commit over (head/pipelined_store.h) counts as one
// that committed, without commit time in its phases; the commit is timed when
// it ends, and its results' wait runs from that turn's bound to their ACK,
// sent turns later.
TEST(TurnTimesTest, ACommitHandedOverIsTimedWhenItEndsAndItsResultsWaitUntilThen) {
  TurnTimes t(0);
  t.PollEntered(false);
  t.PollReturned(1'000);  // a result woke the poll
  t.WorkersDrained(1'100, 1, true);
  t.Prepared(1'200);
  t.CommitHandedOver();
  const TurnTimes::Micros bound = t.oldest_unread();
  t.TurnEnded(1'300);
  EXPECT_EQ(t.turn().count(), 1u);
  EXPECT_EQ(t.turn().max_us(), 300);
  EXPECT_EQ(t.commit().count(), 0u);
  // A timer's turn while the commit runs: not counted.
  t.PollEntered(false);
  t.PollReturned(1'400);
  t.WorkersDrained(1'410, 0, true);
  t.Prepared(1'420);
  t.TurnEnded(1'430);
  EXPECT_EQ(t.turn().count(), 1u);
  // The commit ends at 1,500 after 300 us; the ACK leaves at 1,520.
  t.CommitEnded(1'200, 1'500);
  t.Answered(1'520, 1, bound);
  EXPECT_EQ(t.commit().count(), 1u);
  EXPECT_EQ(t.commit().max_us(), 300);
  ASSERT_EQ(t.result_wait().count(), 1u);
  EXPECT_EQ(t.result_wait().max_us(), 520);
}

}  // namespace
}  // namespace ztune::head
