// attnserve_prefix_hit_bench: what a prefix-cache hit costs in process, piece by piece, against
// computing the whole prompt (the cache off, the named baseline), on the built-in default models:
// the shared-prefix case of issue #24 (a 4000-token prefix cached, a prompt adding 96 tokens of
// its own) without gRPC and the scheduler.
//
// For each model: the prefix is prefilled once in chunks of 256, as the scheduler does; then,
// --rounds times, alternating: (off) a fresh state prefills the whole prompt (prefix and
// suffix) in chunks of 256; (copy) Model::CompactClone copies the cached state with room for
// the suffix (what a hit was before prefixes were shared); (hit) Model::CloneSharingPrefix, what
// PrefixCache::Lookup hands a hit now (KV entries shared, recurrent tensors copied), then the
// suffix is prefilled in one chunk on it. The copies and hits are kept alive, as the cache's
// entries keep theirs, so each copy is written into fresh memory (no buffer comes back to the
// reuse pool), as in the server; with --free-copies they are freed at the end of their round
// instead, so that the next round's copy takes a freed buffer from the pool
// (kernels/common/huge_page_buffer.h). Prints median milliseconds: the copy, the shared clone,
// the suffix, the hit's total (shared clone and suffix), the whole prompt, and off / hit.
//
//   attnserve_prefix_hit_bench [--models=mamba,rwkv,hybrid] [--prefix=4000] [--suffix=96]
//                              [--rounds=9] [--threads=2] [--free-copies]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/memory_reuse.h"
#include "server/model/model_repository.h"

namespace {

using namespace attnserve;

using bench::Median;
using bench::MsSince;

// Prefills `tokens` (1, L) into `state` in chunks of 256 (the scheduler's default chunk).
bool PrefillInChunks(const model::Model& m, const at::Tensor& tokens, model::ModelState* state) {
  for (int64_t c = 0; c < tokens.size(1); c += 256) {
    const int64_t n = std::min<int64_t>(256, tokens.size(1) - c);
    if (!m.Forward(tokens.narrow(1, c, n), state, model::OutputKind::kLastLogits).ok()) {
      return false;
    }
  }
  return true;
}

// The usage line.
constexpr char kUsage[] =
    "attnserve_prefix_hit_bench [--models=mamba,rwkv,hybrid] [--prefix=4000] [--suffix=96] "
    "[--rounds=9] [--threads=2] [--free-copies]";

}  // namespace

int main(int argc, char** argv) {
  std::printf("%s\n", kernels::UseTheCpusBlasKernels(argv).c_str());
  kernels::KeepFreedMemoryForReuse();  // as the server does
  std::string models = "mamba,rwkv,hybrid";
  int64_t prefix = 4000, suffix = 96;
  int rounds = 9, threads = 2;
  bool free_copies = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (!bench::KnownFlag(arg, {"--models", "--prefix", "--suffix", "--rounds", "--threads"},
                          {"--free-copies"})) {
      std::fprintf(stderr, "unknown argument %s\n%s\n", arg.c_str(), kUsage);
      return 2;
    }
    if (arg == "--free-copies") free_copies = true;
    if (const char* v = bench::FlagValue(arg, "--models")) models = v;
    if (const char* v = bench::FlagValue(arg, "--prefix")) prefix = std::atoll(v);
    if (const char* v = bench::FlagValue(arg, "--suffix")) suffix = std::atoll(v);
    if (const char* v = bench::FlagValue(arg, "--rounds")) rounds = std::atoi(v);
    if (const char* v = bench::FlagValue(arg, "--threads")) threads = std::atoi(v);
  }
  if (prefix <= 0 || suffix <= 0 || rounds <= 0 || threads <= 0) {
    std::cerr << "--prefix, --suffix, --rounds and --threads must be positive" << std::endl;
    return 2;
  }
  at::set_num_threads(threads);
  auto repo = model::ModelRepository::BuildDefault({});
  if (!repo.ok()) {
    std::cerr << repo.status() << std::endl;
    return 1;
  }
  std::printf("cpu: %s; prefix %lld + %lld tokens, %d threads, median of %d rounds; copies %s\n",
              bench::CpuName().c_str(), static_cast<long long>(prefix),
              static_cast<long long>(suffix), threads, rounds,
              free_copies ? "freed each round (the pool serves the next)" : "kept (fresh memory)");
  std::printf(
      "| model | copy, CompactClone (ms) | hit: shared clone (ms) | hit: suffix (ms) | hit (ms) | "
      "whole prompt, cache off (ms) | off / hit |\n|---|---|---|---|---|---|---|\n");
  for (absl::string_view name : absl::StrSplit(models, ',', absl::SkipEmpty())) {
    const model::Model* m = nullptr;
    for (const model::Model* candidate : (*repo)->models()) {
      if (candidate->name() == name) m = candidate;
    }
    if (m == nullptr || !m->can_stream()) {
      std::cerr << "no streaming default model " << name << std::endl;
      return 2;
    }
    const at::Tensor head = at::randint(1, m->vocab_size(), {1, prefix}, at::kLong);
    model::ModelState cached = *m->NewState();
    if (!PrefillInChunks(*m, head, &cached)) return 1;
    std::vector<model::ModelState> kept;  // alive as the cache keeps entries
    std::vector<double> copy, share, rest, hit, off;
    for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
      const at::Tensor tail = at::randint(1, m->vocab_size(), {1, suffix}, at::kLong);
      auto t0 = std::chrono::steady_clock::now();
      model::ModelState whole = *m->NewState();
      if (!PrefillInChunks(*m, at::cat({head, tail}, 1), &whole)) return 1;
      const double t_off = MsSince(t0);
      t0 = std::chrono::steady_clock::now();
      kept.push_back(m->CompactClone(cached, suffix + 1));
      const double t_copy = MsSince(t0);
      t0 = std::chrono::steady_clock::now();
      absl::StatusOr<model::ModelState> shared = m->CloneSharingPrefix(cached, suffix + 1);
      if (!shared.ok()) return 1;
      model::ModelState& state = kept.emplace_back(*std::move(shared));
      const double t_share = MsSince(t0);
      if (!m->Forward(tail, &state, model::OutputKind::kLastLogits).ok()) return 1;
      const double t_hit = MsSince(t0);
      if (free_copies) kept.clear();
      if (r == 0) continue;
      off.push_back(t_off);
      copy.push_back(t_copy);
      share.push_back(t_share);
      rest.push_back(t_hit - t_share);
      hit.push_back(t_hit);
    }
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1fx |\n", std::string(name).c_str(),
                Median(copy), Median(share), Median(rest), Median(hit), Median(off),
                Median(off) / Median(hit));
  }
  return 0;
}
