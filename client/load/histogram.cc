#include "client/load/histogram.h"

#include <algorithm>
#include <cmath>

namespace attnserve::load {
namespace {

constexpr int kLinearBits = 7;  // log2(kLinearLimit)
static_assert((uint64_t{1} << kLinearBits) == LogHistogram::kLinearLimit);
// Exponents kLinearBits..63 each get kSubBuckets buckets after the linear part.
constexpr int kNumBuckets =
    static_cast<int>(LogHistogram::kLinearLimit) + (64 - kLinearBits) * LogHistogram::kSubBuckets;

int FloorLog2(uint64_t v) { return 63 - __builtin_clzll(v); }

}  // namespace

double LogHistogram::MaxRelativeError() { return std::exp2(0.5 / kSubBuckets) - 1.0; }

LogHistogram::LogHistogram() : counts_(kNumBuckets, 0) {}

int LogHistogram::BucketOf(uint64_t value) {
  if (value < kLinearLimit) return static_cast<int>(value);
  const int exponent = FloorLog2(value);
  // Position inside [2^e, 2^(e+1)) on a log scale, in 1/kSubBuckets steps. log2 of a double is
  // exact enough here: boundaries are only used consistently with BucketLower/Upper below.
  const double frac = std::log2(static_cast<double>(value)) - exponent;
  const int sub = std::min(kSubBuckets - 1, static_cast<int>(frac * kSubBuckets));
  return static_cast<int>(kLinearLimit) + (exponent - kLinearBits) * kSubBuckets + sub;
}

double LogHistogram::BucketLower(int bucket) {
  if (bucket < static_cast<int>(kLinearLimit)) return bucket;
  const int rel = bucket - static_cast<int>(kLinearLimit);
  const int exponent = kLinearBits + rel / kSubBuckets;
  const int sub = rel % kSubBuckets;
  return std::exp2(exponent + static_cast<double>(sub) / kSubBuckets);
}

double LogHistogram::BucketUpper(int bucket) {
  if (bucket < static_cast<int>(kLinearLimit)) return bucket + 1;
  return BucketLower(bucket + 1);
}

void LogHistogram::RecordN(uint64_t value, uint64_t n) {
  if (n == 0) return;
  counts_[BucketOf(value)] += n;
  count_ += n;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
  sum_ += static_cast<double>(value) * static_cast<double>(n);
}

void LogHistogram::Merge(const LogHistogram& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

void LogHistogram::Clear() { *this = LogHistogram(); }

double LogHistogram::Percentile(double q) const {
  if (count_ == 0) return 0.0;
  q = std::clamp(q, 0.0, 1.0);
  // Rank of the wanted sample, 1-based: the smallest value with at least `rank` values <= it.
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  // The extreme ranks are known exactly.
  if (rank >= count_) return static_cast<double>(max_);
  if (rank == 1) return static_cast<double>(min_);
  uint64_t seen = 0;
  for (int b = 0; b < kNumBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) {
      double v = b < static_cast<int>(kLinearLimit)
                     ? static_cast<double>(b)
                     : std::sqrt(BucketLower(b) * BucketUpper(b));  // geometric midpoint
      return std::clamp(v, static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

}  // namespace attnserve::load
