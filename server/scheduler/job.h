// What one request asks of the scheduler (server/scheduler/batch_scheduler.h) and how the
// scheduler reports back: a prompt to run on a session's state (or on a fresh state, or as a
// whole sequence, for a request without a session), then optionally tokens to generate.
//
// Threads: the submitter fills a Job and hands it over; from then on the scheduler owns it and
// calls its hooks one at a time, in this order: on_start (once, when the job reaches the head of
// its session's queue), on_token (once per generated token), on_done (exactly once, last; the
// job is destroyed after it). is_cancelled may be called at any time before on_done. Hooks run
// on the scheduler's thread, except on_token and stop_requested, which after a decode step run
// on one of the kernels' threads (ATen's pool, several jobs' at once; never two of one job's at
// once, and each before the job's next hook). Hooks must not block: they queue gRPC writes or
// finish a call, nothing more.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/model/model.h"
#include "server/sessions/session_table.h"

namespace attnserve::server::scheduler {

// What a finished job computed.
struct JobResult {
  // The prompt's output, as `Job::output` asks (on the CPU, batch 1): (1, vocab) last logits,
  // (1, L, vocab) all logits or (1, L, hidden). Undefined for a job that on_start ended.
  at::Tensor output;
  std::vector<int64_t> generated;  // the tokens sampled, in order (each fed back)
  // The whole prompt ran on the session's state (and `generated` after it): the session has
  // moved, whatever the status. A job that ends before its prompt leaves the state as it was
  // (a begun prompt always runs to its end, unless the session is closed).
  bool prompt_applied = false;
  double queue_seconds = 0;    // from Submit to its first computation
  double compute_seconds = 0;  // from its first computation to its end
};

// How generated tokens are drawn; protocol-neutral (each door fills it from its own request).
// server/scheduler/token_sampler.h defines what each field does and in which order.
struct Sampling {
  float temperature = 0;  // 0: greedy; otherwise softmax(logits / temperature)
  int top_k = 0;          // sample among the k most likely (0: all)
  float top_p = 1;        // nucleus: the most likely whose probabilities sum to top_p (1: all)
  float min_p = 0;        // only tokens at least min_p x the most likely's probability (0: all)
  float repetition_penalty = 1;  // ids of the prompt and of the generation (1: none)
  float presence_penalty = 0;    // subtracted once for every id generated so far
  float frequency_penalty = 0;   // subtracted for every time an id was generated so far
  std::vector<std::pair<int64_t, float>> logit_bias;  // (id, added to its logit)
  int top_logprobs = 0;  // alternatives reported with each token, 0 to kMaxTopLogprobs
  uint64_t seed = 0;     // the same seed gives the same tokens, alone or in any batch
  // Generation ends after one of these tokens is generated (it is returned and fed back, as
  // every generated token is), before max_new_tokens.
  std::vector<int64_t> stop_tokens;
  // Only ids below this are drawn (0: any): a model whose tokenizer has fewer ids than its
  // vocabulary (the default models' byte tokenizer) generates only ids that have text.
  int64_t vocab_limit = 0;
};
inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's bound on top_logprobs

struct TokenLogprob {
  int64_t token = 0;
  float logprob = 0;
};

// One generated token, as on_token gets it (token_sampler.h says which distribution the
// log-probabilities are of).
struct SampledToken {
  int64_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // the Sampling::top_logprobs most likely, most likely first
};

struct Job {
  // Who asked: the principal, or without authentication the connection (queue_shares.h). The
  // scheduler's queue is shared fairly between clients.
  std::string client;
  // Whose cached prefix states the job may use and adds to (server/prefix_cache/): the
  // principal with --prefix_cache_scope=principal, "" with global.
  std::string cache_scope;
  // The model to run; a session's own model when `session` is set.
  const model::Model* model = nullptr;
  // The session whose state the job continues (kept in use, so it cannot expire meanwhile);
  // empty for a request without a session. Jobs of one session run one at a time, in the
  // order they were submitted.
  std::optional<SessionUse> session;
  // (1, n) int64 prompt, n >= 1, on the CPU (ids are checked against the vocabulary at start).
  // Undefined for a state-only job: one with a session and on_start, which computes nothing
  // and only runs on_start at the head of the session's queue, to read the session's state
  // between its requests (a snapshot), and then ends OK (or with on_start's error).
  at::Tensor tokens;
  model::OutputKind output = model::OutputKind::kLastLogits;
  // Tokens to sample after the prompt (0: none); each is fed back, so a session continues
  // after the generated text. `sampling` says how they are drawn.
  int max_new_tokens = 0;
  Sampling sampling;
  // Checked before every iteration the job would take part in: past it, the job ends with
  // DEADLINE_EXCEEDED without computing further.
  absl::Time deadline = absl::InfiniteFuture();
  // Whether the client has gone (then the job ends with CANCELLED before its next step).
  std::function<bool()> is_cancelled;
  // Runs when the job reaches the head of its session's queue, before any computation (with
  // the session's state, sequence number and stored results the job's to read): an error ends
  // the job with it; false ends it with OK and no computation (a replayed append).
  std::function<absl::StatusOr<bool>()> on_start;
  // A generated token (with its log-probability, token_sampler.h) and its index (0-based)
  // within this job.
  std::function<void(const SampledToken& sampled, int index)> on_token;
  // Asked after each on_token (may be empty): true ends generation after that token, as a stop
  // token does (a stop string found in the generated text, server/text/generation_text.h).
  std::function<bool()> stop_requested;
  // The end: OK with the result, or the error that ended the job.
  std::function<void(const absl::Status& status, JobResult result)> on_done;
};

}  // namespace attnserve::server::scheduler
