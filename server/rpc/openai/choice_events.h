// What the scheduler tells an HTTP handler about one request's choices: generated tokens with
// the text they make final, and each choice's end. Producers are the jobs' hooks (on the
// scheduler's and the kernels' threads: Push never blocks beyond a short lock); the consumer
// is the handler's thread, which Takes and writes to its client at its client's pace, so a
// client that stops reading costs the scheduler nothing (what it has not read waits here,
// bounded by max_tokens x n).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/scheduler/job.h"

namespace attnserve::server::openai {

struct ChoiceEvent {
  int index = 0;                                // the choice (prompt x n + j)
  std::string text;                             // text made final by these tokens
  std::vector<scheduler::SampledToken> tokens;  // generated tokens (may be empty)
  bool finished = false;                        // the choice's last event
  std::string finish_reason;                    // when finished OK: "stop" or "length"
  absl::Status status;                          // when finished: how
};

class ChoiceEvents {
 public:
  explicit ChoiceEvents(int choices) : unfinished_(choices) {}

  void Push(ChoiceEvent event);
  // Waits up to `timeout` for events (or for every choice to finish), then takes all queued.
  std::vector<ChoiceEvent> Take(absl::Duration timeout);
  // Every choice has pushed its finished event and everything has been taken.
  bool Done();

  // The client went away: jobs asking is_cancelled stop at their next step.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || unfinished_ <= 0;
  }

  absl::Mutex mu_;
  std::deque<ChoiceEvent> queue_ ABSL_GUARDED_BY(mu_);
  int unfinished_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
};

}  // namespace attnserve::server::openai
