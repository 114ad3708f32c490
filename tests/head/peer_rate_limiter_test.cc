#include "head/peer_rate_limiter.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

constexpr double kUnlimited = 0;

PeerLimits Messages(double per_second, double burst) {
  return PeerLimits{{per_second, burst}, {kUnlimited, 0}};
}

TEST(PeerRateLimiterTest, AdmitsTheBurstThenRefusesUntilTokensRefill) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, Messages(/*per_second=*/10, /*burst=*/5));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Admit("a", 10)) << i;
  EXPECT_FALSE(limiter.Admit("a", 10));
  EXPECT_EQ(limiter.WaitMs("a", 10), 100);  // one token at 10/s
  clock.AdvanceMs(99);
  EXPECT_FALSE(limiter.Admit("a", 10));
  clock.AdvanceMs(1);
  EXPECT_TRUE(limiter.Admit("a", 10));
  EXPECT_FALSE(limiter.Admit("a", 10));
  // A long pause refills only up to the burst.
  clock.AdvanceMs(60'000);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Admit("a", 10)) << i;
  EXPECT_FALSE(limiter.Admit("a", 10));
}

TEST(PeerRateLimiterTest, EachPeerHasItsOwnBudget) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, Messages(1, 2));
  EXPECT_TRUE(limiter.Admit("flooder", 1));
  EXPECT_TRUE(limiter.Admit("flooder", 1));
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(limiter.Admit("flooder", 1));
  EXPECT_TRUE(limiter.Admit("quiet", 1));
  EXPECT_TRUE(limiter.Admit("quiet", 1));
  EXPECT_EQ(limiter.WaitMs("quiet-and-new", 1), 0);
}

TEST(PeerRateLimiterTest, RefusedMessagesTakeNoTokens) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, Messages(1000, 1));
  EXPECT_TRUE(limiter.Admit("a", 1));
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(limiter.Admit("a", 1));
  clock.AdvanceMs(1);  // one token back, however many were refused meanwhile
  EXPECT_TRUE(limiter.Admit("a", 1));
}

TEST(PeerRateLimiterTest, BytesAreBudgetedAndAMessageLargerThanTheBurstWaitsForAFullBucket) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, PeerLimits{{kUnlimited, 0}, {/*per_second=*/1000, /*burst=*/100}});
  EXPECT_TRUE(limiter.Admit("a", 60));
  EXPECT_FALSE(limiter.Admit("a", 60));  // 40 left
  EXPECT_TRUE(limiter.Admit("a", 40));
  EXPECT_EQ(limiter.WaitMs("a", 10'000), 100);  // a full bucket, 100 bytes at 1000/s
  clock.AdvanceMs(50);
  EXPECT_FALSE(limiter.Admit("a", 10'000));
  clock.AdvanceMs(50);
  EXPECT_TRUE(limiter.Admit("a", 10'000));  // takes the whole bucket
  EXPECT_FALSE(limiter.Admit("a", 1));
}

TEST(PeerRateLimiterTest, BothBudgetsMustAllowAMessage) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, PeerLimits{{100, 10}, {100, 100}});
  EXPECT_TRUE(limiter.Admit("a", 100));  // bytes spent, messages left
  EXPECT_FALSE(limiter.Admit("a", 1));
  EXPECT_EQ(limiter.WaitMs("a", 1), 10);
  // Empty messages need no bytes: the other 9 message tokens are spent.
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(limiter.Admit("a", 0)) << i;
  EXPECT_FALSE(limiter.Admit("a", 0));
  EXPECT_EQ(limiter.WaitMs("a", 0), 10);
}

TEST(PeerRateLimiterTest, UnlimitedAdmitsEverythingAndTracksNoOne) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, PeerLimits{});
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(limiter.Admit("peer" + std::to_string(i), 1 << 30));
  EXPECT_EQ(limiter.tracked_peers(), 0u);
  EXPECT_EQ(limiter.WaitMs("peer1", 1 << 30), 0);
}

TEST(PeerRateLimiterTest, IdlePeersAreForgottenSoMemoryStaysBounded) {
  FakeClock clock;
  PeerRateLimiter limiter(clock, Messages(10, 1), /*max_peers=*/100);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(limiter.Admit("old" + std::to_string(i), 1));
  EXPECT_EQ(limiter.tracked_peers(), 100u);
  EXPECT_FALSE(limiter.Admit("old7", 1));
  clock.AdvanceMs(1000);  // every old peer's bucket is full again
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(limiter.Admit("new" + std::to_string(i), 1));
    clock.AdvanceMs(1000);
    ASSERT_LE(limiter.tracked_peers(), 100u);
  }
  // Peers still short of tokens are kept even at the bound: forgetting them
  // would hand a flooder a fresh budget.
  PeerRateLimiter busy(clock, Messages(10, 1), /*max_peers=*/2);
  ASSERT_TRUE(busy.Admit("x", 1));
  ASSERT_TRUE(busy.Admit("y", 1));
  ASSERT_TRUE(busy.Admit("z", 1));
  EXPECT_FALSE(busy.Admit("x", 1));
  EXPECT_FALSE(busy.Admit("y", 1));
}

}  // namespace
}  // namespace ztune::head
