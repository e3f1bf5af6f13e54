// The Mamba-2 SSD scan's CUDA kernels (kernels/mamba2/ssd_scan_cuda.h, through
// mamba2_cuda_torch.h) against a float64 recurrence on the CPU, written here from the formulas
// of ssd_scan_cpu.h (the CPU kernel needs Abseil, which this check does not link): the chunked
// prefill from a random state over sequences crossing many chunks, and the decode step of many
// sessions; output and final state, float32 budget.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/mamba2/mamba2_cuda_torch.h"
#include "tests/gpu/gpu_check_harness.h"

namespace attnserve::gpu_check {
namespace {

struct SsdInputs {
  Tensor xbc, dt, dt_bias, a, d, state;  // on the GPU, float32
};

SsdInputs MakeSsdInputs(int64_t batch, int64_t len, int64_t heads, int64_t head_dim, int64_t groups,
                        int64_t dstate) {
  SsdInputs in;
  in.xbc = at::randn({batch, len, heads * head_dim + 2 * groups * dstate}, Cuda()) * 0.5;
  in.dt = at::randn({batch, len, heads}, Cuda()) - 3.0;
  const Tensor dt =
      at::exp(at::rand({heads}, Cuda()) * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3));
  in.dt_bias = dt + at::log(-at::expm1(-dt));
  in.a = -(at::rand({heads}, Cuda()) * 15 + 1);
  in.d = at::rand({heads}, Cuda()) + 0.5;
  in.state = at::randn({batch, heads, head_dim, dstate}, Cuda()) * 0.1;
  return in;
}

// y + D·x (B, L, H·P) in float64 from the recurrence; `state` (B, H, P, N) float64 continued.
Tensor SsdReference(const SsdInputs& in, int64_t heads, int64_t groups, int64_t dstate,
                    Tensor& state) {
  auto cpu64 = [](const Tensor& t) { return t.to(at::kCPU, at::kDouble).contiguous(); };
  const Tensor xbc = cpu64(in.xbc), dt_raw = cpu64(in.dt), bias = cpu64(in.dt_bias),
               a = cpu64(in.a), d = cpu64(in.d);
  const int64_t batch = xbc.size(0), len = xbc.size(1), width = xbc.size(2);
  const int64_t d_inner = width - 2 * groups * dstate, p = d_inner / heads;
  Tensor out = at::zeros({batch, len, d_inner}, at::kDouble);
  const double *px = xbc.data_ptr<double>(), *pdt = dt_raw.data_ptr<double>();
  double *po = out.data_ptr<double>(), *ps = state.data_ptr<double>();
  const std::vector<double> vb(bias.data_ptr<double>(), bias.data_ptr<double>() + heads),
      va(a.data_ptr<double>(), a.data_ptr<double>() + heads),
      vd(d.data_ptr<double>(), d.data_ptr<double>() + heads);
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / heads, h = i % heads, g = h / (heads / groups);
      double* s = ps + (b * heads + h) * p * dstate;
      for (int64_t t = 0; t < len; ++t) {
        const double* row = px + (b * len + t) * width;
        const double* bn = row + d_inner + g * dstate;
        const double* cn = row + d_inner + groups * dstate + g * dstate;
        const double raw = pdt[(b * len + t) * heads + h] + vb[h];
        const double step = raw > 20.0 ? raw : std::log1p(std::exp(raw));
        const double decay = std::exp(step * va[h]);
        for (int64_t j = 0; j < p; ++j) {
          const double x = row[h * p + j];
          double y = 0;
          for (int64_t n = 0; n < dstate; ++n) {
            double& sn = s[j * dstate + n];
            sn = decay * sn + step * x * bn[n];
            y += sn * cn[n];
          }
          po[(b * len + t) * d_inner + h * p + j] = y + vd[h] * x;
        }
      }
    }
  });
  return out;
}

}  // namespace

namespace {

// One case: `batch` sequences of `len` tokens (len 1: the decode kernel, `batch` sessions) from
// a random state, output and final state against SsdReference.
void CheckSsd(const char* kernel, const std::string& shape, int64_t batch, int64_t len,
              int64_t heads, int64_t head_dim, int64_t groups, int64_t dstate) {
  RunCase(kernel, shape, "fp32", [&](Row& row) {
    const SsdInputs in = MakeSsdInputs(batch, len, heads, head_dim, groups, dstate);
    Tensor state = in.state.clone();
    auto run = [&] {
      return attnserve::kernels::mamba2::SsdScanCuda(in.xbc, in.dt, heads, groups, dstate,
                                                     in.dt_bias, in.a, in.d, 0.0, INFINITY, state);
    };
    const Tensor out = run();
    Tensor ref_state = in.state.to(at::kCPU, at::kDouble).contiguous();
    const Tensor ref = SsdReference(in, heads, groups, dstate, ref_state);
    row.err = std::max(RelErr(out.cpu(), ref), RelErr(state.cpu(), ref_state));
    row.budget = kFloat32Budget;
    const double p = static_cast<double>(head_dim), n = static_cast<double>(dstate);
    const double bytes =
        4.0 * (in.xbc.numel() + in.dt.numel() + out.numel()) + 8.0 * batch * heads * p * n;
    // The prefill's chunk of 32: M·x (32·P/2), C·S (N·P), Bᵀ·x (N·P) a head and token; the
    // step is timed against its bytes alone.
    const double flops = len == 1 ? 0 : 2.0 * batch * len * heads * (16 * p + 2 * n * p);
    Finish(
        row, [&] { run(); }, bytes, flops, false);
  });
}

}  // namespace

void CheckSsdScan(int64_t batch, int64_t len, int64_t heads, int64_t head_dim, int64_t groups,
                  int64_t dstate) {
  CheckSsd(
      "mamba2 ssd_scan",
      Shape(
          {{"B", batch}, {"L", len}, {"H", heads}, {"P", head_dim}, {"G", groups}, {"N", dstate}}),
      batch, len, heads, head_dim, groups, dstate);
}

void CheckSsdStep(int64_t sessions, int64_t heads, int64_t head_dim, int64_t groups,
                  int64_t dstate) {
  CheckSsd(
      "mamba2 ssd_step",
      Shape({{"sessions", sessions}, {"H", heads}, {"P", head_dim}, {"G", groups}, {"N", dstate}}),
      sessions, 1, heads, head_dim, groups, dstate);
}

}  // namespace attnserve::gpu_check
