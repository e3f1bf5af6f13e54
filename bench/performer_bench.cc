// attnserve_performer_bench: the performer mixer (FAVOR+ on the linear mixer's chunked
// prefix-state kernel) against, in the same run, a naive causal Performer in ATen (the same
// features, then the L x L matrix φ(Q)φ(K)ᵀ masked to its lower triangle, as a plain PyTorch
// program computes it; skipped where it needs more than --naive_max_gib) and the standard
// mixer (exact causal attention, the tiled kernel): prefill tokens/s for L in --lengths, and
// the decode step after 1K and 32K tokens of context. d_model 256, 4 heads.
//
//   attnserve_performer_bench [--lengths=1024,4096,16384,65536] [--threads=2] [--reps=3]
//                             [--naive_max_gib=13]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/memory_reuse.h"
#include "kernels/common/mixer.h"
#include "kernels/performer/performer_attention.h"

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using namespace attnserve::kernels;
  using attnserve::bench::MedianMs;
  using attnserve::bench::StepMsAfterContexts;
  attnserve::bench::SweepFlags sweep;
  double naive_max_gib = 13;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (sweep.Parse(arg)) continue;
    if (const char* v = attnserve::bench::FlagValue(arg, "--naive_max_gib"))
      naive_max_gib = std::atof(v);
    if (arg == "--help") {
      std::printf(
          "attnserve_performer_bench [--lengths=1024,4096,16384,65536] [--threads=2] "
          "[--reps=3] [--naive_max_gib=13]\n");
      return 0;
    }
  }
  const int threads = sweep.threads, reps = sweep.reps;
  const std::vector<int64_t> lengths = sweep.Lengths();
  sweep.Start();
  MixerConfig performer;
  performer.kind = MixerKind::kPerformer;
  performer.d_model = 256;
  performer.num_heads = 4;
  performer.performer_seed = 1;
  MixerConfig standard = performer;
  standard.kind = MixerKind::kStandard;
  const WeightMap weights = RandomWeights(standard, 1);
  auto performer_mixer = CreateMixer(performer, weights);
  auto standard_mixer = CreateMixer(standard, weights);
  if (!performer_mixer.ok() || !standard_mixer.ok()) return 1;
  const at::Tensor omega = PerformerFeatureMatrix(performer);
  std::printf("d_model 256, 4 heads, 64 random features, %d threads, median of %d\n", threads,
              reps);
  std::printf("%8s %18s %18s %16s %12s\n", "L", "performer tok/s", "naive perf. tok/s",
              "standard tok/s", "vs naive");
  for (const int64_t l : lengths) {
    const at::Tensor x = at::randn({1, l, 256});
    const int r = l >= 32768 ? 1 : reps;
    (void)(*performer_mixer)->Prefill(x.narrow(1, 0, std::min<int64_t>(l, 2048)), nullptr);
    (void)(*standard_mixer)->Prefill(x.narrow(1, 0, std::min<int64_t>(l, 2048)), nullptr);
    const double perf_ms = MedianMs(r, [&] { (void)(*performer_mixer)->Prefill(x, nullptr); });
    const double std_ms = MedianMs(r, [&] { (void)(*standard_mixer)->Prefill(x, nullptr); });
    double naive_ms = 0;
    if (4.0 * 2 * l * l * 4 / (1 << 30) <= naive_max_gib) {
      const at::Tensor q = at::randn({1, 4, l, 64}), k = at::randn({1, 4, l, 64}),
                       v = at::randn({1, 4, l, 64});
      naive_ms = MedianMs(r, [&] {
        const at::Tensor fq = FavorPlusFeatures(q, omega), fk = FavorPlusFeatures(k, omega);
        const at::Tensor a = at::matmul(fq, fk.transpose(-1, -2)).tril_();
        (void)(at::matmul(a, v) / (a.sum(-1, true) + 1e-6));
      });
    }
    char naive[32] = "n/a", ratio[32] = "n/a";
    if (naive_ms > 0) {
      std::snprintf(naive, sizeof(naive), "%.0f", l * 1000.0 / naive_ms);
      std::snprintf(ratio, sizeof(ratio), "%.2fx", naive_ms / perf_ms);
    }
    std::printf("%8lld %18.0f %18s %16.0f %12s\n", static_cast<long long>(l), l * 1000.0 / perf_ms,
                naive, l * 1000.0 / std_ms, ratio);
  }
  std::printf("\n%-12s %14s %14s %8s  state bytes\n", "decode step", "1K ctx ms", "32K ctx ms",
              "ratio");
  const std::vector<double> ms = StepMsAfterContexts(**performer_mixer, 256, {1024, 32768});
  std::printf("%-12s %14.3f %14.3f %7.2fx  %lld\n", "performer", ms[0], ms[1], ms[1] / ms[0],
              static_cast<long long>((*performer_mixer)->StateBytesPerSequence(32768)));
  return 0;
}
