// attnserve_attention_bench: the CPU attention kernels on a chunk of queries over a KV cache,
// the fused kernel (kernels/standard/fused_attention_cpu.h) against the tiled ATen kernel
// (kernels/standard/flash_attention_cpu.h, the named baseline), alternated in one run so that
// the machine's drift slows both alike.
//
//   attnserve_attention_bench [--shapes=96x4096,16x4096,256x4096,4096x4096,4x4096]
//                             [--heads=4] [--head-dim=64] [--repeats=9] [--threads=2]
// A shape is Lq x Lk: causal, the queries the last Lq of Lk positions (a prefill chunk after a
// prefix of Lk - Lq cached tokens; Lq = Lk is a whole prompt). Prints the median milliseconds
// of each kernel, their ratio, and GFLOP/s counting 4·d flops per visible (query, key) pair.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/fused_attention_cpu.h"

namespace {

// The usage line.
constexpr char kUsage[] =
    "attnserve_attention_bench [--shapes=96x4096,16x4096,256x4096,4096x4096,4x4096] [--heads=4] "
    "[--head-dim=64] [--repeats=9] [--threads=2]";

}  // namespace

int main(int argc, char** argv) {
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using namespace attnserve;
  std::string shapes = "96x4096,16x4096,256x4096,4096x4096,4x4096";
  int64_t heads = 4, head_dim = 64;
  int repeats = 9, threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (!bench::KnownFlag(arg, {"--shapes", "--heads", "--head-dim", "--repeats", "--threads"})) {
      std::fprintf(stderr, "unknown argument %s\n%s\n", arg.c_str(), kUsage);
      return 2;
    }
    if (const char* v = bench::FlagValue(arg, "--shapes")) shapes = v;
    if (const char* v = bench::FlagValue(arg, "--heads")) heads = std::atoll(v);
    if (const char* v = bench::FlagValue(arg, "--head-dim")) head_dim = std::atoll(v);
    if (const char* v = bench::FlagValue(arg, "--repeats")) repeats = std::atoi(v);
    if (const char* v = bench::FlagValue(arg, "--threads")) threads = std::atoi(v);
  }
  if (heads <= 0 || head_dim <= 0 || repeats <= 0 || threads <= 0) {
    std::cerr << "--heads, --head-dim, --repeats and --threads must be positive" << std::endl;
    return 2;
  }
  at::set_num_threads(threads);
  std::printf("cpu: %s; B=1, H=%lld, d=%lld, causal, %d threads, median of %d alternations\n",
              bench::CpuName().c_str(), static_cast<long long>(heads),
              static_cast<long long>(head_dim), threads, repeats);
  std::printf("| Lq x Lk | tiled ATen (ms) | fused (ms) | tiled / fused | fused GFLOP/s |\n");
  std::printf("|---|---|---|---|---|\n");
  for (absl::string_view shape : absl::StrSplit(shapes, ',', absl::SkipEmpty())) {
    const std::vector<std::string> parts = absl::StrSplit(shape, 'x');
    int64_t lq = 0, lk = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lq) || !absl::SimpleAtoi(parts[1], &lk) ||
        lq <= 0 || lk < lq) {
      std::cerr << "--shapes: expected LqxLk with 0 < Lq <= Lk, got " << shape << std::endl;
      return 2;
    }
    const at::Tensor q = at::randn({1, heads, lq, head_dim});
    const at::Tensor k = at::randn({1, heads, lk, head_dim});
    const at::Tensor v = at::randn({1, heads, lk, head_dim});
    std::vector<double> tiled, fused;
    for (int r = 0; r < repeats + 1; ++r) {  // the first round warms both up
      auto t0 = std::chrono::steady_clock::now();
      auto a = kernels::FlashAttentionCpu(q, k, v, /*causal=*/true);
      const double ta = bench::MsSince(t0);
      t0 = std::chrono::steady_clock::now();
      auto b = kernels::FusedAttentionCpu(q, k, v, /*causal=*/true);
      const double tb = bench::MsSince(t0);
      if (!a.ok() || !b.ok()) {
        std::cerr << (a.ok() ? b.status() : a.status()) << std::endl;
        return 1;
      }
      if (r > 0) {
        tiled.push_back(ta);
        fused.push_back(tb);
      }
    }
    // Visible pairs: every query sees the Lk - Lq prefix and the chunk's keys up to itself.
    const double pairs = static_cast<double>(lq) * (lk - lq) + lq * (lq + 1) / 2.0;
    const double flops = 4.0 * head_dim * heads * pairs;
    const double mt = bench::Median(tiled), mf = bench::Median(fused);
    std::printf("| %lld x %lld | %.2f | %.2f | %.2fx | %.0f |\n", static_cast<long long>(lq),
                static_cast<long long>(lk), mt, mf, mt / mf, flops / mf / 1e6);
  }
  return 0;
}
