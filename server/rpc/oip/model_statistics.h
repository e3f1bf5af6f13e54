// Triton's ModelStatistics for the requests of the Open Inference Protocol door, per model:
// successes and failures with their durations (arrival to response), and for each success
// its time queued at the scheduler and its compute time. They add up: success.count ==
// inference_count == execution_count == queue.count == compute_infer.count, and
// queue.ns + compute_infer.ns <= success.ns. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::server::oip {

class ModelStatisticsTable {
 public:
  // One request of `model` that ended: `ok`, after `total_seconds` from its arrival, of which
  // `queue_seconds` waiting at the scheduler and `compute_seconds` computing (ok only).
  void Record(const std::string& model, bool ok, double total_seconds, double queue_seconds,
              double compute_seconds);
  // The statistics of `model`, zeros when it served nothing yet.
  inference::ModelStatistics Get(const std::string& model) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, inference::ModelStatistics> stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attnserve::server::oip
