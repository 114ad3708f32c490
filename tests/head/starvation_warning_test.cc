// StarvationWarning: due once the state has lasted an interval, then at most
// once per interval; a running trial or an empty queue ends the state.
#include "head/starvation_warning.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

TEST(StarvationWarningTest, DueAfterAnIntervalOfWaitingWithNoneRunningThenOncePerInterval) {
  StarvationWarning w(1000);
  EXPECT_FALSE(w.Due(5000, /*any_running=*/false, /*any_waiting=*/true));  // starts here
  EXPECT_FALSE(w.Due(5999, false, true));
  EXPECT_TRUE(w.Due(6000, false, true));
  EXPECT_EQ(w.starved_ms(), 1000);
  EXPECT_FALSE(w.Due(6500, false, true)) << "at most once per interval";
  EXPECT_FALSE(w.Due(6999, false, true));
  EXPECT_TRUE(w.Due(7000, false, true));
  EXPECT_EQ(w.starved_ms(), 2000);
}

TEST(StarvationWarningTest, ARunningTrialOrAnEmptyQueueEndsTheState) {
  StarvationWarning w(1000);
  EXPECT_FALSE(w.Due(0, false, true));
  EXPECT_FALSE(w.Due(900, true, true)) << "a trial runs";
  EXPECT_EQ(w.starved_ms(), 0);
  EXPECT_FALSE(w.Due(1000, false, true));  // starts again here
  EXPECT_FALSE(w.Due(1999, false, true));
  EXPECT_FALSE(w.Due(1500 + 500, false, false)) << "nothing waits";
  EXPECT_FALSE(w.Due(2500, false, true));
  EXPECT_FALSE(w.Due(3499, false, true));
  EXPECT_TRUE(w.Due(3500, false, true));
}

}  // namespace
}  // namespace ztune::head
