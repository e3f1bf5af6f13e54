#include "client/load/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::load {
namespace {

Quantiles FromHistogram(const LogHistogram& h, double scale) {
  Quantiles q;
  q.p50 = h.Percentile(0.50) * scale;
  q.p90 = h.Percentile(0.90) * scale;
  q.p99 = h.Percentile(0.99) * scale;
  q.max = static_cast<double>(h.max()) * scale;
  q.min = static_cast<double>(h.min()) * scale;
  q.mean = h.mean() * scale;
  return q;
}

}  // namespace

PhaseSummary Summarize(const PhaseResult& r) {
  PhaseSummary s;
  const PhaseTotals& t = r.totals;
  if (r.window_s > 0) {
    s.requests_per_s = static_cast<double>(t.sent) / r.window_s;
    s.tokens_per_s = static_cast<double>(t.tokens_in + t.tokens_out) / r.window_s;
  }
  if (t.latency_ns.count() > 0) s.latency_s = FromHistogram(t.latency_ns, 1e-9);
  if (t.first_result_ns.count() > 0) s.first_result_s = FromHistogram(t.first_result_ns, 1e-9);
  if (t.state_bytes.count() > 0) {
    s.state_bytes_mean = t.state_bytes.mean();
    s.state_bytes_max = static_cast<double>(t.state_bytes.max());
  }
  return s;
}

std::string LoadLabel(const LoadPoint& load) {
  return load.open_loop ? absl::StrFormat("rps=%g", load.rps)
                        : absl::StrCat("c=", load.concurrency);
}

}  // namespace attnserve::load
