// RunPhase: offers load for one phase (one mode, load point, variant and length) and records
// every measured request into a PhaseStats.
//
// Closed loop (concurrency N): N requests in flight; each completion lets the next one start.
// A request's intended send time is its actual send time.
// Open loop (rps R): request i is due at start + i/R whatever happened to the others. Its
// latency is measured from that due time, not from when it was actually sent, so a stalled
// server (or a client that fell behind) shows as latency rather than as requests quietly not
// sent: the coordinated-omission correction.
//
// Requests due before start + warmup_s run but are not measured. The phase stops issuing at
// start + warmup_s + duration_s (duration_s <= 0: no time limit) or after `requests` measured
// requests (<= 0: no count limit), whichever comes first, then waits for every request in
// flight, each bounded by its deadline. At least one limit must be set.
#ifndef ATTNSERVE_CLIENT_LOAD_DRIVER_H_
#define ATTNSERVE_CLIENT_LOAD_DRIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "attnserve/v1/inference.grpc.pb.h"
#include "client/load/phase_stats.h"
#include "client/load/report.h"
#include "client/load/request.h"

namespace attnserve::load {

struct PhaseSettings {
  LoadPoint load;
  double warmup_s = 0;
  double duration_s = 10;
  int64_t requests = 0;
  // Open loop: at most this many in flight; when reached, sending waits (and the waiting
  // counts in the latency of the requests that were due meanwhile).
  int max_inflight = 1000;
};

struct PhaseRun {
  // From the end of the warmup to the completion of the last measured request (0 when none).
  double window_s = 0;
};

// Where request `i` (0-based, in the order issued) goes; called on the driver's thread. The
// stub must outlive the phase.
using StubPicker = std::function<attnserve::v1::AttnServe::Stub*(uint64_t i)>;

// `plans` are used in turn; they differ only in their tokens. Blocks until the phase is over.
PhaseRun RunPhase(const StubPicker& pick, const std::vector<RequestPlan>& plans,
                  const PhaseSettings& settings, PhaseStats& stats);

// `stubs` are used in turn (several channels spread the load over connections).
PhaseRun RunPhase(const std::vector<std::unique_ptr<attnserve::v1::AttnServe::Stub>>& stubs,
                  const std::vector<RequestPlan>& plans, const PhaseSettings& settings,
                  PhaseStats& stats);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_DRIVER_H_
