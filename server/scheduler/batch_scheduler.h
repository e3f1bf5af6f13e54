// The scheduler: one loop that runs every model computation of the server, in iterations.
//
// Per-session queues. Jobs (job.h) of one session run strictly in submission order, one at a
// time; a job waiting for its session is only an entry in that session's queue (it holds no
// thread). A job without a session has a queue of its own.
//
// Continuous batching. Each iteration takes the jobs at the heads of the queues ("ready"),
// picks the model whose ready job has waited longest, and forms that model's batch:
//   * decode rows: every ready job of the model whose next input is one token on a state (a
//     generation step, or an append of one token), oldest first, at most max_batch_sessions,
//     run as one Model::StepBatch of B rows, so each weight matrix is read once per iteration
//     (when a prompt of the model waits too, they leave it at least one token of the budget);
//   * prefill chunks: the model's other ready jobs, oldest first, each taking a chunk of its
//     remaining prompt within what is left of max_batch_tokens (the decode rows count one token
//     each), so a long prompt is cut into chunks and decoding sessions get a step every
//     iteration (chunked prefill). A model that cannot stream runs a whole sequence at once:
//     it joins a batch only when it fits, or runs alone.
// A job that took part goes to the back (its wait restarts), so no ready job starves: when the
// batch is full, the longest-waiting jobs go first.
//
// Identical outputs: a session's rows are computed by the same kernels whatever shares the
// batch (StepBatch equals Step per row, chunked prefill equals whole prefill, to float32
// rounding), and sampling uses the job's own generator.
//
// Cancellation and deadlines are checked before every iteration: a job whose client has gone
// (CANCELLED), whose deadline has passed (DEADLINE_EXCEEDED) or whose session was closed
// (NOT_FOUND) ends before it computes again; a cancelled generation stops within one step. A
// session's prompt that has begun runs to its end first (JobResult::prompt_applied), so that a
// session never holds part of an append.
// Abort() ends every job with a status at the next iteration (the drain deadline).
//
// Threads: Submit, Abort, Stop and the getters are thread-safe; all jobs' hooks and every
// model computation run on the scheduler's one thread, which uses intra_op_threads for the
// kernels.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics.h"
#include "server/prefix_cache/prefix_cache.h"
#include "server/scheduler/decode_parts.h"
#include "server/scheduler/job.h"
#include "server/scheduler/queue_shares.h"

namespace attnserve::server::scheduler {

struct SchedulerOptions {
  // Most decode rows (sessions) in one iteration's StepBatch (--max_batch_sessions).
  int64_t max_batch_sessions = 64;
  // Most tokens one iteration computes, decode rows and prefill chunks together
  // (--max_batch_tokens); at least max_batch_sessions is sensible.
  int64_t max_batch_tokens = 256;
  // Most jobs submitted and not finished, over all sessions (--max_queue): RESOURCE_EXHAUSTED
  // beyond, except for a client below its fair share while another is above it
  // (queue_shares.h).
  int64_t max_queued_jobs = 1024;
  // Most of them one client (Job::client) holds (--max_queue_per_client; 0: max_queued_jobs).
  int64_t max_queued_per_client = 0;
  // Most of them queued on one session (--max_queue_per_session), so that one client piling
  // requests onto its session cannot take the whole queue from the others.
  int64_t max_queued_per_session = 64;
  // Threads the kernels use inside each computation (--intra_op_threads; 0: one per core the
  // process may use, kernels/common/cpu_share.h).
  int intra_op_threads = 0;
  // Shrink the team, iteration by iteration, to the cores other processes leave free
  // (--adapt_threads_to_load; kernels/common/cpu_share.h), never above intra_op_threads.
  bool adapt_threads_to_load = false;
  // Data-parallel decode (--decode_split_max_bytes_per_row; 0: never): DecodeParts.
  int64_t decode_split_max_bytes_per_row = kDefaultDecodeSplitMaxBytesPerRow;
  SessionTable* sessions = nullptr;  // borrowed: state reservations of session jobs
  // Borrowed, may be null (off): prompts from position 0 whose output is the last logits start
  // from the longest cached prefix and cache their states (server/prefix_cache/).
  PrefixCache* prefix_cache = nullptr;
  ServerMetrics* metrics = nullptr;  // borrowed; null: no metrics
};

class BatchScheduler {
 public:
  explicit BatchScheduler(SchedulerOptions options);
  ~BatchScheduler();  // Stop()
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues `job` behind its session's earlier jobs. On error (queue full: RESOURCE_EXHAUSTED;
  // stopping: UNAVAILABLE) the job is not taken and none of its hooks is called.
  absl::Status Submit(std::unique_ptr<Job> job);

  // Ends every job submitted so far, and every one submitted later, with `status` (at the
  // start of the next iteration; the one running finishes its step first).
  void Abort(const absl::Status& status);

  // Refuses new jobs, ends the queued ones with UNAVAILABLE, joins the thread. Idempotent.
  void Stop();

  // Jobs submitted and not yet finished.
  int64_t queued_jobs() const;
  // Jobs submitted that have not computed yet (waiting for their session or for a batch).
  int64_t waiting_jobs() const { return waiting_jobs_.load(); }
  // Threads the kernels run on now (intra_op_threads, or fewer under contention).
  int kernel_threads() const { return kernel_threads_.load(); }
  // Iterations run so far (moves whenever the scheduler works).
  int64_t iterations() const { return iterations_.load(); }

 private:
  struct Active;
  struct Batch;
  using QueueKey = const void*;  // the session, or the job itself when it has none

  void Loop();
  // Under no lock, on the loop thread: starts or ends the ready jobs, then forms and runs
  // one batch. Returns the jobs that finished.
  void RunIteration(const std::vector<Active*>& ready, const absl::Status& abort);
  bool Begin(Active& a);  // on_start and reservation; false: it ended
  // In Begin: a prompt the prefix cache serves starts from its longest cached prefix.
  void StartFromCachedPrefix(Active& a);
  // After a prompt's computation reached `a.consumed` on `state`: caches the state at the
  // prompt's end and every interval inside it.
  void MaybeCache(Active& a, const model::ModelState& state);
  absl::Status CheckStillWanted(const Active& a) const;  // cancelled, deadline, closed
  Batch FormBatch(const std::vector<Active*>& ready) const;
  // `chunk` of a prompt the prefix cache keeps, shortened to end at its next cache point: a
  // multiple of the cache's interval, `tail` tokens before the prompt's end, or where it leaves
  // an earlier prompt (its branch point, PrefixCache::Hit::branch).
  int64_t EndAtCachePoint(const Active& a, int64_t chunk) const;
  void RunDecodeRows(const std::vector<Active*>& rows);
  void RunPrefillChunk(Active& a, int64_t chunk);
  // After a computation that produced `logits` (1, vocab) for `a`: samples the next token
  // (returns true) or ends the job.
  bool Advance(Active& a, const at::Tensor& logits);
  // The part of Advance that touches only `a` and its job's hooks, so that RunDecodeRows can run
  // it for its rows in parallel: sets a.next to the token sampled from `logits`, handed to
  // on_token, and whether it ends the generation (a stop token, stop_requested).
  static void SampleAndSend(Active& a, const at::Tensor& logits);
  void Finish(Active& a, const absl::Status& status);

  const SchedulerOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<QueueKey, std::deque<std::unique_ptr<Active>>> queues_ ABSL_GUARDED_BY(mu_);
  QueueShares shares_ ABSL_GUARDED_BY(mu_);  // jobs submitted and not finished, per client
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> waiting_jobs_{0};
  std::atomic<int64_t> iterations_{0};
  std::atomic<int> kernel_threads_{1};
  std::thread thread_;
};

}  // namespace attnserve::server::scheduler
