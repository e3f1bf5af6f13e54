// attnserve_sliding_window_bench: the sliding_window mixer against standard attention, at one
// width (the default models': d_model 256, 4 heads) and window (--window, default 1024):
//   prefill of L tokens (whole sequence, tokens/s) for L in --lengths, with two baselines from
//   the same run: the standard mixer (full causal attention, the same tiled kernel) and a
//   naive banded-mask attention in ATen (the full L x L score matrix masked to the band, as the
//   seeds write it; skipped where it would need more than --naive_max_gib);
//   the decode step after 1K and after 32K tokens of context (a constant-size state should
//   make them equal), for both mixers; the state bytes per session at each length.
//
//   attnserve_sliding_window_bench [--lengths=1024,4096,16384,65536] [--window=1024]
//                                  [--threads=2] [--reps=3] [--naive_max_gib=13]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/memory_reuse.h"
#include "kernels/common/mixer.h"

namespace {

using namespace attnserve::kernels;
using attnserve::bench::MedianMs;
using attnserve::bench::StepMsAfterContexts;

// Banded causal attention with the whole score matrix, as a plain PyTorch program would.
at::Tensor NaiveBanded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       int64_t window) {
  const int64_t l = q.size(2);
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor t = at::arange(l, at::kLong).unsqueeze(1), key = at::arange(l, at::kLong);
  s.masked_fill_((key > t).logical_or(key <= t - window), -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(s, -1), v);
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  attnserve::bench::SweepFlags sweep;
  int64_t window = 1024;
  double naive_max_gib = 13;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (sweep.Parse(arg)) continue;
    if (const char* v = attnserve::bench::FlagValue(arg, "--window")) window = std::atoll(v);
    if (const char* v = attnserve::bench::FlagValue(arg, "--naive_max_gib"))
      naive_max_gib = std::atof(v);
    if (arg == "--help") {
      std::printf(
          "attnserve_sliding_window_bench [--lengths=1024,4096,16384,65536] "
          "[--window=1024] [--threads=2] [--reps=3] [--naive_max_gib=13]\n");
      return 0;
    }
  }
  const int threads = sweep.threads, reps = sweep.reps;
  const std::vector<int64_t> lengths = sweep.Lengths();
  sweep.Start();
  MixerConfig swa;
  swa.kind = MixerKind::kSlidingWindow;
  swa.d_model = 256;
  swa.num_heads = 4;
  swa.window = window;
  MixerConfig standard = swa;
  standard.kind = MixerKind::kStandard;
  const WeightMap weights = RandomWeights(standard, 1);
  auto swa_mixer = CreateMixer(swa, weights);
  auto standard_mixer = CreateMixer(standard, weights);
  if (!swa_mixer.ok() || !standard_mixer.ok()) {
    std::fprintf(stderr, "cannot build the mixers\n");
    return 1;
  }
  std::printf("d_model 256, 4 heads, window %lld, %d threads, median of %d\n",
              static_cast<long long>(window), threads, reps);
  std::printf("%8s %16s %16s %16s %12s %14s %14s\n", "L", "swa tok/s", "standard tok/s",
              "naive band tok/s", "swa/naive", "swa state MB", "std state MB");
  for (const int64_t l : lengths) {
    const at::Tensor x = at::randn({1, l, 256});
    const int r = l >= 32768 ? 1 : reps;
    (void)(*swa_mixer)->Prefill(x.narrow(1, 0, std::min<int64_t>(l, 2048)), nullptr);  // warm
    (void)(*standard_mixer)->Prefill(x.narrow(1, 0, std::min<int64_t>(l, 2048)), nullptr);
    const double swa_ms = MedianMs(r, [&] { (void)(*swa_mixer)->Prefill(x, nullptr); });
    const double std_ms = MedianMs(r, [&] { (void)(*standard_mixer)->Prefill(x, nullptr); });
    // The naive band: q, k, v from the same projections (their cost is the same on all three).
    const double naive_gib = 4.0 * 3 * l * l * 4 / (1 << 30);  // scores, mask, softmax (float)
    double naive_ms = 0;
    if (naive_gib <= naive_max_gib) {
      const at::Tensor q = at::randn({1, 4, l, 64}), k = at::randn({1, 4, l, 64}),
                       v = at::randn({1, 4, l, 64});
      naive_ms = MedianMs(r, [&] { (void)NaiveBanded(q, k, v, window); });
    }
    const double swa_state = (*swa_mixer)->StateBytesPerSequence(l) / 1e6;
    const double std_state = (*standard_mixer)->StateBytesPerSequence(l) / 1e6;
    char naive[32] = "n/a";
    char ratio[32] = "n/a";
    if (naive_ms > 0) {
      std::snprintf(naive, sizeof(naive), "%.0f", l * 1000.0 / naive_ms);
      std::snprintf(ratio, sizeof(ratio), "%.2fx", naive_ms / swa_ms);
    }
    std::printf("%8lld %16.0f %16.0f %16s %12s %14.2f %14.2f\n", static_cast<long long>(l),
                l * 1000.0 / swa_ms, l * 1000.0 / std_ms, naive, ratio, swa_state, std_state);
  }
  // Decode steps after 1K and 32K tokens of context.
  std::printf("\n%-18s %14s %14s %8s\n", "decode step", "1K ctx ms", "32K ctx ms", "ratio");
  for (auto [name, mixer] : {std::make_pair("sliding_window", swa_mixer->get()),
                             std::make_pair("standard", standard_mixer->get())}) {
    // Each repetition continues the same state: a longer context each time for standard.
    const std::vector<double> ms = StepMsAfterContexts(*mixer, 256, {1024, 32768});
    std::printf("%-18s %14.3f %14.3f %7.2fx\n", name, ms[0], ms[1], ms[1] / ms[0]);
  }
  return 0;
}
