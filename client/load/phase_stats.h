// PhaseStats: what attnserve-load measures in one phase (one mode, load point, variant and
// length), recorded from many gRPC callback threads at once.
//
// Thread-safe: Record() takes one of kShards locks, picked by the calling thread, so threads
// rarely contend; Snapshot() merges the shards (exactly: histograms merge bucket by bucket).
#ifndef ATTNSERVE_CLIENT_LOAD_PHASE_STATS_H_
#define ATTNSERVE_CLIENT_LOAD_PHASE_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "client/load/histogram.h"

namespace attnserve::load {

// The outcome of one request (a unary call or a whole stream).
struct RequestOutcome {
  bool ok = false;
  std::string error_code;  // gRPC code name when !ok, e.g. "INVALID_ARGUMENT"
  // From the intended send time to the end of the call (the final status), in nanoseconds.
  uint64_t latency_ns = 0;
  // Streams: from the intended send time to the first AppendResult or GeneratedToken; 0 when
  // none came (or for unary calls).
  uint64_t first_result_ns = 0;
  bool has_first_result = false;
  int64_t tokens_in = 0;     // prompt tokens the server accepted (0 on failure)
  int64_t tokens_out = 0;    // generated tokens received
  int64_t state_bytes = -1;  // the session's state after the last append (-1: not known)
  std::string served_by;     // the variant the server says served it
};

// The merged figures of a phase.
struct PhaseTotals {
  uint64_t sent = 0;
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  std::map<std::string, uint64_t> errors;  // gRPC code name -> count
  std::map<std::string, uint64_t> served_by;
  int64_t tokens_in = 0;
  int64_t tokens_out = 0;
  LogHistogram latency_ns;       // successful requests only
  LogHistogram first_result_ns;  // successful streams only
  LogHistogram state_bytes;      // sessions whose state size was reported
};

class PhaseStats {
 public:
  static constexpr int kShards = 8;

  void Record(const RequestOutcome& outcome);
  PhaseTotals Snapshot() const;

 private:
  struct Shard {
    mutable std::mutex mu;
    PhaseTotals totals;
  };
  std::array<Shard, kShards> shards_;
};

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_PHASE_STATS_H_
