// attnserve_ssd_scan_bench: the Mamba-2 SSD scan on the CPU (kernels/mamba2/ssd_scan_cpu.h) at
// mamba2-130m's shape (24 heads of 64, d_state 128, one group, chunk 256), in one run:
//
//   prefill  one sequence of L tokens: the chunked scan (matrix products within a chunk of
//            min(--chunk, kSsdMaxCpuChunk) tokens) against
//            the named baseline, the recurrence (the decode step's kernel, one token at a time);
//            GFLOP/s of the chunked algorithm's multiply-adds (C·Bᵀ, M·x, C·S, Bᵀ·x: what it
//            computes) and of the recurrence's (2·N·P a head and token: the minimum any
//            algorithm needs), to compare with attnserve_cpu_peaks' fp32 FMA peak;
//   step     24 layers x R rows (R sessions, each row's state its own allocation: 0.75 MiB a
//            layer) against the floor of reading and writing every state float once, on the
//            same threads.
//
//   attnserve_ssd_scan_bench [--threads=2] [--repeats=10] [--chunk=256]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/mamba2/ssd_scan_cpu.h"

namespace {

using attnserve::bench::MedianMs;
using attnserve::kernels::mamba2::SsdScanCpu;
using attnserve::kernels::mamba2::SsdScanParams;

constexpr int64_t kHeads = 24, kHeadDim = 64, kState = 128, kGroups = 1;
int64_t kChunk = 256;  // --chunk

// Inputs of `rows` x `len` tokens laid out as the mixer lays them (x, B, C in one row of xBC;
// dt its own tensor).
struct Inputs {
  at::Tensor xbc, dt, bias, a, d, out;
  SsdScanParams Params(int64_t rows, int64_t len) {
    const int64_t d_inner = kHeads * kHeadDim, conv_dim = d_inner + 2 * kGroups * kState;
    xbc = at::randn({rows, len, conv_dim}) * 0.5;
    dt = at::randn({rows, len, kHeads}) - 3.0;
    bias = at::randn({kHeads}) * 0.1;
    a = -at::rand({kHeads}) * 8 - 1;
    d = at::randn({kHeads});
    out = at::empty({rows, len, d_inner});
    SsdScanParams p;
    p.batch = rows;
    p.seqlen = len;
    p.heads = kHeads;
    p.head_dim = kHeadDim;
    p.groups = kGroups;
    p.dstate = kState;
    p.chunk = kChunk;
    p.x = xbc.data_ptr<float>();
    p.x_batch_stride = len * conv_dim;
    p.x_seq_stride = conv_dim;
    p.B = p.x + d_inner;
    p.C = p.B + kGroups * kState;
    p.bc_batch_stride = p.x_batch_stride;
    p.bc_seq_stride = conv_dim;
    p.dt = dt.data_ptr<float>();
    p.dt_batch_stride = len * kHeads;
    p.dt_seq_stride = kHeads;
    p.dt_bias = bias.data_ptr<float>();
    p.A = a.data_ptr<float>();
    p.D = d.data_ptr<float>();
    p.out = out.data_ptr<float>();
    return p;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      threads = std::atoi(arg.c_str() + 10);
    } else if (arg.rfind("--chunk=", 0) == 0) {
      kChunk = std::atoll(arg.c_str() + 8);
    } else if (arg.rfind("--repeats=", 0) == 0) {
      repeats = std::atoi(arg.c_str() + 10);
    } else {
      std::fprintf(stderr,
                   "usage: attnserve_ssd_scan_bench [--threads=2] [--repeats=10] [--chunk=256]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  std::printf(
      "SSD scan, %lld heads x %lld, d_state %lld, %lld group, chunk_size %lld, %d threads\n\n",
      static_cast<long long>(kHeads), static_cast<long long>(kHeadDim),
      static_cast<long long>(kState), static_cast<long long>(kGroups),
      static_cast<long long>(kChunk), threads);
  std::printf("prefill | %6s | %10s %9s %9s | %14s %9s | %8s\n", "tokens", "chunked ms", "GFLOP/s",
              "(min) /s", "recurrence ms", "GFLOP/s", "speed-up");
  for (int64_t len : {512, 4096}) {
    Inputs in;
    SsdScanParams p = in.Params(1, len);
    at::Tensor state = at::zeros({1, kHeads, kHeadDim, kState});
    p.state = state.data_ptr<float>();
    const double chunked = MedianMs(repeats, [&] { SsdScanCpu(p); });
    // The recurrence: the step kernel, token after token.
    SsdScanParams s = p;
    s.seqlen = 1;
    const double recurrence = MedianMs(std::max(1, repeats / 4), [&] {
      for (int64_t t = 0; t < len; ++t) {
        s.x = p.x + t * p.x_seq_stride;
        s.B = p.B + t * p.bc_seq_stride;
        s.C = p.C + t * p.bc_seq_stride;
        s.dt = p.dt + t * p.dt_seq_stride;
        s.out = p.out + t * kHeads * kHeadDim;
        SsdScanCpu(s);
      }
    });
    const double q =
        static_cast<double>(std::min({kChunk, attnserve::kernels::mamba2::kSsdMaxCpuChunk, len}));
    const double chunk_flops =
        2.0 * len *
        (kGroups * q * kState / 2 + kHeads * (q * kHeadDim / 2 + 2.0 * kState * kHeadDim));
    const double min_flops = 2.0 * len * kHeads * 2.0 * kState * kHeadDim;
    std::printf("        | %6lld | %10.2f %9.1f %9.1f | %14.2f %9.1f | %7.2fx\n",
                static_cast<long long>(len), chunked, chunk_flops / chunked / 1e6,
                min_flops / chunked / 1e6, recurrence, min_flops / recurrence / 1e6,
                recurrence / chunked);
  }
  std::printf("\nstep    | %6s %5s %9s | %8s %7s | %8s %7s | %10s\n", "layers", "rows", "state MB",
              "scan ms", "GB/s", "floor ms", "GB/s", "scan/floor");
  for (int64_t rows : {1, 16, 64}) {
    constexpr int64_t kLayers = 24;
    Inputs in;
    SsdScanParams p = in.Params(rows, 1);
    std::vector<at::Tensor> states;
    std::vector<std::vector<float*>> pointers(kLayers);
    for (int64_t l = 0; l < kLayers; ++l) {
      for (int64_t r = 0; r < rows; ++r) {
        states.push_back(at::randn({kHeads, kHeadDim, kState}) * 0.1);
        pointers[l].push_back(states.back().data_ptr<float>());
      }
    }
    const double scan = MedianMs(repeats, [&] {
      for (int64_t l = 0; l < kLayers; ++l) {
        p.row_states = pointers[l].data();
        SsdScanCpu(p);
      }
    });
    const int64_t per_row = kHeads * kHeadDim * kState;
    const double floor = MedianMs(repeats, [&] {
      for (int64_t l = 0; l < kLayers; ++l) {
        at::parallel_for(0, rows * kHeads, 4, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            float* s = pointers[l][i / kHeads] + (i % kHeads) * kHeadDim * kState;
            for (int64_t k = 0; k < kHeadDim * kState; ++k) s[k] += 1e-30f;
          }
        });
      }
    });
    const double bytes = 2.0 * 4 * kLayers * rows * per_row;
    std::printf("        | %6lld %5lld %9.1f | %8.3f %7.1f | %8.3f %7.1f | %9.2fx\n",
                static_cast<long long>(kLayers), static_cast<long long>(rows), bytes / 2 / 1e6,
                scan, bytes / scan / 1e6, floor, bytes / floor / 1e6, scan / floor);
  }
  return 0;
}
