// attnserve_prefix_cache_miss_bench: what the prefix state cache costs a prompt it never serves
// (issue #24: "every prompt distinct: at most 2% slower than cache off"), in-process: the
// server's BatchScheduler without gRPC, so that this machine's noise is not multiplied by two
// servers' and a Python client's.
//
// Three schedulers in one process over the same built-in default models and the same ATen
// threads: `off` (no cache, the named baseline), `on` (a PrefixCache at the server's defaults:
// 1 GiB, an entry every 256 tokens, the tail checkpoint 64 tokens before the end) and `on_tail0`
// (the same without the tail checkpoint, --prefix_cache_tail=0). For each model and prompt
// length, --rounds rounds; each round sends one new random prompt (distinct: every lookup
// misses) to each scheduler in turn, as a sessionless last-logits job (a unary Infer), the
// order rotating every round; the time is Submit to on_done. Prints the median time of each and
// the median over rounds of each round's on / off ratio with a bootstrap 95% interval.
//
//   attnserve_prefix_cache_miss_bench [--models=mamba,rwkv,hybrid] [--lengths=64,512,4096]
//                                     [--rounds=40] [--threads=2]
//                                     [--cache_bytes=N] (the cache's bound; default 1 GiB)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/memory_reuse.h"
#include "server/model/model_repository.h"
#include "server/prefix_cache/prefix_cache.h"
#include "server/scheduler/batch_scheduler.h"

namespace {

using namespace attnserve;
using server::PrefixCache;
using server::PrefixCacheOptions;
using server::scheduler::BatchScheduler;
using server::scheduler::Job;
using server::scheduler::JobResult;
using server::scheduler::SchedulerOptions;

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (absl::SimpleAtoi(piece, &v)) out.push_back(v);
  }
  return out;
}

// One scheduler (and its cache, when it has one).
struct Arm {
  std::string name;
  std::unique_ptr<PrefixCache> cache;
  std::unique_ptr<BatchScheduler> scheduler;
};

std::unique_ptr<Arm> MakeArm(const std::string& name, int threads,
                             std::optional<PrefixCacheOptions> cache_options) {
  auto arm = std::make_unique<Arm>();
  arm->name = name;
  SchedulerOptions options;
  options.intra_op_threads = threads;
  if (cache_options.has_value()) {
    arm->cache = std::make_unique<PrefixCache>(*cache_options);
    options.prefix_cache = arm->cache.get();
  }
  arm->scheduler = std::make_unique<BatchScheduler>(options);
  return arm;
}

// The process's minor page faults so far (memory touched for the first time).
int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Milliseconds from Submit to on_done of a last-logits job on `tokens` (no session); adds the
// process's minor page faults meanwhile (only this arm computes then) to `faults`.
double RunPrompt(Arm& arm, const model::Model& m, const std::vector<int64_t>& tokens,
                 int64_t* faults = nullptr) {
  const int64_t faults_before = MinorFaults();
  auto job = std::make_unique<Job>();
  job->client = "bench";
  job->model = &m;
  job->tokens = at::tensor(tokens, at::kLong).view({1, -1});
  job->output = model::OutputKind::kLastLogits;
  absl::Notification done;
  absl::Status status;
  job->on_done = [&](const absl::Status& s, JobResult) {
    status = s;
    done.Notify();
  };
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status submitted = arm.scheduler->Submit(std::move(job)); !submitted.ok()) {
    std::fprintf(stderr, "submit: %s\n", submitted.ToString().c_str());
    std::exit(1);
  }
  done.WaitForNotification();
  if (faults != nullptr) *faults += MinorFaults() - faults_before;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", arm.name.c_str(), status.ToString().c_str());
    std::exit(1);
  }
  return ms;
}

using attnserve::bench::Median;

// The 2.5% and 97.5% points of the median of `v` resampled with replacement.
std::pair<double, double> BootstrapMedian(const std::vector<double>& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  constexpr int kResamples = 2000;
  std::vector<double> medians;
  std::vector<double> sample(v.size());
  for (int r = 0; r < kResamples; ++r) {
    for (double& x : sample) x = v[pick(rng)];
    medians.push_back(Median(sample));
  }
  std::sort(medians.begin(), medians.end());
  return {medians[kResamples * 25 / 1000], medians[kResamples * 975 / 1000 - 1]};
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("%s\n", kernels::UseTheCpusBlasKernels(argv).c_str());
  kernels::KeepFreedMemoryForReuse();  // as the server does (server/main.cc)
  std::string models_flag = "mamba,rwkv,hybrid", lengths_flag = "64,512,4096";
  int rounds = 40, threads = 2;
  int64_t cache_bytes = 0;  // 0: the server's default bound
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--models=", 0) == 0) models_flag = arg.substr(9);
    if (arg.rfind("--lengths=", 0) == 0) lengths_flag = arg.substr(10);
    if (arg.rfind("--rounds=", 0) == 0) rounds = std::max(2, std::atoi(arg.c_str() + 9));
    if (arg.rfind("--threads=", 0) == 0) threads = std::atoi(arg.c_str() + 10);
    if (arg.rfind("--cache_bytes=", 0) == 0) cache_bytes = std::atoll(arg.c_str() + 14);
  }
  at::set_num_threads(threads);
  auto repo = model::ModelRepository::BuildDefault(model::ModelOptions{});
  if (!repo.ok()) {
    std::fprintf(stderr, "%s\n", repo.status().ToString().c_str());
    return 1;
  }
  PrefixCacheOptions on;  // the server's defaults (server/flags/prefix_cache_flags.cc)
  if (cache_bytes > 0) on.max_bytes = cache_bytes;
  PrefixCacheOptions on_tail0 = on;
  on_tail0.tail = 0;
  std::vector<std::unique_ptr<Arm>> arms;
  arms.push_back(MakeArm("off", threads, std::nullopt));
  arms.push_back(MakeArm("on", threads, on));
  arms.push_back(MakeArm("on_tail0", threads, on_tail0));

  std::printf(
      "%d rounds per row; each a distinct prompt to each scheduler (rotating order), "
      "a sessionless last-logits job; --threads=%d\n\n",
      rounds, threads);
  std::printf(
      "| model | prompt tokens | off (ms) | on (ms) | on / off, median of rounds [95%%] "
      "| on_tail0 (ms) | on_tail0 / off [95%%] | page faults per prompt off / on / on_tail0 "
      "|\n|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(20261202);
  for (absl::string_view name : absl::StrSplit(models_flag, ',', absl::SkipEmpty())) {
    const model::Model* m = (*repo)->Find(std::string(name));
    if (m == nullptr) {
      std::fprintf(stderr, "no model '%s'\n", std::string(name).c_str());
      return 1;
    }
    std::uniform_int_distribution<int64_t> token(1, m->vocab_size() - 1);
    auto prompt = [&](int64_t n) {
      std::vector<int64_t> t(static_cast<size_t>(n));
      for (int64_t& x : t) x = token(rng);
      return t;
    };
    for (const int64_t n : ParseList(lengths_flag)) {
      for (auto& arm : arms) RunPrompt(*arm, *m, prompt(n));  // warm-up, not measured
      std::vector<std::vector<double>> ms(arms.size());
      std::vector<int64_t> faults(arms.size(), 0);
      for (int r = 0; r < rounds; ++r) {
        for (size_t k = 0; k < arms.size(); ++k) {
          const size_t a = (k + static_cast<size_t>(r)) % arms.size();
          ms[a].push_back(RunPrompt(*arms[a], *m, prompt(n), &faults[a]));
        }
      }
      std::vector<double> on_ratio, tail0_ratio;
      for (int r = 0; r < rounds; ++r) {
        on_ratio.push_back(ms[1][r] / ms[0][r]);
        tail0_ratio.push_back(ms[2][r] / ms[0][r]);
      }
      const auto [on_lo, on_hi] = BootstrapMedian(on_ratio, 1);
      const auto [t0_lo, t0_hi] = BootstrapMedian(tail0_ratio, 2);
      std::printf(
          "| %s | %lld | %.2f | %.2f | %.3f [%.3f, %.3f] | %.2f | %.3f [%.3f, %.3f] | %lld / %lld "
          "/ "
          "%lld |\n",
          std::string(name).c_str(), static_cast<long long>(n), Median(ms[0]), Median(ms[1]),
          Median(on_ratio), on_lo, on_hi, Median(ms[2]), Median(tail0_ratio), t0_lo, t0_hi,
          static_cast<long long>(faults[0] / rounds), static_cast<long long>(faults[1] / rounds),
          static_cast<long long>(faults[2] / rounds));
      std::fflush(stdout);
    }
  }
  for (auto& arm : arms) {
    if (arm->cache != nullptr) {
      std::printf("%s: %lld lookups, %lld hits, %lld entries, %.1f MiB\n", arm->name.c_str(),
                  static_cast<long long>(arm->cache->lookups()),
                  static_cast<long long>(arm->cache->hits()),
                  static_cast<long long>(arm->cache->entries()), arm->cache->bytes() / 1048576.0);
    }
    arm->scheduler->Stop();
  }
  return 0;
}
