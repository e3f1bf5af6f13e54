// attnserve_rwkv_bench: the rwkv mixer (a whole RWKV-4 block: LayerNorms, time mixing with the
// fused stable WKV kernel, channel mixing) against, in the same run, the seeds' RWKV time
// mixing as a PyTorch program runs it, one token at a time in ATen:
//   "seeds as written": token shift, k, v, r projections, w = exp(-exp(k)) computed and never
//     applied, out = r * output(v) (linear-attention-to-mamba.txt's RWKVTimeMixing);
//   "seeds + decay": the same loop with the WKV recurrence applied (Hugging Face's
//     rwkv_linear_attention_cpu: running maximum, numerator, denominator per step).
// Both baselines do time mixing only; the mixer's figure includes its channel mixing too.
// Prefill tokens/s for L in --lengths (the per-token baselines up to --naive_max_len), state
// bytes per session, and the decode step after 1K and 32K tokens of context. d_model 256.
//
//   attnserve_rwkv_bench [--lengths=1024,4096,16384,65536] [--threads=2] [--reps=3]
//                        [--naive_max_len=16384]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/common/memory_reuse.h"
#include "kernels/common/mixer.h"

namespace {

using attnserve::kernels::WeightMap;

// The seeds' RWKVTimeMixing.forward over a sequence, one step per token; with `decay`, the
// WKV recurrence the seeds leave out. x (1, L, D).
at::Tensor SeedsTimeMixing(const at::Tensor& x, const WeightMap& w, bool decay) {
  const int64_t d = x.size(2);
  const at::Tensor mk = w.at("attention.time_mix_key").view({d});
  const at::Tensor mv = w.at("attention.time_mix_value").view({d});
  const at::Tensor mr = w.at("attention.time_mix_receptance").view({d});
  const at::Tensor& wk = w.at("attention.key.weight");
  const at::Tensor& wv = w.at("attention.value.weight");
  const at::Tensor& wr = w.at("attention.receptance.weight");
  const at::Tensor& wo = w.at("attention.output.weight");
  const at::Tensor time_decay = -at::exp(w.at("attention.time_decay"));
  const at::Tensor& time_first = w.at("attention.time_first");
  at::Tensor state = at::zeros({1, d});
  at::Tensor num = at::zeros({1, d}), den = at::zeros({1, d}), mx = at::full({1, d}, -1e38);
  at::Tensor last;
  for (int64_t t = 0; t < x.size(1); ++t) {
    const at::Tensor x_t = x.select(1, t);
    const at::Tensor xk = x_t * mk + state * (1 - mk);
    const at::Tensor xv = x_t * mv + state * (1 - mv);
    const at::Tensor xr = x_t * mr + state * (1 - mr);
    const at::Tensor k = at::linear(xk, wk), v = at::linear(xv, wv);
    const at::Tensor r = at::sigmoid(at::linear(xr, wr));
    if (!decay) {
      const at::Tensor unused = at::exp(-at::exp(k));  // the seeds' w, never applied
      last = r * at::linear(v, wo);
    } else {
      at::Tensor q = at::maximum(mx, k + time_first);
      at::Tensor e1 = at::exp(mx - q), e2 = at::exp(k + time_first - q);
      const at::Tensor wkv = (e1 * num + e2 * v) / (e1 * den + e2);
      q = at::maximum(mx + time_decay, k);
      e1 = at::exp(mx + time_decay - q);
      e2 = at::exp(k - q);
      num = e1 * num + e2 * v;
      den = e1 * den + e2;
      mx = q;
      last = at::linear(r * wkv, wo);
    }
    state = x_t;
  }
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using namespace attnserve::kernels;
  using attnserve::bench::MedianMs;
  using attnserve::bench::StepMsAfterContexts;
  attnserve::bench::SweepFlags sweep;
  int64_t naive_max_len = 16384;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (sweep.Parse(arg)) continue;
    if (const char* v = attnserve::bench::FlagValue(arg, "--naive_max_len"))
      naive_max_len = std::atoll(v);
    if (arg == "--help") {
      std::printf(
          "attnserve_rwkv_bench [--lengths=1024,4096,16384,65536] [--threads=2] [--reps=3] "
          "[--naive_max_len=16384]\n");
      return 0;
    }
  }
  const int threads = sweep.threads, reps = sweep.reps;
  const std::vector<int64_t> lengths = sweep.Lengths();
  sweep.Start();
  MixerConfig config;
  config.kind = MixerKind::kRwkv;
  config.d_model = 256;
  const WeightMap weights = RandomWeights(config, 1);
  auto mixer = CreateMixer(config, weights);
  if (!mixer.ok()) return 1;
  std::printf("d_model 256, WKV width 256, channel mixing 1024, %d threads, median of %d\n",
              threads, reps);
  std::printf("%8s %14s %18s %16s %12s %12s\n", "L", "rwkv tok/s", "seeds (as is) tok/s",
              "seeds+decay tok/s", "vs +decay", "state B");
  for (const int64_t l : lengths) {
    const at::Tensor x = at::randn({1, l, 256});
    const int r = l >= 32768 ? 1 : reps;
    (void)(*mixer)->Prefill(x.narrow(1, 0, std::min<int64_t>(l, 2048)), nullptr);
    const double ms = MedianMs(r, [&] { (void)(*mixer)->Prefill(x, nullptr); });
    char as_is[32] = "n/a", with_decay[32] = "n/a", ratio[32] = "n/a";
    if (l <= naive_max_len) {
      const double as_is_ms = MedianMs(1, [&] { (void)SeedsTimeMixing(x, weights, false); });
      const double decay_ms = MedianMs(1, [&] { (void)SeedsTimeMixing(x, weights, true); });
      std::snprintf(as_is, sizeof(as_is), "%.0f", l * 1000.0 / as_is_ms);
      std::snprintf(with_decay, sizeof(with_decay), "%.0f", l * 1000.0 / decay_ms);
      std::snprintf(ratio, sizeof(ratio), "%.1fx", decay_ms / ms);
    }
    std::printf("%8lld %14.0f %18s %16s %12s %12lld\n", static_cast<long long>(l), l * 1000.0 / ms,
                as_is, with_decay, ratio,
                static_cast<long long>((*mixer)->StateBytesPerSequence(l)));
  }
  std::printf("\n%-12s %14s %14s %8s  state bytes\n", "decode step", "1K ctx ms", "32K ctx ms",
              "ratio");
  const std::vector<double> step_ms = StepMsAfterContexts(**mixer, 256, {1024, 32768});
  std::printf("%-12s %14.3f %14.3f %7.2fx  %lld\n", "rwkv", step_ms[0], step_ms[1],
              step_ms[1] / step_ms[0],
              static_cast<long long>((*mixer)->StateBytesPerSequence(32768)));
  return 0;
}
