// The scheduler (server/scheduler/batch_scheduler.h) on the default models, without gRPC:
// random interleavings of sessions of every streaming variant equal each session run alone,
// per-session order, other sessions served during a long generation, cancellation, deadlines
// and abort.
#include "server/scheduler/batch_scheduler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "server/inference.h"
#include "server/model/model_repository.h"
#include "server/scheduler/token_sampler.h"
#include "tests/unit/test_util.h"

namespace attnserve::server::scheduler {
namespace {

const model::ModelRepository& Repository() {
  static const model::ModelRepository* repository =
      model::ModelRepository::BuildDefault()->release();
  return *repository;
}

at::Tensor RandomTokens(int64_t len, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(0, 4096, {1, len}, gen, at::kLong);
}

// One request of a session's script.
struct Request {
  at::Tensor tokens;
  model::OutputKind output;
  int max_new_tokens;
  v1::GenerateSpec generate;
};

// What a job reported.
struct Outcome {
  absl::Status status;
  at::Tensor output;
  std::vector<int64_t> generated;
  std::vector<int64_t> streamed;  // on_token, in order
  int64_t done_order = -1;
};

// Runs `script` on a fresh state alone, as the scheduler's contract says it must: the whole
// prompt in one Forward, then each sampled token fed back.
std::vector<Outcome> RunAlone(const model::Model& m, const std::vector<Request>& script) {
  model::ModelState state = *m.NewState();
  std::vector<Outcome> out;
  for (const Request& r : script) {
    Outcome o;
    o.output = *m.Forward(r.tokens, &state, r.output);
    at::Tensor logits = r.output == model::OutputKind::kAllLogits
                            ? o.output.select(1, o.output.size(1) - 1)
                            : o.output;
    Sampling sampling;
    sampling.temperature = r.generate.temperature();
    sampling.top_k = r.generate.top_k();
    sampling.seed = r.generate.seed();
    TokenSampler sampler(sampling, {});
    for (int i = 0; i < r.max_new_tokens; ++i) {
      const int64_t token = sampler.Next(logits).token;
      sampler.Accept(token);
      o.generated.push_back(token);
      logits =
          *m.Forward(at::full({1, 1}, token, at::kLong), &state, model::OutputKind::kLastLogits);
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::unique_ptr<Job> MakeJob(const model::Model* m, std::optional<SessionUse> session,
                             const Request& r, Outcome* outcome, std::atomic<int64_t>* order,
                             std::atomic<int>* remaining) {
  auto job = std::make_unique<Job>();
  job->model = m;
  if (session.has_value()) job->session.emplace(*std::move(session));
  job->tokens = r.tokens;
  job->output = r.output;
  job->max_new_tokens = r.max_new_tokens;
  job->sampling.temperature = r.generate.temperature();
  job->sampling.top_k = r.generate.top_k();
  job->sampling.seed = r.generate.seed();
  job->on_token = [outcome](const scheduler::SampledToken& sampled, int) {
    outcome->streamed.push_back(sampled.token);
  };
  job->on_done = [outcome, order, remaining](const absl::Status& status, JobResult result) {
    outcome->status = status;
    outcome->output = result.output;
    outcome->generated = result.generated;
    outcome->done_order = order->fetch_add(1);
    remaining->fetch_sub(1);
  };
  return job;
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(120)) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// Data-parallel decode: one part a thread only while the weights over a part's rows are within
// the bound; one thread, fewer rows than threads, or a bound of 0 never split.
TEST(DecodePartsTest, SplitsWhileAPartsRowsAmortiseItsReadOfTheWeights) {
  constexpr int64_t kMB = 1000 * 1000, kMiB = int64_t{1} << 20;
  EXPECT_EQ(DecodeParts(16, 2, 15 * kMB, 4 * kMiB), 2);   // a default model, 16 sessions
  EXPECT_EQ(DecodeParts(8, 2, 15 * kMB, 4 * kMiB), 2);    // 3.75 MB a row of a part
  EXPECT_EQ(DecodeParts(7, 2, 15 * kMB, 4 * kMiB), 1);    // 5 MB
  EXPECT_EQ(DecodeParts(64, 2, 129 * kMB, 4 * kMiB), 2);  // mamba-130m int8
  EXPECT_EQ(DecodeParts(16, 2, 129 * kMB, 4 * kMiB), 1);
  EXPECT_EQ(DecodeParts(64, 2, 258 * kMB, 4 * kMiB), 1);  // bf16
  EXPECT_EQ(DecodeParts(64, 2, 516 * kMB, 4 * kMiB), 1);  // float32
  EXPECT_EQ(DecodeParts(64, 1, 15 * kMB, 4 * kMiB), 1);
  EXPECT_EQ(DecodeParts(1, 2, 1, 4 * kMiB), 1);
  EXPECT_EQ(DecodeParts(64, 4, 15 * kMB, 4 * kMiB), 4);
  EXPECT_EQ(DecodeParts(64, 2, 15 * kMB, 0), 1);  // --decode_split_max_bytes_per_row=0
  // The default bound: the built-in models from 8 sessions, mamba-130m int8 at 64, bf16 never.
  constexpr int64_t kDefault = kDefaultDecodeSplitMaxBytesPerRow;
  EXPECT_EQ(DecodeParts(8, 2, 15 * kMB, kDefault), 2);
  EXPECT_EQ(DecodeParts(64, 2, 129 * kMB, kDefault), 2);
  EXPECT_EQ(DecodeParts(48, 2, 129 * kMB, kDefault), 1);
  EXPECT_EQ(DecodeParts(64, 2, 258 * kMB, kDefault), 1);
}

TEST(BatchSchedulerTest, RandomInterleavingsEqualEverySessionRunAlone) {
  const std::vector<std::string> variants = {"standard", "linear", "mamba", "hybrid"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    const int sessions_n = trial == 0 ? 1 : (trial == 3 ? 32 : 1 + static_cast<int>(rng() % 12));
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(sessions_n) +
                 " sessions");
    SessionTable table({});
    SchedulerOptions options;
    options.sessions = &table;
    options.intra_op_threads = 1;
    options.max_batch_tokens = 4 + static_cast<int64_t>(rng() % 40);  // prompts cut into chunks
    options.max_batch_sessions = 1 + static_cast<int64_t>(rng() % 16);
    if (trial == 3) {  // two threads and batches of 16: decode steps in two parts (DecodeParts)
      options.intra_op_threads = 2;
      options.max_batch_sessions = 16;
      options.max_batch_tokens = 40;
    }
    BatchScheduler scheduler(options);

    std::vector<const model::Model*> models;
    std::vector<SessionUse> uses;
    std::vector<std::vector<Request>> scripts(sessions_n);
    for (int s = 0; s < sessions_n; ++s) {
      const model::Model* m = Repository().Find(variants[rng() % variants.size()]);
      models.push_back(m);
      uses.push_back(*table.Create(m, absl::ZeroDuration()));
      const int requests = 1 + static_cast<int>(rng() % 4);
      for (int q = 0; q < requests; ++q) {
        Request r;
        const int64_t len = rng() % 3 == 0 ? 1 : 1 + static_cast<int64_t>(rng() % 60);
        r.tokens = RandomTokens(len, 1000 * trial + 10 * s + q);
        r.output = rng() % 2 ? model::OutputKind::kAllLogits : model::OutputKind::kLastLogits;
        r.max_new_tokens = rng() % 2 ? static_cast<int>(rng() % 6) : 0;
        r.generate.set_max_new_tokens(r.max_new_tokens);
        if (rng() % 2) {  // sampled (seeded) rather than greedy
          r.generate.set_temperature(0.8f);
          r.generate.set_top_k(20);
          r.generate.set_seed(rng());
        }
        scripts[s].push_back(std::move(r));
      }
    }
    // Every session's requests submitted at once, interleaved at random: the scheduler runs
    // each session's in order and batches the sessions together.
    std::vector<std::vector<Outcome>> outcomes(sessions_n);
    std::vector<std::pair<int, int>> order;
    for (int s = 0; s < sessions_n; ++s) {
      outcomes[s].resize(scripts[s].size());
      for (size_t q = 0; q < scripts[s].size(); ++q) order.emplace_back(s, static_cast<int>(q));
    }
    // Keep each session's own order while shuffling across sessions.
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<size_t> next(sessions_n, 0);
    std::atomic<int64_t> done_order{0};
    std::atomic<int> remaining{static_cast<int>(order.size())};
    for (auto [s, unused] : order) {
      const size_t q = next[s]++;
      ASSERT_TRUE(scheduler
                      .Submit(MakeJob(models[s], SessionUse(uses[s].get()), scripts[s][q],
                                      &outcomes[s][q], &done_order, &remaining))
                      .ok());
    }
    ASSERT_TRUE(WaitUntil([&] { return remaining.load() == 0; }));
    for (int s = 0; s < sessions_n; ++s) {
      const std::vector<Outcome> expected = RunAlone(*models[s], scripts[s]);
      for (size_t q = 0; q < scripts[s].size(); ++q) {
        SCOPED_TRACE("session " + std::to_string(s) + " (" + models[s]->name() + ") request " +
                     std::to_string(q));
        const Outcome& got = outcomes[s][q];
        ASSERT_TRUE(got.status.ok()) << got.status;
        EXPECT_LE(testing::MaxRelativeError(got.output, expected[q].output), 1e-5);
        EXPECT_EQ(got.generated, expected[q].generated);
        EXPECT_EQ(got.streamed, expected[q].generated);
        if (q > 0) {
          EXPECT_GT(got.done_order, outcomes[s][q - 1].done_order);
        }
      }
      EXPECT_EQ(uses[s]->state.position, [&] {
        int64_t n = 0;
        for (const Request& r : scripts[s]) n += r.tokens.size(1) + r.max_new_tokens;
        return n;
      }());
    }
  }
}

TEST(BatchSchedulerTest, RequestsWithoutSessionCutIntoChunksEqualOneWholePass) {
  SchedulerOptions options;
  options.intra_op_threads = 1;
  options.max_batch_tokens = 16;
  BatchScheduler scheduler(options);
  for (const std::string name : {"standard", "linformer", "mamba", "hybrid"}) {
    SCOPED_TRACE(name);
    const model::Model* m = Repository().Find(name);
    Request r{RandomTokens(70, 3), model::OutputKind::kAllLogits, 0, {}};
    Outcome got;
    std::atomic<int64_t> order{0};
    std::atomic<int> remaining{1};
    ASSERT_TRUE(scheduler.Submit(MakeJob(m, std::nullopt, r, &got, &order, &remaining)).ok());
    ASSERT_TRUE(WaitUntil([&] { return remaining.load() == 0; }));
    ASSERT_TRUE(got.status.ok()) << got.status;
    const at::Tensor whole = *m->Forward(r.tokens, nullptr, model::OutputKind::kAllLogits);
    EXPECT_LE(testing::MaxRelativeError(got.output, whole), 1e-5);
  }
}

// A session table and a scheduler on it (one kernel thread), for the tests below.
class BatchSchedulerSessionTest : public ::testing::Test {
 protected:
  static SchedulerOptions Options(SessionTable* table) {
    SchedulerOptions options;
    options.sessions = table;
    options.intra_op_threads = 1;
    return options;
  }
  SessionTable table{SessionLimits{}};
  BatchScheduler scheduler{Options(&table)};
};

TEST_F(BatchSchedulerSessionTest, OtherSessionsAreServedDuringALongGeneration) {
  const model::Model* mamba = Repository().Find("mamba");
  const model::Model* standard = Repository().Find("standard");
  SessionUse a = *table.Create(mamba, absl::ZeroDuration());
  SessionUse b = *table.Create(standard, absl::ZeroDuration());
  std::atomic<int64_t> order{0};
  std::atomic<int> remaining{4};
  Request long_generation{RandomTokens(4, 1), model::OutputKind::kLastLogits, 400, {}};
  long_generation.generate.set_max_new_tokens(400);
  Request short_request{RandomTokens(3, 2), model::OutputKind::kLastLogits, 0, {}};
  Outcome a_long, a_next, b_short, no_session;
  ASSERT_TRUE(
      scheduler
          .Submit(MakeJob(mamba, SessionUse(a.get()), long_generation, &a_long, &order, &remaining))
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return a_long.streamed.size() >= 2; }));  // generating
  // Queued behind A's generation: waits for it, holding no thread.
  ASSERT_TRUE(
      scheduler
          .Submit(MakeJob(mamba, SessionUse(a.get()), short_request, &a_next, &order, &remaining))
          .ok());
  ASSERT_TRUE(scheduler
                  .Submit(MakeJob(standard, SessionUse(b.get()), short_request, &b_short, &order,
                                  &remaining))
                  .ok());
  ASSERT_TRUE(
      scheduler
          .Submit(MakeJob(standard, std::nullopt, short_request, &no_session, &order, &remaining))
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return remaining.load() == 0; }));
  ASSERT_TRUE(a_long.status.ok() && a_next.status.ok() && b_short.status.ok() &&
              no_session.status.ok());
  EXPECT_LT(b_short.done_order, a_long.done_order) << "B waited for A's generation";
  EXPECT_LT(no_session.done_order, a_long.done_order);
  EXPECT_GT(a_next.done_order, a_long.done_order) << "A's requests ran out of order";
  EXPECT_EQ(a->state.position, 4 + 400 + 3);
}

TEST_F(BatchSchedulerSessionTest, CancelledGenerationStopsWithinOneStepAndLateJobsAreNotComputed) {
  const model::Model* mamba = Repository().Find("mamba");
  SessionUse a = *table.Create(mamba, absl::ZeroDuration());
  std::atomic<int64_t> order{0};
  std::atomic<int> remaining{1};
  Request r{RandomTokens(4, 1), model::OutputKind::kLastLogits, 1000, {}};
  r.generate.set_max_new_tokens(1000);
  Outcome got;
  std::atomic<bool> cancelled{false};
  std::atomic<int> tokens_when_cancelled{-1};
  auto job = MakeJob(mamba, SessionUse(a.get()), r, &got, &order, &remaining);
  job->is_cancelled = [&] { return cancelled.load(); };
  auto on_token = job->on_token;
  job->on_token = [&, on_token](const scheduler::SampledToken& sampled, int index) {
    on_token(sampled, index);
    if (index == 9) {
      tokens_when_cancelled = index + 1;
      cancelled = true;  // the client goes away after its 10th token
    }
  };
  ASSERT_TRUE(scheduler.Submit(std::move(job)).ok());
  ASSERT_TRUE(WaitUntil([&] { return remaining.load() == 0; }));
  EXPECT_EQ(got.status.code(), absl::StatusCode::kCancelled) << got.status;
  EXPECT_LE(static_cast<int>(got.streamed.size()), tokens_when_cancelled.load() + 1);

  // A deadline that passed before the job ran: nothing is computed.
  const int64_t position = a->state.position;
  remaining = 1;
  Outcome late;
  auto late_job = MakeJob(mamba, SessionUse(a.get()), r, &late, &order, &remaining);
  late_job->deadline = absl::Now() - absl::Milliseconds(1);
  ASSERT_TRUE(scheduler.Submit(std::move(late_job)).ok());
  ASSERT_TRUE(WaitUntil([&] { return remaining.load() == 0; }));
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(late.streamed.empty());
  EXPECT_EQ(a->state.position, position);
  EXPECT_EQ(table.state_bytes(), mamba->StateBytesPerSequence(position))
      << "a refused job's reservation was given back";
}

TEST_F(BatchSchedulerSessionTest, AbortEndsEveryJobAndStopRefusesNewOnes) {
  const model::Model* mamba = Repository().Find("mamba");
  SessionUse a = *table.Create(mamba, absl::ZeroDuration());
  std::atomic<int64_t> order{0};
  std::atomic<int> remaining{3};
  Request r{RandomTokens(4, 1), model::OutputKind::kLastLogits, 1000, {}};
  r.generate.set_max_new_tokens(1000);
  std::vector<Outcome> got(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        scheduler.Submit(MakeJob(mamba, SessionUse(a.get()), r, &got[i], &order, &remaining)).ok());
  }
  ASSERT_TRUE(WaitUntil([&] { return got[0].streamed.size() >= 1; }));
  scheduler.Abort(absl::UnavailableError("draining"));
  ASSERT_TRUE(WaitUntil([&] { return remaining.load() == 0; }, absl::Seconds(10)));
  for (const Outcome& o : got) EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(got[0].streamed.size(), 1000u);
  scheduler.Stop();
  Outcome refused;
  EXPECT_EQ(scheduler.Submit(MakeJob(mamba, std::nullopt, r, &refused, &order, &remaining)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(scheduler.queued_jobs(), 0);
}

}  // namespace
}  // namespace attnserve::server::scheduler
