// LatencyHistogram: durations in microseconds counted in log-scaled buckets
// (8 per power of two, so a bucket's bound is within 12.5% of what it holds),
// in constant memory whatever the count. Reports percentiles as the upper
// bound of the bucket that holds them, and its cumulative counts, so that a
// reader taking two snapshots can tell what happened between them. Not
// thread-safe: its owner's thread only.
#pragma once

#include <array>
#include <cstdint>

#include "common/json.h"

namespace ztune::head {

class LatencyHistogram {
 public:
  // Values from 2^38 microseconds (3 days) on count in the last bucket.
  static constexpr int kOctaves = 36;
  static constexpr int kSubBuckets = 8;
  static constexpr int kBuckets = kOctaves * kSubBuckets;

  // Counts `times` values of `micros`. Negative durations (a clock read out
  // of order) count as 0.
  void Record(int64_t micros, uint64_t times = 1);

  uint64_t count() const { return count_; }
  int64_t max_us() const { return max_us_; }
  // The upper bound of the bucket holding the value at quantile `q` (0..1),
  // never above the largest value seen; 0 when empty.
  int64_t PercentileUs(double q) const;

  // {"count", "p50_ms", "p99_ms", "max_ms", "buckets": [[upper_us, count], ...]}
  // with the non-empty buckets in increasing order (cumulative since start).
  Json ToJson() const;

  // The bucket `micros` counts in, and the largest value it holds.
  static int BucketOf(int64_t micros);
  static int64_t UpperBoundUs(int bucket);

 private:
  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  int64_t max_us_ = 0;
};

}  // namespace ztune::head
