#include "head/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/check.h"

namespace ztune::head {

int LatencyHistogram::BucketOf(int64_t micros) {
  const uint64_t v = static_cast<uint64_t>(std::max<int64_t>(0, micros));
  // Values below 2 * kSubBuckets have a bucket each; above, a power of two
  // [2^k, 2^(k+1)) is cut into kSubBuckets equal parts.
  if (v < 2 * kSubBuckets) return static_cast<int>(v);
  const int octave = std::bit_width(v) - 1;  // >= 4
  const int sub = static_cast<int>((v >> (octave - 3)) & (kSubBuckets - 1));
  const int bucket = (octave - 2) * kSubBuckets + sub;
  return std::min(bucket, kBuckets - 1);
}

int64_t LatencyHistogram::UpperBoundUs(int bucket) {
  CHECK(bucket >= 0 && bucket < kBuckets);
  if (bucket < 2 * kSubBuckets) return bucket;
  const int octave = bucket / kSubBuckets + 2;
  const int sub = bucket % kSubBuckets;
  const int64_t width = int64_t{1} << (octave - 3);
  return (int64_t{1} << octave) + (sub + 1) * width - 1;
}

void LatencyHistogram::Record(int64_t micros, uint64_t times) {
  if (times == 0) return;
  micros = std::max<int64_t>(0, micros);
  buckets_[BucketOf(micros)] += times;
  count_ += times;
  max_us_ = std::max(max_us_, micros);
}

int64_t LatencyHistogram::PercentileUs(double q) const {
  if (count_ == 0) return 0;
  // The rank of the value at q, 1-based: p99 of 100 values is the 99th.
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[b];
    if (seen >= rank) return std::min(UpperBoundUs(b), max_us_);
  }
  CHECK(false && "bucket counts sum to count_");
  return max_us_;
}

Json LatencyHistogram::ToJson() const {
  auto ms = [](int64_t us) { return static_cast<double>(us) / 1000.0; };
  Json buckets = Json::array();
  for (int b = 0; b < kBuckets; ++b) {
    if (buckets_[b] > 0) buckets.push_back(Json::array({UpperBoundUs(b), buckets_[b]}));
  }
  return Json{{"count", count_},
              {"p50_ms", ms(PercentileUs(0.50))},
              {"p99_ms", ms(PercentileUs(0.99))},
              {"max_ms", ms(max_us_)},
              {"buckets", std::move(buckets)}};
}

}  // namespace ztune::head
