// ClientWaits: held requests are released in arrival order when they need
// not wait any more or their deadline passed, each judged after the ones
// before it were handled; the number held is bounded.
#include "head/client_waits.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

ClientWaits::Waiting Held(int n, TimeMs deadline) {
  return ClientWaits::Waiting{"c" + std::to_string(n), Json{{"n", n}}, false,
                              ClientCaller::Anonymous(), deadline};
}

TEST(ClientWaitsTest, ReleasesInArrivalOrderAndJudgesEachAfterTheOnesBefore) {
  ClientWaits waits;
  for (int n = 0; n < 4; ++n) ASSERT_TRUE(waits.Hold(Held(n, 1000)));
  int slots = 2;  // two slots came free: the first two waiting take them
  std::vector<int> handled;
  auto still_waits = [&](const Json&) { return slots == 0; };
  EXPECT_TRUE(waits.AnyDue(10, still_waits));
  waits.Release(10, still_waits, [&](ClientWaits::Waiting&& w) {
    handled.push_back(w.request["n"].get<int>());
    --slots;
  });
  EXPECT_EQ(handled, (std::vector<int>{0, 1}));
  EXPECT_EQ(waits.size(), 2u);
  EXPECT_FALSE(waits.AnyDue(10, still_waits));
}

TEST(ClientWaitsTest, ADeadlinePassedReleasesARequestThatWouldStillWait) {
  ClientWaits waits;
  ASSERT_TRUE(waits.Hold(Held(0, 300)));
  ASSERT_TRUE(waits.Hold(Held(1, 200)));
  EXPECT_EQ(waits.NextDeadline(), 200);
  auto always = [](const Json&) { return true; };
  std::vector<int> handled;
  auto note = [&](ClientWaits::Waiting&& w) { handled.push_back(w.request["n"].get<int>()); };
  waits.Release(199, always, note);
  EXPECT_TRUE(handled.empty());
  EXPECT_TRUE(waits.AnyDue(200, always));
  waits.Release(200, always, note);
  EXPECT_EQ(handled, (std::vector<int>{1}));
  EXPECT_EQ(waits.NextDeadline(), 300);
  waits.Release(300, always, note);
  EXPECT_EQ(handled, (std::vector<int>{1, 0}));
  EXPECT_EQ(waits.NextDeadline(), -1);
}

TEST(ClientWaitsTest, HoldsAtMostKMaxWaiting) {
  ClientWaits waits;
  for (size_t n = 0; n < ClientWaits::kMaxWaiting; ++n) {
    ASSERT_TRUE(waits.Hold(Held(static_cast<int>(n), 100)));
  }
  EXPECT_FALSE(waits.Hold(Held(-1, 100)));
  EXPECT_EQ(waits.size(), ClientWaits::kMaxWaiting);
}

}  // namespace
}  // namespace ztune::head
