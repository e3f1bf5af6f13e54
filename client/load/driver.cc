#include "client/load/driver.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace attnserve::load {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Shared by the driver thread and the completion callbacks; lives until the last request in
// flight has completed (RunPhase waits for that).
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  int inflight = 0;
  bool any_measured_done = false;
  Clock::time_point last_measured_done;
};

}  // namespace

PhaseRun RunPhase(const std::vector<std::unique_ptr<attnserve::v1::AttnServe::Stub>>& stubs,
                  const std::vector<RequestPlan>& plans, const PhaseSettings& settings,
                  PhaseStats& stats) {
  return RunPhase([&stubs](uint64_t i) { return stubs[i % stubs.size()].get(); }, plans, settings,
                  stats);
}

PhaseRun RunPhase(const StubPicker& pick, const std::vector<RequestPlan>& plans,
                  const PhaseSettings& settings, PhaseStats& stats) {
  Shared shared;
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_start = start + Seconds(settings.warmup_s);
  const bool timed = settings.duration_s > 0;
  const Clock::time_point end = measure_start + Seconds(settings.duration_s);
  int64_t measured = 0;
  uint64_t issued = 0;

  auto launch = [&](Clock::time_point intended) {
    const bool measure = intended >= measure_start;
    if (measure) ++measured;
    const RequestPlan& plan = plans[issued % plans.size()];
    auto* stub = pick(issued);
    ++issued;
    StartRequest(stub, plan, intended, [&shared, &stats, measure](RequestOutcome outcome) {
      if (measure) stats.Record(outcome);
      std::lock_guard<std::mutex> lock(shared.mu);
      if (measure) {
        shared.any_measured_done = true;
        shared.last_measured_done = std::max(shared.last_measured_done, Clock::now());
      }
      --shared.inflight;
      shared.cv.notify_all();
    });
  };
  auto count_left = [&] { return settings.requests <= 0 || measured < settings.requests; };

  if (!settings.load.open_loop) {
    const int concurrency = std::max(1, settings.load.concurrency);
    while (count_left()) {
      {
        std::unique_lock<std::mutex> lock(shared.mu);
        // Without a time limit, the count limit (and each request's deadline) bounds the wait.
        auto ready = [&] { return shared.inflight < concurrency; };
        if (timed) {
          if (!shared.cv.wait_until(lock, end, ready)) break;
        } else {
          shared.cv.wait(lock, ready);
        }
        ++shared.inflight;
      }
      const Clock::time_point now = Clock::now();
      if (timed && now >= end) {
        std::lock_guard<std::mutex> lock(shared.mu);
        --shared.inflight;
        break;
      }
      launch(now);
    }
  } else {
    const double rps = std::max(1e-3, settings.load.rps);
    for (uint64_t i = 0; count_left(); ++i) {
      const Clock::time_point due = start + Seconds(static_cast<double>(i) / rps);
      if (timed && due >= end) break;
      std::this_thread::sleep_until(due);
      {
        std::unique_lock<std::mutex> lock(shared.mu);
        shared.cv.wait(lock, [&] { return shared.inflight < std::max(1, settings.max_inflight); });
        ++shared.inflight;
      }
      launch(due);
    }
  }

  std::unique_lock<std::mutex> lock(shared.mu);
  shared.cv.wait(lock, [&] { return shared.inflight == 0; });
  PhaseRun run;
  if (shared.any_measured_done) {
    run.window_s = std::chrono::duration<double>(shared.last_measured_done - measure_start).count();
  }
  return run;
}

}  // namespace attnserve::load
