// LogHistogram: a log-bucketed histogram of non-negative integer values (attnserve-load records
// latencies in nanoseconds) with a bounded relative error, in the manner of HdrHistogram.
//
// Values 0..kLinearLimit-1 are counted exactly. Above that, bucket boundaries grow by a factor
// of 2^(1/kSubBuckets) = 2^(1/64), so every bucket's width is under 1.09% of its lower bound and
// a percentile reported at the bucket's geometric midpoint is within 0.55% of a value that was
// recorded in that bucket. Min, max, count and sum are exact.
//
// Not thread-safe: each thread records into its own histogram (or holds a lock), and Merge()
// combines them; merging is exact (bucket counts add), so percentiles of a merge equal
// percentiles of one histogram that saw every value.
#ifndef ATTNSERVE_CLIENT_LOAD_HISTOGRAM_H_
#define ATTNSERVE_CLIENT_LOAD_HISTOGRAM_H_

#include <cstdint>
#include <vector>

namespace attnserve::load {

class LogHistogram {
 public:
  // Buckets per power of two above kLinearLimit.
  static constexpr int kSubBuckets = 64;
  // Values below this are their own bucket (exact); at 128 the linear part ends where the
  // log buckets are already narrower than one unit would allow (2^7 / 64 = 2 units).
  static constexpr uint64_t kLinearLimit = 128;
  // The largest relative error of a reported percentile against the true sample at that rank:
  // half a bucket, in ratio terms 2^(1/128) - 1.
  static double MaxRelativeError();

  LogHistogram();

  void Record(uint64_t value) { RecordN(value, 1); }
  void RecordN(uint64_t value, uint64_t n);
  // Adds every value `other` recorded.
  void Merge(const LogHistogram& other);
  void Clear();

  uint64_t count() const { return count_; }
  // Exact; 0 when empty.
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }

  // The value at quantile q in [0, 1] (q = 0.5: the median): the smallest recorded value v with
  // at least ceil(q * count) values <= v, reported to within MaxRelativeError() and clamped to
  // [min, max]; exact for the first and last rank (q = 0 gives min, q = 1 max). 0 when empty.
  double Percentile(double q) const;

  // Bucket arithmetic, public for tests: the bucket index of a value, and the bounds
  // [lower, upper) of the values that bucket holds.
  static int BucketOf(uint64_t value);
  static double BucketLower(int bucket);
  static double BucketUpper(int bucket);

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  double sum_ = 0.0;
};

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_HISTOGRAM_H_
