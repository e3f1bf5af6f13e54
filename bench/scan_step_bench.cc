// attnserve_scan_step_bench: the selective scan's decode step (mamba_mixer's StepBatch: one
// token for each of R rows, each row's state its own allocation) over L layers, against the
// floor of touching the same state: one pass that reads and writes every state float in place
// (a vector add), on the same threads, in the same run.
//
//   attnserve_scan_step_bench [--threads=2] [--repeats=30] [--dim=1536] [--dstate=16]
//
// Cases: 1 layer x 4 rows (the state stays in L2: the arithmetic alone), 24 layers x 16 and
// x 64 rows (mamba-130m's step at 16 and 64 sessions: 37 and 151 MB of state, from memory).
// Columns: best ms of --repeats, ns a state element, GB/s of state read and written, and the
// in-place pass over the same states (ms, GB/s); scan / floor is how far the scan is from
// being bound by its state's traffic alone.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kernels/mamba/selective_scan_cpu.h"

namespace {

using attnserve::kernels::mamba::SelectiveScanCpu;
using attnserve::kernels::mamba::SelectiveScanParams;

template <typename Fn>
double BestMs(const Fn& fn, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 30;
  int64_t dim = 1536, dstate = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::string(flag).size();
      return arg.compare(0, n, flag) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("--threads=")) {
      threads = std::atoi(v);
    } else if (const char* v = value("--repeats=")) {
      repeats = std::atoi(v);
    } else if (const char* v = value("--dim=")) {
      dim = std::atoll(v);
    } else if (const char* v = value("--dstate=")) {
      dstate = std::atoll(v);
    } else {
      std::fprintf(stderr,
                   "usage: attnserve_scan_step_bench [--threads=2] [--repeats=30] [--dim=1536] "
                   "[--dstate=16]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  std::printf("selective scan decode step, dim %lld, d_state %lld, %d threads\n",
              static_cast<long long>(dim), static_cast<long long>(dstate), threads);
  std::printf("%6s %5s %9s | %9s %8s %7s | %9s %7s | %11s\n", "layers", "rows", "state MB",
              "scan ms", "ns/elem", "GB/s", "floor ms", "GB/s", "scan/floor");
  for (auto [layers, rows] : std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {24, 16}, {24, 64}}) {
    std::vector<at::Tensor> states;
    std::vector<std::vector<float*>> pointers(layers);
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t r = 0; r < rows; ++r) {
        states.push_back(at::randn({dim, dstate}) * 0.1);
        pointers[l].push_back(states.back().data_ptr<float>());
      }
    }
    const at::Tensor u = at::randn({rows, dim}), delta = at::randn({rows, dim}) - 2.0,
                     z = at::randn({rows, dim}), bc = at::randn({rows, 2 * dstate}),
                     a = -at::rand({dim, dstate}) - 0.5, d = at::randn({dim}),
                     bias = at::randn({dim});
    at::Tensor out = at::empty({rows, dim});
    SelectiveScanParams p;
    p.batch = rows;
    p.seqlen = 1;
    p.dim = dim;
    p.dstate = dstate;
    p.u = u.data_ptr<float>();
    p.delta = delta.data_ptr<float>();
    p.delta_bias = bias.data_ptr<float>();
    p.z = z.data_ptr<float>();
    p.B = bc.data_ptr<float>();
    p.C = bc.data_ptr<float>() + dstate;
    p.A = a.data_ptr<float>();
    p.D = d.data_ptr<float>();
    p.out = out.data_ptr<float>();
    p.u_batch_stride = p.delta_batch_stride = p.z_batch_stride = dim;
    p.u_seq_stride = p.delta_seq_stride = p.z_seq_stride = dim;
    p.bc_batch_stride = p.bc_seq_stride = 2 * dstate;
    const double scan = BestMs(
        [&] {
          for (int64_t l = 0; l < layers; ++l) {
            p.row_states = pointers[l].data();
            SelectiveScanCpu(p);
          }
        },
        repeats);
    // The floor: every state float read and written once, rows split across the same threads.
    const double floor = BestMs(
        [&] {
          for (int64_t l = 0; l < layers; ++l) {
            at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
              for (int64_t r = begin; r < end; ++r) {
                float* s = pointers[l][r];
                for (int64_t i = 0; i < dim * dstate; ++i) s[i] += 1e-30f;
              }
            });
          }
        },
        repeats);
    const double elements = static_cast<double>(layers * rows * dim * dstate);
    const double bytes = 2 * 4 * elements;  // read and written
    std::printf("%6lld %5lld %9.1f | %9.3f %8.3f %7.1f | %9.3f %7.1f | %10.2fx\n",
                static_cast<long long>(layers), static_cast<long long>(rows), 4 * elements / 1e6,
                scan, scan * 1e6 / elements, bytes / scan / 1e6, floor, bytes / floor / 1e6,
                scan / floor);
  }
  return 0;
}
