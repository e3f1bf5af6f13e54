// Runs the choices of one prompt of an OpenAI request as scheduler jobs, reporting to a
// ChoiceEvents (choice_events.h).
//
// n = 1: one job, on the request's session when it names one, else session-less (the prefix
// state cache then serves a prompt that starts as an earlier one did).
// n > 1: the prompt is computed once. Its first L - 1 tokens run on a temporary session; once
// they have, that state is copied into n - 1 more temporary sessions (a recurrent state is a
// fixed-size copy; attention KV entries are shared, not copied), and the n choices each feed
// the last prompt token and generate on their own session, with their own random stream
// (seed, then seed mixed with the choice's number) and their own stop state. They decode in
// the same batches. The temporary sessions belong to the caller, count against its session
// limits, and are closed when their choice ends (a client that goes away included).
//
// Threads: Start runs on the HTTP handler's thread and, for n > 1, blocks it while the shared
// prefill runs (it ends early when the events are cancelled).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "server/model/model.h"
#include "server/rpc/openai/choice_events.h"
#include "server/rpc/openai/openai_request.h"
#include "server/rpc/text_requests.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/security/authenticator.h"
#include "server/sessions/session_table.h"

namespace attnserve::server::openai {

struct PromptRun {
  const model::Model* model = nullptr;
  std::vector<int64_t> ids;           // the prompt, at least one id
  std::optional<SessionUse> session;  // continue this session (n must be 1)
  int first_index = 0;                // its choices are first_index .. first_index + n - 1
  bool text_prompt = true;            // the model's end-of-text stops it (unless ignore_eos)
};

struct RunnerOptions {
  TextLimits text_limits;
  bool prefix_cache_global = false;
};

class CompletionRunner {
 public:
  // Borrows both; they must outlive the runner.
  CompletionRunner(SessionTable& sessions, scheduler::BatchScheduler& scheduler,
                   RunnerOptions options)
      : sessions_(sessions), scheduler_(scheduler), options_(options) {}

  // Submits `run`'s request.n choices. An error means none was submitted; once any is, every
  // choice ends with a finished event (an error among them), never an error here.
  absl::Status Start(const Caller& caller, const CompletionRequest& request, PromptRun run,
                     const std::shared_ptr<ChoiceEvents>& events);

 private:
  // One choice's job: `tokens` on `session` (none: session-less), generating as `request`
  // says with `seed`; its end closes `session` when `close_session`.
  absl::StatusOr<std::unique_ptr<scheduler::Job>> ChoiceJob(
      const Caller& caller, const CompletionRequest& request, const PromptRun& run,
      std::vector<int64_t> tokens, std::optional<SessionUse> session, bool close_session, int index,
      uint64_t seed, const std::shared_ptr<ChoiceEvents>& events);

  SessionTable& sessions_;
  scheduler::BatchScheduler& scheduler_;
  RunnerOptions options_;
};

// The seed of choice `j` of a request seeded `seed`: `seed` itself for choice 0.
uint64_t ChoiceSeed(uint64_t seed, int j);

}  // namespace attnserve::server::openai
