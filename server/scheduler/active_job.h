// The batch scheduler's own records (server/scheduler/batch_scheduler.h): a job's progress
// (BatchScheduler::Active) and one iteration's batch (BatchScheduler::Batch). Internal to the
// scheduler's files (batch_scheduler.cc, batch_scheduler_prefix_cache.cc); touched only on the
// scheduler's loop thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/scheduler/token_sampler.h"

namespace attnserve::server::scheduler {

// Chunks a prompt computes at least for its tail checkpoint (Active::TailPoint): 2048 tokens
// with the default 256-token chunks.
constexpr int64_t kTailMinChunks = 8;

// A job's progress; touched only on the loop thread (Submit creates it, the loop owns it).
struct BatchScheduler::Active {
  std::unique_ptr<Job> job;
  QueueKey key = nullptr;
  bool started = false;
  bool done = false;
  bool reserved = false;     // the session's state budget was raised for this job
  int64_t consumed = 0;      // prompt tokens computed
  int generated = 0;         // tokens sampled
  bool pending = false;      // the last sampled token has not been fed back yet
  bool stopped = false;      // the last sampled token is a stop token: no more after it
  bool cacheable = false;    // its prompt starts at 0: the prefix cache serves and keeps it
  int64_t last_cached = 0;   // prompt tokens whose state was last cached (or came from it)
  int64_t branch_point = 0;  // where the prompt leaves an earlier one (PrefixCache::Hit::branch)
  int64_t cache_start = 0;   // the cached prefix it started from (0: none)
  bool caches_reserved = false;  // its state's KV caches have room for its whole prompt
  // Whether it keeps the state `tail` tokens before its end. That point costs the prompt one
  // more chunk (the chunk it falls in is cut there), so only where
  //   * it saves at least `tail` tokens over the entry it started from (a 96-token suffix on a
  //     hit does not pay for the extra chunk: a later prompt computes at most 2 · tail tokens
  //     from that entry anyway), and
  //   * the prompt computes at least kTailMinChunks chunks of `chunk` tokens from there, so that
  //     the extra chunk's fixed cost (0.5-0.9 ms on the default models, a tenth of a 256-token
  //     chunk) is about 1% of a prompt that never hits (issue #24: at most 2%); shorter prompts
  //     rely on branch points to start later prompts at the right place.
  bool TailPoint(int64_t tail, int64_t chunk) const {
    const int64_t computed = prompt_length() - cache_start;
    return tail > 0 && computed - tail >= tail && computed >= kTailMinChunks * chunk;
  }
  int64_t pending_token = 0;
  // Whether, with `left` prompt tokens still to compute, its next logits give a token to sample
  // (else it is done generating, or not there yet).
  bool SamplesAt(int64_t left) const {
    return left == 0 && generated < job->max_new_tokens && !stopped;
  }
  // The next token, sampled and already handed to on_token by RunDecodeRows' parallel pass;
  // Advance takes it instead of sampling.
  struct Next {
    int64_t token = 0;
    bool stop = false;
  };
  std::optional<Next> next;
  std::optional<model::ModelState> own_state;  // a job without a session, cut into chunks
  std::vector<at::Tensor> chunk_outputs;       // all logits or hidden states, per chunk
  std::optional<TokenSampler> sampler;         // from Begin, for a job that generates
  int64_t submitted_ns = 0, ready_since_ns = 0, first_compute_ns = 0;
  JobResult result;

  int64_t prompt_length() const { return job->tokens.defined() ? job->tokens.size(1) : 0; }
  int64_t remaining() const { return prompt_length() - consumed; }
  Session* session() const { return job->session ? &**job->session : nullptr; }
  // The state the job computes on: its session's, or its own (null: a whole sequence at once).
  model::ModelState* state() {
    if (Session* s = session(); s != nullptr) return &s->state;
    return own_state.has_value() ? &*own_state : nullptr;
  }
  // Whether a prompt can be cut into chunks: it continues a state (a session's, or one of its
  // own when the model can stream).
  bool chunkable() const { return session() != nullptr || job->model->can_stream(); }
  // A session's prompt, once begun, runs to its end even when its client has gone or its
  // deadline passed: stopping halfway would leave tokens in the state that no sequence number
  // accounts for (a retry would apply them twice). Only a closed session stops it. Generation
  // stops at once.
  bool MustFinishPrompt(const absl::Status& why) const {
    return session() != nullptr && consumed > 0 && remaining() > 0 &&
           why.code() != absl::StatusCode::kNotFound;
  }
  // Whether the next computation is one token on a state: a row of the iteration's StepBatch.
  bool decode_row() const {
    if (pending) return true;
    return session() != nullptr && remaining() == 1 && job->output != model::OutputKind::kHidden;
  }
};

struct BatchScheduler::Batch {
  const model::Model* model = nullptr;
  std::vector<Active*> decode;
  std::vector<std::pair<Active*, int64_t>> prefill;  // job, chunk length
  int64_t tokens = 0;
};

}  // namespace attnserve::server::scheduler
