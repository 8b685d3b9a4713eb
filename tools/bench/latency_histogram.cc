#include "tools/bench/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace hookrelay::bench {

// Values below 2^(kSubBucketBits+1) get one bucket each; above, a value with its top bit at
// position m falls in "row" m - kSubBucketBits, split into 64 equal sub-buckets by the next six
// bits. Rows follow each other without gaps: index = shift * 64 + (value >> shift).
size_t LatencyHistogram::BucketOf(uint64_t nanos) {
  constexpr uint64_t kLinear = uint64_t{1} << (kSubBucketBits + 1);
  if (nanos < kLinear) return static_cast<size_t>(nanos);
  const int msb = 63 - std::countl_zero(nanos);
  const int shift = msb - kSubBucketBits;
  return static_cast<size_t>(shift) * (size_t{1} << kSubBucketBits) +
         static_cast<size_t>(nanos >> shift);
}

uint64_t LatencyHistogram::BucketUpperBound(size_t bucket) {
  constexpr size_t kLinear = size_t{1} << (kSubBucketBits + 1);
  if (bucket < kLinear) return bucket;
  const size_t shift = bucket / (size_t{1} << kSubBucketBits) - 1;
  const uint64_t mantissa = bucket - shift * (size_t{1} << kSubBucketBits);
  return ((mantissa + 1) << shift) - 1;
}

void LatencyHistogram::Record(int64_t nanos) {
  if (nanos < 0) nanos = 0;
  ++buckets_[BucketOf(static_cast<uint64_t>(nanos))];
  ++count_;
  sum_ += nanos;
  min_ = std::min(min_, nanos);
  max_ = std::max(max_, nanos);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

int64_t LatencyHistogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      return std::clamp(static_cast<int64_t>(BucketUpperBound(i)), min_, max_);
    }
  }
  return max_;
}

}  // namespace hookrelay::bench
