#include "tools/bench/latency_histogram.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace hookrelay::bench {
namespace {

// Buckets are contiguous and every value lies within its bucket, at most 1/64 below its bound.
TEST(LatencyHistogramTest, BucketsCoverValuesWithBoundedError) {
  size_t previous = 0;
  for (uint64_t v = 0; v < (uint64_t{1} << 20); ++v) {
    const size_t b = LatencyHistogram::BucketOf(v);
    ASSERT_TRUE(b == previous || b == previous + 1) << v;
    previous = b;
    const uint64_t upper = LatencyHistogram::BucketUpperBound(b);
    ASSERT_GE(upper, v);
    ASSERT_LE(upper - v, v / 64) << v;
  }
  const uint64_t huge = uint64_t{1} << 62;
  EXPECT_GE(LatencyHistogram::BucketUpperBound(LatencyHistogram::BucketOf(huge)), huge);
}

// Quantiles of a uniform 1..10000 µs sample land within the bucket precision.
TEST(LatencyHistogramTest, QuantilesOfUniformSample) {
  LatencyHistogram h;
  for (int64_t us = 1; us <= 10000; ++us) h.Record(us * 1000);
  EXPECT_EQ(h.count(), 10000u);
  EXPECT_EQ(h.min(), 1000);
  EXPECT_EQ(h.max(), 10000 * 1000);
  EXPECT_NEAR(h.Quantile(0.5), 5000 * 1000, 5000 * 1000 / 60);
  EXPECT_NEAR(h.Quantile(0.99), 9900 * 1000, 9900 * 1000 / 60);
  EXPECT_EQ(h.Quantile(1.0), 10000 * 1000);
  EXPECT_EQ(h.Quantile(0.0), LatencyHistogram::BucketUpperBound(LatencyHistogram::BucketOf(1000)));
}

// Merging two halves gives the same quantiles as recording everything in one.
TEST(LatencyHistogramTest, MergeEqualsSingleHistogram) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(13.0, 1.0);
  LatencyHistogram all, a, b;
  for (int i = 0; i < 20000; ++i) {
    const auto v = static_cast<int64_t>(dist(rng));
    all.Record(v);
    (i % 2 ? a : b).Record(v);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_EQ(a.min(), all.min());
  for (double q : {0.5, 0.9, 0.99, 0.999}) EXPECT_EQ(a.Quantile(q), all.Quantile(q)) << q;
}

// An empty histogram reports zeros rather than garbage.
TEST(LatencyHistogramTest, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.Quantile(0.99), 0);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 0);
}

}  // namespace
}  // namespace hookrelay::bench
