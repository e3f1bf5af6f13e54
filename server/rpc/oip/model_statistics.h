// Triton's ModelStatistics for the requests of the Open Inference Protocol door, per model:
// successes and failures with their durations (arrival to response), and for each success its
// parts as Triton splits them: compute_input (arrival to the scheduler's queue: parsing, the
// wait for the request work pool, tokenizing, the session's lookup), queue (waiting at the
// scheduler), compute_infer (the model's work) and compute_output (building the response). They add
// up: success.count == inference_count == execution_count == compute_input.count == queue.count ==
// compute_infer.count == compute_output.count (perf_analyzer stops unless the three compute
// counts agree), and compute_input.ns + queue.ns + compute_infer.ns + compute_output.ns <=
// success.ns. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::server::oip {

class ModelStatisticsTable {
 public:
  // The parts of one request's time, in seconds (measured inside its total).
  struct Durations {
    double total = 0;    // arrival to response
    double input = 0;    // arrival to the scheduler's queue
    double queue = 0;    // at the scheduler
    double compute = 0;  // the model's work
    double output = 0;   // the response built
  };
  // One request of `model` that ended: `ok`, with its durations (the parts: ok only).
  void Record(const std::string& model, bool ok, const Durations& d);
  // The statistics of `model`, zeros when it served nothing yet.
  inference::ModelStatistics Get(const std::string& model) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, inference::ModelStatistics> stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attnserve::server::oip
