#include "server/rpc/oip/model_statistics.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace attnserve::server::oip {
namespace {

uint64_t Nanos(double seconds) { return static_cast<uint64_t>(std::max(0.0, seconds) * 1e9); }

void Add(inference::StatisticDuration* d, uint64_t ns) {
  d->set_count(d->count() + 1);
  d->set_ns(d->ns() + ns);
}

}  // namespace

void ModelStatisticsTable::Record(const std::string& model, bool ok, const Durations& d) {
  absl::MutexLock lock(&mu_);
  inference::ModelStatistics& s = stats_[model];
  inference::InferStatistics* infer = s.mutable_inference_stats();
  if (!ok) {
    Add(infer->mutable_fail(), Nanos(d.total));
    return;
  }
  // Parts never exceed the whole: each is measured inside it, and clamped to what is left.
  const uint64_t total = Nanos(d.total);
  uint64_t left = total;
  auto part = [&left](double seconds) {
    const uint64_t ns = std::min(Nanos(seconds), left);
    left -= ns;
    return ns;
  };
  Add(infer->mutable_success(), total);
  Add(infer->mutable_compute_input(), part(d.input));
  Add(infer->mutable_queue(), part(d.queue));
  Add(infer->mutable_compute_infer(), part(d.compute));
  Add(infer->mutable_compute_output(), part(d.output));
  s.set_inference_count(s.inference_count() + 1);
  s.set_execution_count(s.execution_count() + 1);
  s.set_last_inference(static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())));
}

inference::ModelStatistics ModelStatisticsTable::Get(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto it = stats_.find(model);
  inference::ModelStatistics s = it != stats_.end() ? it->second : inference::ModelStatistics();
  s.set_name(model);
  s.set_version("1");
  inference::InferStatistics* infer = s.mutable_inference_stats();
  for (auto* d :
       {infer->mutable_success(), infer->mutable_fail(), infer->mutable_queue(),
        infer->mutable_compute_input(), infer->mutable_compute_infer(),
        infer->mutable_compute_output(), infer->mutable_cache_hit(), infer->mutable_cache_miss()}) {
    d->set_count(d->count());  // present, at 0, for clients that read every field
  }
  return s;
}

}  // namespace attnserve::server::oip
