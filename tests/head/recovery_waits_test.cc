// RecoveryWaits: one wait per trial, of one kind, with its deadline; expiry in
// id order; a replay reached at its iteration.
#include "head/recovery_waits.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

using Ids = std::vector<TrialId>;

TEST(RecoveryWaitsTest, AWaitExpiresAtItsDeadlineAndNotBefore) {
  RecoveryWaits waits;
  waits.AwaitReattach("b", WorkerId("w1"), 200);
  waits.AwaitReattach("a", WorkerId("w1"), 100);
  waits.AwaitReplay("c", 4, 150);
  EXPECT_EQ(waits.size(), 3u);
  EXPECT_EQ(waits.ExpiredReattaches(99), Ids{});
  EXPECT_EQ(waits.ExpiredReattaches(100), Ids{"a"});
  EXPECT_EQ(waits.ExpiredReattaches(1000), (Ids{"a", "b"}));
  EXPECT_EQ(waits.ExpiredReplays(149), Ids{});
  EXPECT_EQ(waits.ExpiredReplays(150), Ids{"c"});
  EXPECT_EQ(waits.Deadline("b"), 200);
  EXPECT_EQ(waits.Deadline("c"), 150);
  EXPECT_EQ(waits.Deadline("x"), std::nullopt);
}

TEST(RecoveryWaitsTest, ATrialHasOneWaitAndLeavesItWhole) {
  RecoveryWaits waits;
  waits.AwaitReattach("a", WorkerId("w1"), 100);
  EXPECT_TRUE(waits.AwaitingReattach("a"));
  waits.AwaitReplay("a", 3, 500);  // adopted: the re-attach wait is over
  EXPECT_FALSE(waits.AwaitingReattach("a"));
  EXPECT_TRUE(waits.AwaitingReplay("a"));
  EXPECT_EQ(waits.Deadline("a"), 500);
  EXPECT_EQ(waits.size(), 1u);
  waits.Leave("a");
  waits.Leave("unknown");
  EXPECT_TRUE(waits.empty());
  EXPECT_FALSE(waits.AwaitingReplay("a"));
}

TEST(RecoveryWaitsTest, AReplayIsReachedAtItsIteration) {
  RecoveryWaits waits;
  waits.AwaitReplay("a", 5, 100);
  EXPECT_FALSE(waits.ReplayReached("a", 4));
  EXPECT_TRUE(waits.ReplayReached("a", 5));
  EXPECT_TRUE(waits.ReplayReached("a", 6));
  EXPECT_FALSE(waits.ReplayReached("b", 9)) << "no wait, nothing reached";
  waits.AwaitReattach("b", WorkerId("w1"), 100);
  EXPECT_FALSE(waits.ReplayReached("b", 9)) << "a re-attach wait is not a replay";
}

// A registering worker's awaited trials are found by its id; a trial leaves
// that index with its wait, whichever way it leaves.
TEST(RecoveryWaitsTest, AWorkersReattachesAreTheTrialsAwaitingItsActors) {
  RecoveryWaits waits;
  const WorkerId w1("w1"), w2("w2");
  waits.AwaitReattach("c", w1, 100);
  waits.AwaitReattach("a", w1, 100);
  waits.AwaitReattach("b", w2, 100);
  EXPECT_EQ(waits.ReattachesOn(w1), (Ids{"a", "c"}));
  EXPECT_EQ(waits.ReattachesOn(w2), Ids{"b"});
  EXPECT_EQ(waits.ReattachesOn(WorkerId("w3")), Ids{});
  waits.AwaitReplay("a", 3, 500);  // re-attached
  waits.Leave("b");
  waits.AwaitReattach("c", w2, 100);  // awaited elsewhere now
  EXPECT_EQ(waits.ReattachesOn(w1), Ids{});
  EXPECT_EQ(waits.ReattachesOn(w2), Ids{"c"});
  waits.Leave("c");
  EXPECT_EQ(waits.ReattachesOn(w2), Ids{});
  EXPECT_EQ(waits.size(), 1u);
}

}  // namespace
}  // namespace ztune::head
