// attnserve_sparse_bench: the sparse mixer (Sparse Transformer attention, strided and fixed
// patterns) against standard attention, at the default models' width (d_model 256, 4 heads)
// and stride (--stride, default 128; fixed with --summary columns, default 8):
//   prefill of L tokens (whole sequence, tokens/s) for L in --lengths, with two baselines from
//   the same run: the standard mixer (full causal attention, the tiled kernel of
//   flash_attention_cpu.h), the sliding_window mixer of the default model (W = 1024, 4 sinks:
//   the policy's middle range) and a naive masked implementation (MaskedSparseAttention: the full
//   L x L score matrix with the pattern's mask; skipped where it would need more than
//   --naive_max_gib);
//   the decode step after 1K and after 32K tokens of context, both patterns and standard (a
//   step reads l + L/l keys: the target is at most 6x from 1K to 32K, where standard reads 32x
//   as many).
//
//   attnserve_sparse_bench [--lengths=1024,4096,16384,65536] [--stride=128] [--summary=8]
//                          [--threads=2] [--reps=3] [--naive_max_gib=13]
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/mixer.h"
#include "kernels/sparse/sparse_reference.h"

namespace {

using namespace attnserve::kernels;
using attnserve::bench::MedianMs;
using attnserve::bench::StepMsAfterContexts;

std::unique_ptr<Mixer> Build(const MixerConfig& config, const WeightMap& weights) {
  auto mixer = CreateMixer(config, weights);
  if (!mixer.ok()) attnserve::bench::Die("CreateMixer", mixer.status());
  return *std::move(mixer);
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  attnserve::bench::SweepFlags sweep;
  int64_t stride = 128, summary = 8;
  double naive_max_gib = 13;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (sweep.Parse(arg)) continue;
    if (const char* v = attnserve::bench::FlagValue(arg, "--stride")) stride = std::atoll(v);
    if (const char* v = attnserve::bench::FlagValue(arg, "--summary")) summary = std::atoll(v);
    if (const char* v = attnserve::bench::FlagValue(arg, "--naive_max_gib"))
      naive_max_gib = std::atof(v);
    if (arg == "--help") {
      std::printf(
          "attnserve_sparse_bench [--lengths=1024,4096,16384,65536] [--stride=128] "
          "[--summary=8] [--threads=2] [--reps=3] [--naive_max_gib=13]\n");
      return 0;
    }
  }
  const int threads = sweep.threads, reps = sweep.reps;
  const std::vector<int64_t> lengths = sweep.Lengths();
  sweep.Start();
  MixerConfig standard;
  standard.kind = MixerKind::kStandard;
  standard.d_model = 256;
  standard.num_heads = 4;
  MixerConfig strided = standard;
  strided.kind = MixerKind::kSparse;
  strided.sparse_pattern = "strided";
  strided.sparse_stride = stride;
  MixerConfig fixed = strided;
  fixed.sparse_pattern = "fixed";
  fixed.sparse_summary = summary;
  MixerConfig window = standard;
  window.kind = MixerKind::kSlidingWindow;
  window.window = 1024;
  window.sinks = 4;
  const WeightMap weights = RandomWeights(standard, 1);
  const std::unique_ptr<Mixer> strided_mixer = Build(strided, weights);
  const std::unique_ptr<Mixer> fixed_mixer = Build(fixed, weights);
  const std::unique_ptr<Mixer> standard_mixer = Build(standard, weights);
  const std::unique_ptr<Mixer> window_mixer = Build(window, weights);
  std::printf("d_model 256, 4 heads, stride %lld, fixed's c %lld, %d threads, median of %d\n",
              static_cast<long long>(stride), static_cast<long long>(summary), threads, reps);
  std::printf("%8s %14s %14s %16s %14s %16s %12s %14s\n", "L", "strided tok/s", "fixed tok/s",
              "standard tok/s", "swa1024 tok/s", "naive mask tok/s", "strided/std",
              "strided/naive");
  for (const int64_t l : lengths) {
    const at::Tensor x = at::randn({1, l, 256});
    const int r = l >= 32768 ? 1 : reps;
    const at::Tensor warm = x.narrow(1, 0, std::min<int64_t>(l, 2048));
    for (const Mixer* m :
         {strided_mixer.get(), fixed_mixer.get(), standard_mixer.get(), window_mixer.get()}) {
      (void)m->Prefill(warm, nullptr);
    }
    const double strided_ms = MedianMs(r, [&] { (void)strided_mixer->Prefill(x, nullptr); });
    const double fixed_ms = MedianMs(r, [&] { (void)fixed_mixer->Prefill(x, nullptr); });
    const double std_ms = MedianMs(r, [&] { (void)standard_mixer->Prefill(x, nullptr); });
    const double window_ms = MedianMs(r, [&] { (void)window_mixer->Prefill(x, nullptr); });
    // The naive masked attention on q, k, v of the same shapes (the projections cost the same
    // in all three): float scores, mask, softmax, and the mask's int64 index arithmetic.
    const double naive_gib = (4.0 * 3 * 4 + 3 * 8) * l * l / (1 << 30);
    double naive_ms = 0;
    if (naive_gib <= naive_max_gib) {
      const at::Tensor q = at::randn({1, 4, l, 64}), k = at::randn({1, 4, l, 64}),
                       v = at::randn({1, 4, l, 64});
      naive_ms = MedianMs(r, [&] {
        (void)MaskedSparseAttention(q, k, v, "strided", stride, summary, /*causal=*/true);
      });
    }
    char naive[32] = "n/a", ratio[32] = "n/a";
    if (naive_ms > 0) {
      std::snprintf(naive, sizeof(naive), "%.0f", l * 1000.0 / naive_ms);
      std::snprintf(ratio, sizeof(ratio), "%.2fx", naive_ms / strided_ms);
    }
    std::printf("%8lld %14.0f %14.0f %16.0f %14.0f %16s %11.2fx %14s\n", static_cast<long long>(l),
                l * 1000.0 / strided_ms, l * 1000.0 / fixed_ms, l * 1000.0 / std_ms,
                l * 1000.0 / window_ms, naive, std_ms / strided_ms, ratio);
  }
  // Decode steps after 1K and 32K tokens of context.
  std::printf("\n%-18s %14s %14s %8s\n", "decode step", "1K ctx ms", "32K ctx ms", "ratio");
  for (auto [name, mixer] : {std::make_pair("sparse strided", strided_mixer.get()),
                             std::make_pair("sparse fixed", fixed_mixer.get()),
                             std::make_pair("standard", standard_mixer.get())}) {
    const std::vector<double> ms = StepMsAfterContexts(*mixer, 256, {1024, 32768});
    std::printf("%-18s %14.3f %14.3f %7.2fx\n", name, ms[0], ms[1], ms[1] / ms[0]);
  }
  return 0;
}
