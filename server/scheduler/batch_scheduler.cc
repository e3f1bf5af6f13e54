#include "server/scheduler/batch_scheduler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/thread_name.h"
#include "kernels/common/cpu_share.h"
#include "kernels/common/intra_op_threads.h"
#include "server/inference.h"
#include "server/scheduler/active_job.h"

namespace attnserve::server::scheduler {

namespace {

// Decode rows per task of the parallel sample-and-send after a step: a task's sampling and
// writes (~10-30 µs a row) outweigh the task's start.
constexpr int64_t kRowsPerSendTask = 4;

// Durations (queue, compute, iteration) use the monotonic clock, the one the service times
// whole calls with: a wall clock (absl's is interpolated from the cycle counter) can step or
// drift apart from it, and a compute time longer than its call's total was once reported.
int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

BatchScheduler::BatchScheduler(SchedulerOptions options)
    : options_(std::move(options)),
      shares_(options_.max_queued_jobs, options_.max_queued_per_client > 0
                                            ? options_.max_queued_per_client
                                            : options_.max_queued_jobs) {
  thread_ = std::thread([this] { Loop(); });
}

BatchScheduler::~BatchScheduler() { Stop(); }

absl::Status BatchScheduler::Submit(std::unique_ptr<Job> job) {
  const bool state_only = job != nullptr && !job->tokens.defined() && job->session && job->on_start;
  if (job == nullptr || job->model == nullptr || !job->on_done ||
      (!state_only && (!job->tokens.defined() || job->tokens.dim() != 2 ||
                       job->tokens.scalar_type() != at::kLong || job->tokens.size(0) != 1 ||
                       job->tokens.size(1) < 1))) {
    return absl::InvalidArgumentError(
        "scheduler: a job needs a model, on_done, and (1, n >= 1) int64 tokens or (a session "
        "and on_start and no tokens)");
  }
  if (!state_only) job->tokens = job->tokens.contiguous();  // read by index below
  auto active = std::make_unique<Active>();
  active->key = job->session ? static_cast<QueueKey>(job->session->get().get())
                             : static_cast<QueueKey>(active.get());
  active->submitted_ns = active->ready_since_ns = NowNanos();
  active->job = std::move(job);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (!abort_.ok()) return abort_;
  if (absl::Status admitted = shares_.Admit(active->job->client); !admitted.ok()) {
    return admitted;
  }
  std::deque<std::unique_ptr<Active>>& queue = queues_[active->key];
  if (active->job->session &&
      static_cast<int64_t>(queue.size()) >= options_.max_queued_per_session) {
    const std::string id = (*active->job->session)->id();
    return absl::ResourceExhaustedError(absl::StrCat(
        "session '", id, "' already has ", options_.max_queued_per_session,
        " requests waiting (--max_queue_per_session); wait for them, or use another session"));
  }
  shares_.Add(active->job->client);
  waiting_jobs_.fetch_add(1);
  queue.push_back(std::move(active));
  return absl::OkStatus();
}

void BatchScheduler::Abort(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (abort_.ok()) abort_ = status.ok() ? absl::CancelledError("aborted") : status;
}

void BatchScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    if (abort_.ok()) abort_ = absl::UnavailableError("the server is shutting down");
  }
  if (thread_.joinable()) thread_.join();
}

int64_t BatchScheduler::queued_jobs() const {
  absl::MutexLock lock(&mu_);
  return shares_.total();
}

void BatchScheduler::Loop() {
  NameThisThread("scheduler");  // its OpenMP workers inherit the name
  // This thread alone computes on intra_op_threads (the others keep to one: main.cc).
  const int threads = kernels::RunKernelsOnThisThreadWith(options_.intra_op_threads);
  kernel_threads_.store(threads);
  kernels::CpuContention contention(threads);
  int64_t last_sample_ns = 0;
  while (true) {
    std::vector<Active*> ready;
    absl::Status abort;
    {
      absl::MutexLock lock(&mu_);
      PrefixCache* cache = options_.prefix_cache;
      if (cache != nullptr && queues_.empty()) cache->SchedulerIdle(true);
      mu_.Await(absl::Condition(
          +[](BatchScheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->queues_.empty();
          },
          this));
      if (cache != nullptr) cache->SchedulerIdle(false);
      if (queues_.empty()) return;  // stopping, and every job has ended
      abort = abort_;
      for (auto& [key, queue] : queues_) {
        if (abort.ok()) {
          ready.push_back(queue.front().get());
        } else {
          for (auto& a : queue) ready.push_back(a.get());
        }
      }
    }
    if (options_.adapt_threads_to_load && threads > 1) {
      const int64_t now = NowNanos();
      if (now - last_sample_ns >= 100'000'000) {  // every 100 ms of work at most
        last_sample_ns = now;
        const int team = contention.Sample();
        if (team != kernel_threads_.load()) {
          kernels::RunKernelsOnThisThreadWith(team);
          kernel_threads_.store(team);
        }
      }
    }
    RunIteration(ready, abort);
    iterations_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    for (Active* a : ready) {
      if (!a->done) continue;
      auto it = queues_.find(a->key);
      if (it == queues_.end()) continue;
      std::deque<std::unique_ptr<Active>>& queue = it->second;
      for (auto q = queue.begin(); q != queue.end(); ++q) {
        if (q->get() == a) {
          shares_.Remove(a->job->client);
          queue.erase(q);
          break;
        }
      }
      if (queue.empty()) queues_.erase(it);
    }
  }
}

void BatchScheduler::RunIteration(const std::vector<Active*>& ready, const absl::Status& abort) {
  std::vector<Active*> live;
  for (Active* a : ready) {
    if (!abort.ok()) {
      Finish(*a, abort);
    } else if (!a->started) {
      if (Begin(*a)) live.push_back(a);
    } else if (absl::Status wanted = CheckStillWanted(*a);
               !wanted.ok() && !a->MustFinishPrompt(wanted)) {
      Finish(*a, wanted);
    } else {
      live.push_back(a);
    }
  }
  if (live.empty()) return;
  Batch batch = FormBatch(live);
  const int64_t start = NowNanos();
  const std::string& variant = batch.model->name();
  std::vector<double> waits;  // how long each job of the batch waited for it
  for (Active* a : batch.decode) waits.push_back((start - a->ready_since_ns) * 1e-9);
  for (auto& [a, chunk] : batch.prefill) waits.push_back((start - a->ready_since_ns) * 1e-9);
  auto first_compute = [&](Active& a) {
    if (a.first_compute_ns != 0) return;
    a.first_compute_ns = start;
    waiting_jobs_.fetch_sub(1);
    a.result.queue_seconds = (start - a.submitted_ns) * 1e-9;
    if (options_.metrics != nullptr) options_.metrics->RecordQueue(variant, a.result.queue_seconds);
  };
  for (Active* a : batch.decode) first_compute(*a);
  for (auto& [a, chunk] : batch.prefill) first_compute(*a);

  if (!batch.decode.empty()) RunDecodeRows(batch.decode);
  for (auto& [a, chunk] : batch.prefill) RunPrefillChunk(*a, chunk);

  const int64_t end = NowNanos();
  for (Active* a : batch.decode) a->ready_since_ns = end;
  for (auto& [a, chunk] : batch.prefill) a->ready_since_ns = end;
  if (options_.metrics != nullptr) {
    options_.metrics->RecordIteration(variant, batch.tokens, (end - start) * 1e-9, waits);
  }
}

absl::Status BatchScheduler::CheckStillWanted(const Active& a) const {
  // The deadline first: gRPC cancels a call whose deadline passed, and that is not the
  // client going away.
  if (absl::Now() > a.job->deadline) {
    return absl::DeadlineExceededError(
        a.started ? "the deadline passed during the request; the rest was not computed"
                  : "the deadline passed while the request waited; nothing was computed");
  }
  if (a.job->is_cancelled && a.job->is_cancelled()) {
    return absl::CancelledError("the client cancelled the call");
  }
  if (const Session* s = a.session(); s != nullptr && s->closed()) {
    return absl::NotFoundError(absl::StrCat("session '", s->id(), "' was closed"));
  }
  return absl::OkStatus();
}

bool BatchScheduler::Begin(Active& a) {
  if (absl::Status wanted = CheckStillWanted(a); !wanted.ok()) {
    Finish(a, wanted);
    return false;
  }
  a.started = true;
  if (a.job->on_start) {
    absl::StatusOr<bool> run = a.job->on_start();
    if (!run.ok() || !*run || !a.job->tokens.defined()) {
      Finish(a, run.status());  // an error, a replay, or a state-only job: nothing to compute
      return false;
    }
  }
  const model::Model& m = *a.job->model;
  const at::Tensor& tokens = a.job->tokens;
  const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
  if (a.job->max_new_tokens > 0) {
    if (absl::Status valid = ValidateSampling(a.job->sampling, m.vocab_size()); !valid.ok()) {
      Finish(a, valid);
      return false;
    }
    std::vector<int64_t> prompt;
    if (a.job->sampling.repetition_penalty != 1) {
      prompt.assign(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel());
    }
    a.sampler.emplace(a.job->sampling, prompt);
  }
  if (lo < 0 || hi >= m.vocab_size()) {
    Finish(a, absl::InvalidArgumentError(
                  absl::StrCat("token id ", lo < 0 ? lo : hi, " is outside the vocabulary [0, ",
                               m.vocab_size(), ") of model '", m.name(), "'")));
    return false;
  }
  Session* s = a.session();
  const int64_t position = s != nullptr ? s->state.position : 0;
  const int64_t length = position + a.prompt_length() + a.job->max_new_tokens;
  if (length > m.max_sequence_length()) {
    Finish(a,
           absl::ResourceExhaustedError(
               s != nullptr
                   ? absl::StrCat("session '", s->id(), "' would hold ", length, " tokens; model '",
                                  m.name(), "' takes at most ", m.max_sequence_length())
                   : absl::StrCat("sequence of ", length, " tokens exceeds model '", m.name(),
                                  "' max_sequence_length ", m.max_sequence_length())));
    return false;
  }
  if (s != nullptr && options_.sessions != nullptr) {
    if (absl::Status reserved = options_.sessions->Reserve(*s, m.StateBytesPerSequence(length));
        !reserved.ok()) {
      Finish(a, reserved);
      return false;
    }
    a.reserved = true;
  }
  StartFromCachedPrefix(a);
  return true;
}

BatchScheduler::Batch BatchScheduler::FormBatch(const std::vector<Active*>& live) const {
  Batch batch;
  const Active* oldest = *std::min_element(
      live.begin(), live.end(),
      [](const Active* x, const Active* y) { return x->ready_since_ns < y->ready_since_ns; });
  batch.model = oldest->job->model;
  std::vector<Active*> mine;
  for (Active* a : live) {
    if (a->job->model == batch.model) mine.push_back(a);
  }
  std::stable_sort(mine.begin(), mine.end(), [](const Active* x, const Active* y) {
    return x->ready_since_ns < y->ready_since_ns;
  });
  // Decode rows first, oldest first; when a prompt waits too, they leave it at least one token
  // of the budget, so the oldest job always takes part.
  const bool prompt_waits =
      std::any_of(mine.begin(), mine.end(), [](const Active* a) { return !a->decode_row(); });
  const int64_t max_rows = std::max<int64_t>(
      1, std::min(options_.max_batch_sessions, options_.max_batch_tokens - (prompt_waits ? 1 : 0)));
  for (Active* a : mine) {
    if (a->decode_row() && static_cast<int64_t>(batch.decode.size()) < max_rows) {
      batch.decode.push_back(a);
    }
  }
  int64_t budget = options_.max_batch_tokens - static_cast<int64_t>(batch.decode.size());
  for (Active* a : mine) {
    if (a->decode_row()) continue;
    const bool empty = batch.decode.empty() && batch.prefill.empty();
    if (budget <= 0 && !empty) break;
    const int64_t remaining = a->remaining();
    int64_t chunk;
    if (!a->chunkable()) {
      if (remaining > budget && !empty) continue;  // a whole sequence: when it fits, or alone
      chunk = remaining;
    } else {
      chunk = std::min(remaining, std::max<int64_t>(budget, 1));
      if (a->cacheable) chunk = EndAtCachePoint(*a, chunk);
    }
    batch.prefill.emplace_back(a, chunk);
    budget -= chunk;
  }
  batch.tokens = static_cast<int64_t>(batch.decode.size());
  for (auto& [a, chunk] : batch.prefill) batch.tokens += chunk;
  return batch;
}

void BatchScheduler::RunDecodeRows(const std::vector<Active*>& rows) {
  const model::Model& m = *rows.front()->job->model;
  std::vector<int64_t> tokens;
  std::vector<model::ModelState*> states;
  for (Active* a : rows) {
    tokens.push_back(a->pending ? a->pending_token
                                : a->job->tokens.data_ptr<int64_t>()[a->consumed]);
    states.push_back(a->state());  // a session's, or a sessionless generation's own
  }
  const int parts = DecodeParts(static_cast<int64_t>(rows.size()), kernel_threads_.load(),
                                m.DecodeWeightBytes(), options_.decode_split_max_bytes_per_row);
  absl::StatusOr<at::Tensor> logits = m.StepBatch(tokens, states, parts);
  if (!logits.ok()) {
    for (Active* a : rows) Finish(*a, logits.status());
    return;
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  // The rows' next tokens, sampled and handed to their clients (a message serialized and
  // written) on the kernels' threads, a few rows a task: a batch's per-token work, which ran on
  // this thread alone after the step while the others waited.
  at::parallel_for(0, n, kRowsPerSendTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Active& a = *rows[i];
      const int64_t left = a.remaining() - (a.pending ? 0 : 1);  // after this step
      if (a.SamplesAt(left)) {
        SampleAndSend(a, logits->narrow(0, i, 1));
      }
    }
  });
  int64_t decoded = 0, prefilled = 0, sampled = 0;
  for (int64_t i = 0; i < n; ++i) {
    Active& a = *rows[i];
    at::Tensor row = logits->narrow(0, i, 1);  // (1, vocab)
    if (a.pending) {
      a.pending = false;
      ++decoded;
      sampled += Advance(a, row);
      continue;
    }
    // The last token of a prompt (or the only one).
    a.consumed += 1;
    MaybeCache(a, *a.state());
    a.result.prompt_applied = a.session() != nullptr;
    ++(a.prompt_length() == 1 ? decoded : prefilled);
    if (a.job->output == model::OutputKind::kAllLogits) {
      a.chunk_outputs.push_back(row.unsqueeze(1));
      a.result.output = at::cat(a.chunk_outputs, 1);
    } else {
      a.result.output = row;
    }
    sampled += Advance(a, row);
  }
  if (options_.metrics != nullptr) {  // once an iteration: each call looks its labels up
    options_.metrics->AddTokens(m.name(), "decode", decoded);
    options_.metrics->AddTokens(m.name(), "prefill", prefilled);
    options_.metrics->AddTokens(m.name(), "generate", sampled);
  }
}

void BatchScheduler::RunPrefillChunk(Active& a, int64_t chunk) {
  const model::Model& m = *a.job->model;
  model::ModelState* state = nullptr;
  if (Session* s = a.session(); s != nullptr) {
    state = &s->state;
  } else if (chunk < a.prompt_length() || a.cacheable || a.job->max_new_tokens > 0) {
    // A request without a session, cut into chunks, kept in the prefix cache or generating
    // (its steps continue the prompt's state).
    if (!a.own_state.has_value()) {
      absl::StatusOr<model::ModelState> fresh = m.NewState(1);
      if (!fresh.ok()) {
        Finish(a, fresh.status());
        return;
      }
      a.own_state = *std::move(fresh);
    }
    state = &*a.own_state;
  }
  if (state != nullptr && !a.caches_reserved) {
    // Room for the rest of the prompt and a first generated token, before the first chunk:
    // growing chunk by chunk would copy the cache at each doubling.
    if (absl::Status reserved = m.ReserveCaches(*state, a.remaining() + 1); !reserved.ok()) {
      Finish(a, reserved);
      return;
    }
    a.caches_reserved = true;
  }
  const at::Tensor tokens = a.job->tokens.narrow(1, a.consumed, chunk);
  absl::StatusOr<at::Tensor> out = m.Forward(tokens, state, a.job->output);
  if (!out.ok()) {
    Finish(a, out.status());
    return;
  }
  a.consumed += chunk;
  if (state != nullptr) MaybeCache(a, *state);
  if (options_.metrics != nullptr) {
    options_.metrics->AddTokens(
        m.name(), a.prompt_length() == 1 && a.session() != nullptr ? "decode" : "prefill", chunk);
  }
  if (a.job->output == model::OutputKind::kLastLogits) {
    a.result.output = *out;
  } else {
    a.chunk_outputs.push_back(*out);
  }
  if (a.remaining() > 0) return;
  a.result.prompt_applied = a.session() != nullptr;
  if (a.job->output != model::OutputKind::kLastLogits) {
    a.result.output =
        a.chunk_outputs.size() == 1 ? a.chunk_outputs.front() : at::cat(a.chunk_outputs, 1);
    a.chunk_outputs.clear();
  }
  at::Tensor logits;
  if (a.job->output == model::OutputKind::kLastLogits) {
    logits = *out;
  } else if (a.job->output == model::OutputKind::kAllLogits) {
    logits = out->select(1, out->size(1) - 1);
  }
  if (Advance(a, logits) && options_.metrics != nullptr) {
    options_.metrics->AddTokens(m.name(), "generate", 1);
  }
}

bool BatchScheduler::Advance(Active& a, const at::Tensor& logits) {
  if (a.remaining() > 0) return false;
  if (!a.SamplesAt(0)) {
    Finish(a, absl::OkStatus());
    return false;
  }
  if (!logits.defined()) {
    Finish(a, absl::InvalidArgumentError("generate needs logits, not hidden states"));
    return false;
  }
  if (!a.next.has_value()) SampleAndSend(a, logits);
  const Active::Next next = *a.next;
  a.next.reset();
  a.result.generated.push_back(next.token);
  a.sampler->Accept(next.token);
  ++a.generated;
  a.stopped = next.stop;
  a.pending = true;
  a.pending_token = next.token;
  return true;
}

void BatchScheduler::SampleAndSend(Active& a, const at::Tensor& logits) {
  const SampledToken sampled = a.sampler->Next(logits);
  if (a.job->on_token) a.job->on_token(sampled, a.generated);
  const std::vector<int64_t>& stops = a.job->sampling.stop_tokens;
  Active::Next next;
  next.token = sampled.token;
  next.stop = std::find(stops.begin(), stops.end(), next.token) != stops.end() ||
              (a.job->stop_requested && a.job->stop_requested());
  a.next = next;
}

void BatchScheduler::Finish(Active& a, const absl::Status& status) {
  if (a.done) return;
  a.done = true;
  if (Session* s = a.session(); s != nullptr) {
    if (a.reserved && options_.sessions != nullptr) {
      // Give back what was reserved beyond the state's size now (shrinking always succeeds).
      options_.sessions->Reserve(*s, a.job->model->StateBytesPerSequence(s->state.position))
          .IgnoreError();
    }
    s->Publish();
  }
  if (a.first_compute_ns != 0) {
    a.result.compute_seconds = (NowNanos() - a.first_compute_ns) * 1e-9;
  } else {
    waiting_jobs_.fetch_sub(1);
  }
  a.own_state.reset();
  a.job->on_done(status, std::move(a.result));
}

}  // namespace attnserve::server::scheduler
