// NanPercentile against values NumPy gives (np.nanpercentile, linear method).
#include "head/quantile.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(QuantileTest, MatchesNumPysLinearPercentile) {
  EXPECT_EQ(NanPercentile({1, 2, 3, 4}, 75), 3.25);
  EXPECT_EQ(NanPercentile({4, 1, 3, 2, 5}, 75), 4.0);  // unsorted input
  EXPECT_EQ(NanPercentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_EQ(NanPercentile({7}, 75), 7.0);
  EXPECT_EQ(NanPercentile({1, 2, 3}, 0), 1.0);
  EXPECT_EQ(NanPercentile({1, 2, 3}, 100), 3.0);
  EXPECT_DOUBLE_EQ(NanPercentile({0, 10}, 100.0 * (1 - 1 / 3.0)), 20.0 / 3);
}

TEST(QuantileTest, NaNIsLeftOutAndNothingLeftIsNaN) {
  EXPECT_EQ(NanPercentile({kNaN, 1, kNaN, 3}, 50), 2.0);
  EXPECT_TRUE(std::isnan(NanPercentile({kNaN, kNaN}, 50)));
  EXPECT_TRUE(std::isnan(NanPercentile({}, 50)));
}

TEST(QuantileTest, InfinitiesInterpolateAsNumPysLerp) {
  // From the nearer end: inf - (inf - 1) * 0.25 is NaN; 1 + (inf - 1) * 0.25 is inf.
  EXPECT_TRUE(std::isnan(NanPercentile({1, kInf}, 75)));
  EXPECT_EQ(NanPercentile({1, kInf}, 25), kInf);
  EXPECT_EQ(NanPercentile({-kInf, 1, 2}, 75), 1.5);
  EXPECT_TRUE(std::isnan(NanPercentile({kInf}, 50)));  // inf + (inf - inf) * 0
}

}  // namespace
}  // namespace ztune::head
