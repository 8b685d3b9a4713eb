// A fixed-size latency histogram with logarithmic buckets (HdrHistogram's layout, 64 linear
// sub-buckets per power of two, so every recorded value is known to within 1/64 ≈ 1.6%).
//
// Not thread-safe: keep one per thread and Merge() them at the end. Recording is a handful of
// integer instructions and never allocates.
#ifndef HOOKRELAY_TOOLS_BENCH_LATENCY_HISTOGRAM_H_
#define HOOKRELAY_TOOLS_BENCH_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace hookrelay::bench {

class LatencyHistogram {
 public:
  // Records one value in nanoseconds; negative values count as 0.
  void Record(int64_t nanos);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  // Exact extremes; 0 when empty.
  int64_t min() const { return count_ == 0 ? 0 : min_; }
  int64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0.0 : static_cast<double>(sum_) / count_; }

  // The value at quantile q in [0, 1]: the upper bound of the bucket holding the ceil(q * count)-th
  // smallest value, clamped to the exact maximum. 0 when empty.
  int64_t Quantile(double q) const;

  // Bucket layout, exposed for tests.
  static size_t BucketOf(uint64_t nanos);
  static uint64_t BucketUpperBound(size_t bucket);

 private:
  static constexpr int kSubBucketBits = 6;  // 64 sub-buckets per power of two
  static constexpr size_t kBuckets = (64 - kSubBucketBits) * (size_t{1} << kSubBucketBits) +
                                     (size_t{1} << (kSubBucketBits + 1));

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  int64_t min_ = INT64_MAX;
  int64_t max_ = 0;
  // Sums of nanoseconds overflow only after ~292 years of total latency.
  int64_t sum_ = 0;
};

}  // namespace hookrelay::bench

#endif  // HOOKRELAY_TOOLS_BENCH_LATENCY_HISTOGRAM_H_
