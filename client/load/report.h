// The results of an attnserve-load run, as the report writers (table, JSON, HTML) read them.
// Plain data; the derived figures (rates, percentiles in seconds) are computed once, in
// Summarize(), so that every output format shows the same numbers.
#ifndef ATTNSERVE_CLIENT_LOAD_REPORT_H_
#define ATTNSERVE_CLIENT_LOAD_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/load/phase_stats.h"

namespace attnserve::load {

// How load is offered: `concurrency` requests always in flight (closed loop), or `rps` requests
// per second on a fixed schedule whatever the responses do (open loop).
struct LoadPoint {
  bool open_loop = false;
  int concurrency = 1;  // closed loop
  double rps = 0.0;     // open loop
};

struct PhaseKey {
  std::string mode;  // "unary", "stream" or "generate"
  LoadPoint load;
  std::string variant;
  int64_t length = 0;
};

struct PhaseResult {
  PhaseKey key;
  PhaseTotals totals;
  // Measurement window: from the end of the warmup to the completion of the last measured
  // request, in seconds.
  double window_s = 0.0;
  // Server CPU seconds spent during the phase (warmup included), when --metrics_url was given
  // and the endpoint exported process_cpu_seconds_total.
  std::optional<double> server_cpu_s;
};

// Latency-like figures in seconds.
struct Quantiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0, min = 0;
};

// The derived figures of one phase.
struct PhaseSummary {
  double requests_per_s = 0.0;              // completed (succeeded + failed) requests / window
  double tokens_per_s = 0.0;                // (tokens_in + tokens_out) of successes / window
  std::optional<Quantiles> latency_s;       // none without a success
  std::optional<Quantiles> first_result_s;  // streams only
  std::optional<double> state_bytes_mean;
  std::optional<double> state_bytes_max;
};

PhaseSummary Summarize(const PhaseResult& result);

struct SkippedVariant {
  std::string mode;
  std::string variant;
  std::string reason;
};

struct RunConfig {
  std::string target;
  std::vector<std::string> modes;
  std::vector<std::string> variants;
  std::vector<int64_t> lengths;
  std::vector<LoadPoint> loads;
  int64_t chunk = 64;
  double duration_s = 0;
  int64_t requests = 0;
  double warmup_s = 0;
  uint64_t seed = 0;
  double timeout_s = 0;
  int max_new_tokens = 0;
  int stream_interval = 0;
  std::string output;
  std::string metrics_url;
};

struct RunReport {
  std::string tool_version;
  std::string started_at;  // ISO 8601, UTC
  std::string hostname;
  int cpus = 0;
  RunConfig config;
  std::vector<SkippedVariant> skipped;
  std::vector<PhaseResult> results;
};

// "c=4" or "rps=50" (a short label for tables and plots).
std::string LoadLabel(const LoadPoint& load);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_REPORT_H_
