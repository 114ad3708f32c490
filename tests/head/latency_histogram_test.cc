#include "head/latency_histogram.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

TEST(LatencyHistogramTest, EveryValueFallsInABucketWhoseBoundIsWithinAnEighthAbove) {
  int last_bucket = -1;
  for (int64_t v : {0LL, 1LL, 15LL, 16LL, 17LL, 18LL, 31LL, 32LL, 35LL, 36LL, 999LL, 1000LL,
                    1'000'000LL, 123'456'789LL, (1LL << 37) + 5}) {
    const int b = LatencyHistogram::BucketOf(v);
    EXPECT_GE(b, last_bucket) << v;  // buckets follow the values' order
    last_bucket = b;
    const int64_t upper = LatencyHistogram::UpperBoundUs(b);
    EXPECT_GE(upper, v);
    EXPECT_LE(upper, v + v / 8) << v;
    if (b > 0) {
      EXPECT_LT(LatencyHistogram::UpperBoundUs(b - 1), v) << v;
    }
  }
  EXPECT_EQ(LatencyHistogram::BucketOf(-5), 0);
  EXPECT_EQ(LatencyHistogram::BucketOf(int64_t{1} << 50), LatencyHistogram::kBuckets - 1);
}

TEST(LatencyHistogramTest, PercentilesAreTheBoundsOfTheBucketsHoldingThem) {
  LatencyHistogram h;
  EXPECT_EQ(h.PercentileUs(0.99), 0);
  // 98 turns of 1 ms, one of 50 ms, one of 200 ms.
  for (int i = 0; i < 98; ++i) h.Record(1000);
  h.Record(50'000);
  h.Record(200'000);
  EXPECT_EQ(h.count(), 100u);
  const int64_t p50 = h.PercentileUs(0.5);
  EXPECT_GE(p50, 1000);
  EXPECT_LE(p50, 1125);
  const int64_t p99 = h.PercentileUs(0.99);  // the 99th value: 50 ms
  EXPECT_GE(p99, 50'000);
  EXPECT_LE(p99, 50'000 + 50'000 / 8);
  EXPECT_EQ(h.PercentileUs(1.0), 200'000);  // capped at the largest value seen
  EXPECT_EQ(h.max_us(), 200'000);
}

TEST(LatencyHistogramTest, ItsJsonListsTheNonEmptyBucketsCumulatively) {
  LatencyHistogram h;
  h.Record(3);
  h.Record(3);
  h.Record(2000);
  const Json j = h.ToJson();
  EXPECT_EQ(j["count"], 3);
  EXPECT_DOUBLE_EQ(j["max_ms"].get<double>(), 2.0);
  ASSERT_EQ(j["buckets"].size(), 2u);
  EXPECT_EQ(j["buckets"][0], Json::array({3, 2}));
  EXPECT_GE(j["buckets"][1][0].get<int64_t>(), 2000);
  EXPECT_EQ(j["buckets"][1][1], 1);
}

}  // namespace
}  // namespace ztune::head
