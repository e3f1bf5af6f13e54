// attnserve-load's LogHistogram: percentiles of known distributions are within the documented
// relative error of the exact sample percentiles, and merging is exact.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "client/load/histogram.h"
#include "gtest/gtest.h"

namespace attnserve::load {
namespace {

// The exact percentile with the histogram's definition: the smallest sample with at least
// ceil(q * n) samples <= it.
uint64_t ExactPercentile(std::vector<uint64_t> values, double q) {
  std::sort(values.begin(), values.end());
  const size_t rank =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(q * static_cast<double>(values.size()))));
  return values[rank - 1];
}

void ExpectPercentilesWithinBound(const std::vector<uint64_t>& values) {
  LogHistogram h;
  for (uint64_t v : values) h.Record(v);
  ASSERT_EQ(h.count(), values.size());
  EXPECT_EQ(h.min(), *std::min_element(values.begin(), values.end()));
  EXPECT_EQ(h.max(), *std::max_element(values.begin(), values.end()));
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0}) {
    const double exact = static_cast<double>(ExactPercentile(values, q));
    const double got = h.Percentile(q);
    EXPECT_LE(std::fabs(got - exact), exact * LogHistogram::MaxRelativeError() + 1e-9)
        << "q=" << q << " exact=" << exact << " got=" << got;
  }
}

TEST(LogHistogramTest, ErrorBoundIsUnderOnePercent) {
  EXPECT_LT(LogHistogram::MaxRelativeError(), 0.011);
  EXPECT_GT(LogHistogram::MaxRelativeError(), 0.0);
}

TEST(LogHistogramTest, BucketsAreNarrowerThanTheBound) {
  // Every log bucket is under 2^(1/64) wide, relative to its lower bound.
  for (uint64_t v : {uint64_t{128}, uint64_t{1000}, uint64_t{123456789}, uint64_t{1} << 40}) {
    const int b = LogHistogram::BucketOf(v);
    EXPECT_LE(LogHistogram::BucketLower(b), static_cast<double>(v));
    EXPECT_GT(LogHistogram::BucketUpper(b), static_cast<double>(v));
    EXPECT_LT(LogHistogram::BucketUpper(b) / LogHistogram::BucketLower(b), 1.011);
  }
  // Small values are exact.
  for (uint64_t v = 0; v < LogHistogram::kLinearLimit; ++v) {
    EXPECT_EQ(LogHistogram::BucketOf(v), static_cast<int>(v));
  }
}

TEST(LogHistogramTest, UniformDistribution) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint64_t> dist(1'000, 10'000'000);  // 1 us .. 10 ms in ns
  std::vector<uint64_t> values(100000);
  for (uint64_t& v : values) v = dist(rng);
  ExpectPercentilesWithinBound(values);
}

TEST(LogHistogramTest, ExponentialAndLogNormalLatencies) {
  std::mt19937_64 rng(2);
  std::exponential_distribution<double> expo(1.0 / 2e6);  // mean 2 ms in ns
  std::lognormal_distribution<double> lognormal(std::log(5e6), 1.5);
  std::vector<uint64_t> a, b;
  for (int i = 0; i < 50000; ++i) {
    a.push_back(static_cast<uint64_t>(expo(rng)) + 1);
    b.push_back(static_cast<uint64_t>(lognormal(rng)) + 1);
  }
  ExpectPercentilesWithinBound(a);
  ExpectPercentilesWithinBound(b);
}

TEST(LogHistogramTest, KnownMedianAndTail) {
  // 1..1000 ms: the median is 500 ms, p99 990 ms, max 1000 ms.
  LogHistogram h;
  for (uint64_t ms = 1; ms <= 1000; ++ms) h.Record(ms * 1'000'000);
  EXPECT_NEAR(h.Percentile(0.5), 500e6, 500e6 * LogHistogram::MaxRelativeError());
  EXPECT_NEAR(h.Percentile(0.99), 990e6, 990e6 * LogHistogram::MaxRelativeError());
  EXPECT_EQ(h.Percentile(1.0), 1000e6);  // clamped to the exact max
  EXPECT_DOUBLE_EQ(h.mean(), 500.5e6);
}

TEST(LogHistogramTest, SmallValuesAreExact) {
  LogHistogram h;
  for (uint64_t v : {0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89}) h.Record(v);
  EXPECT_EQ(h.Percentile(0.0), 0.0);
  EXPECT_EQ(h.Percentile(0.5), 8.0);
  EXPECT_EQ(h.Percentile(1.0), 89.0);
}

TEST(LogHistogramTest, EmptyHistogram) {
  LogHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(0.5), 0.0);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}

TEST(LogHistogramTest, MergeEqualsOneHistogramOfEverything) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(std::log(1e6), 1.0);
  LogHistogram all, parts[4];
  std::vector<uint64_t> values;
  for (int i = 0; i < 40000; ++i) {
    const uint64_t v = static_cast<uint64_t>(dist(rng)) + 1;
    values.push_back(v);
    all.Record(v);
    parts[i % 4].Record(v);  // as if four threads recorded a quarter each
  }
  LogHistogram merged;
  for (const LogHistogram& p : parts) merged.Merge(p);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_DOUBLE_EQ(merged.mean(), all.mean());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    EXPECT_EQ(merged.Percentile(q), all.Percentile(q)) << q;
    const double exact = static_cast<double>(ExactPercentile(values, q));
    EXPECT_LE(std::fabs(merged.Percentile(q) - exact), exact * LogHistogram::MaxRelativeError());
  }
}

TEST(LogHistogramTest, RecordNCountsWeights) {
  LogHistogram h;
  h.RecordN(1000, 99);
  h.RecordN(1'000'000, 1);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_NEAR(h.Percentile(0.99), 1000, 1000 * LogHistogram::MaxRelativeError());
  EXPECT_EQ(h.Percentile(1.0), 1e6);
}

}  // namespace
}  // namespace attnserve::load
