// The GPU check of attnserve's CUDA kernels (run by tests/gpu/run.sh; LibTorch and CUDA only,
// no Abseil, no GoogleTest).
//
// For every kernel, on fresh random inputs at real sizes (Mamba d_model 768 and 2048, i.e.
// d_inner 1536 and 4096, d_state 16, conv width 4; attention H = 16, d = 64 and 128; L from
// 512 to 32768), through the torch-facing wrappers (*_cuda_torch.h):
//   * the output buffers are filled with NaN first, so an element the kernel does not write
//     fails the comparison;
//   * the result (and the state after it) is compared with a float64 reference: the same
//     formulas written here in plain ATen (the CPU kernels need Abseil): on the CPU for the
//     sequential Mamba scan, on the GPU in float64 for the rest, chunked so that no L × L
//     matrix is built for long inputs (and to stay within the time budget);
//     error = max |got - ref| / max |ref|;
//       float32: error <= 1e-4 (TF32 off everywhere);
//       bfloat16 (inputs rounded to bfloat16, the reference computed from those): error <=
//       2 × the error of the same formulas run in PyTorch in bfloat16;
//   * the kernel is timed with CUDA events (warm-up, then the median of repeats) and the
//     achieved bandwidth and FLOP rate are printed with the fraction of the floor: the floor
//     time is max(bytes moved / measured device-to-device copy bandwidth, FLOPs / measured
//     matmul rate (float32 SGEMM without TF32, or BF16 GEMM for bfloat16 inputs)); fraction =
//     floor / measured time.
// One table comes last. Exit status: 0 when every comparison passes (or there is no GPU), 1
// otherwise. Flags: --quick (small sizes, for a smoke run), --only SUBSTRING (cases whose
// name contains it).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/linear/linear_attention_cuda_torch.h"
#include "kernels/linformer/linformer_cuda_torch.h"
#include "kernels/mamba/mamba_cuda_torch.h"
#include "kernels/rwkv/rwkv_cuda_torch.h"
#include "kernels/sparse/sparse_attention_cuda_torch.h"
#include "kernels/sparse/sparse_key_tiles.h"
#include "kernels/standard/flash_attention_cuda_torch.h"
#include "tests/gpu/gpu_check_harness.h"

namespace {

using at::Tensor;
using namespace attnserve::gpu_check;  // NOLINT: the harness is this file's vocabulary

// ---------------------------------------------------------------- mamba

struct MambaInputs {
  Tensor u, delta, z, b, c;          // activations (float32 master copies)
  Tensor a, d_skip, delta_bias;      // parameters, float32
  Tensor ssm_state, conv_state;      // initial states, float32
  Tensor x, conv_weight, conv_bias;  // conv input and parameters
};

// Mamba's initialisation: dt in [1e-3, 0.1] through an inverse softplus bias, S4D-real A.
MambaInputs MakeMambaInputs(int64_t batch, int64_t len, int64_t dim, int64_t n, int64_t width) {
  MambaInputs in;
  in.u = at::randn({batch, len, dim}, Cuda());
  in.delta = at::randn({batch, len, dim}, Cuda()) * 0.5;
  in.z = at::randn({batch, len, dim}, Cuda());
  in.b = at::randn({batch, len, n}, Cuda());
  in.c = at::randn({batch, len, n}, Cuda());
  in.a = -at::arange(1, n + 1, Cuda()).repeat({dim, 1});
  in.d_skip = at::ones({dim}, Cuda());
  const Tensor dt =
      at::exp(at::rand({dim}, Cuda()) * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3));
  in.delta_bias = dt + at::log(-at::expm1(-dt));
  in.ssm_state = at::randn({batch, dim, n}, Cuda()) * 0.1;
  in.conv_state = at::randn({batch, dim, width}, Cuda());
  in.x = at::randn({batch, len, dim}, Cuda());
  in.conv_weight = at::rand({dim, width}, Cuda()) - 0.5;
  in.conv_bias = at::rand({dim}, Cuda()) - 0.5;
  return in;
}

// The scan in float64 on the CPU, parallel over blocks of 8 channels (channels inner, so the
// reads of a time step are contiguous). All arguments are contiguous CPU float64 tensors;
// returns out (B, L, D) and leaves the final state in `state`.
Tensor ScanReference(const Tensor& u, const Tensor& delta, const Tensor& delta_bias,
                     const Tensor& z, const Tensor& b, const Tensor& c, const Tensor& a,
                     const Tensor& d_skip, Tensor& state) {
  const int64_t batch = u.size(0), len = u.size(1), dim = u.size(2), n = a.size(1);
  Tensor out = at::zeros({batch, len, dim}, at::kDouble);
  const double *pu = u.data_ptr<double>(), *pd = delta.data_ptr<double>(),
               *pbias = delta_bias.data_ptr<double>(), *pz = z.data_ptr<double>(),
               *pb = b.data_ptr<double>(), *pc = c.data_ptr<double>(), *pa = a.data_ptr<double>(),
               *pskip = d_skip.data_ptr<double>();
  double* po = out.data_ptr<double>();
  double* ps = state.data_ptr<double>();
  constexpr int64_t kBlock = 8;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  at::parallel_for(0, batch * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> h(kBlock * n);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t bi = i / blocks, c0 = (i % blocks) * kBlock;
      const int64_t width = std::min(kBlock, dim - c0);
      for (int64_t j = 0; j < width; ++j) {
        for (int64_t k = 0; k < n; ++k) h[j * n + k] = ps[(bi * dim + c0 + j) * n + k];
      }
      for (int64_t t = 0; t < len; ++t) {
        const int64_t row = (bi * len + t) * dim + c0;
        const double* bt = pb + (bi * len + t) * n;
        const double* ct = pc + (bi * len + t) * n;
        for (int64_t j = 0; j < width; ++j) {
          const double raw = pd[row + j] + pbias[c0 + j];
          const double dt = raw > 20.0 ? raw : std::log1p(std::exp(raw));
          const double x = pu[row + j];
          double y = 0;
          for (int64_t k = 0; k < n; ++k) {
            double& hk = h[j * n + k];
            hk = std::exp(dt * pa[(c0 + j) * n + k]) * hk + dt * bt[k] * x;
            y += ct[k] * hk;
          }
          const double zz = pz[row + j];
          po[row + j] = (y + pskip[c0 + j] * x) * (zz / (1.0 + std::exp(-zz)));
        }
      }
      for (int64_t j = 0; j < width; ++j) {
        for (int64_t k = 0; k < n; ++k) ps[(bi * dim + c0 + j) * n + k] = h[j * n + k];
      }
    }
  });
  return out;
}

// The same scan in PyTorch in bfloat16 on the GPU (every tensor bfloat16, one step per
// iteration): the baseline for the bfloat16 budget.
Tensor ScanTorchBf16(const MambaInputs& in, int64_t len) {
  auto bf = [](const Tensor& t) { return t.to(at::kBFloat16); };
  const Tensor dt_all = at::softplus(bf(in.delta) + bf(in.delta_bias));
  const Tensor a = bf(in.a), u = bf(in.u), b = bf(in.b), c = bf(in.c), d = bf(in.d_skip);
  Tensor h = bf(in.ssm_state);
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < len; ++t) {
    const Tensor dt = dt_all.select(1, t), ut = u.select(1, t);
    h = at::exp(dt.unsqueeze(-1) * a) * h + (dt * ut).unsqueeze(-1) * b.select(1, t).unsqueeze(1);
    ys.push_back((h * c.select(1, t).unsqueeze(1)).sum(-1) + d * ut);
  }
  return at::stack(ys, 1) * at::silu(bf(in.z));
}

void CheckSelectiveScan(int64_t d_model, int64_t batch, int64_t len, at::ScalarType dtype) {
  const int64_t dim = 2 * d_model, n = 16;
  const bool bf16 = dtype == at::kBFloat16;
  RunCase("mamba selective_scan", Shape({{"d_model", d_model}, {"B", batch}, {"L", len}}),
          bf16 ? "bf16" : "fp32", [&](Row& row) {
            MambaInputs in = MakeMambaInputs(batch, len, dim, n, 4);
            const Tensor u = AsType(in.u, dtype), delta = AsType(in.delta, dtype),
                         z = AsType(in.z, dtype), b = AsType(in.b, dtype), c = AsType(in.c, dtype);
            Tensor state = in.ssm_state.clone();
            Tensor out = Nan({batch, len, dim}, dtype);
            attnserve::kernels::mamba::SelectiveScanCuda(u, delta, in.delta_bias, true, z, b, c,
                                                         in.a, in.d_skip, state, out);
            auto cpu64 = [](const Tensor& t) { return t.to(at::kCPU, at::kDouble).contiguous(); };
            Tensor ref_state = cpu64(in.ssm_state);
            const Tensor ref =
                ScanReference(cpu64(u), cpu64(delta), cpu64(in.delta_bias), cpu64(z), cpu64(b),
                              cpu64(c), cpu64(in.a), cpu64(in.d_skip), ref_state);
            row.err = std::max(RelErr(out.cpu(), ref), RelErr(state.cpu(), ref_state));
            row.budget = kFloat32Budget;
            if (bf16) {
              row.budget = 2 * RelErr(ScanTorchBf16(in, len).cpu(), ref);
              row.note = "bf16 baseline: PyTorch scan in bf16";
            }
            const double elt = bf16 ? 2 : 4;
            const double bytes =
                elt * (4.0 * batch * len * dim + 2.0 * batch * len * n) + 8.0 * batch * dim * n;
            Finish(
                row,
                [&] {
                  attnserve::kernels::mamba::SelectiveScanCuda(u, delta, in.delta_bias, true, z, b,
                                                               c, in.a, in.d_skip, state, out);
                },
                bytes, 0, bf16);
          });
}

void CheckSelectiveStateUpdate(int64_t d_model, int64_t sessions, bool pointer_mode) {
  const int64_t dim = 2 * d_model, n = 16;
  RunCase(
      "mamba state_update",
      Shape({{"d_model", d_model}, {"sessions", sessions}}) + (pointer_mode ? " ptrs" : " batched"),
      "fp32", [&](Row& row) {
        MambaInputs in = MakeMambaInputs(sessions, 1, dim, n, 4);
        const Tensor u = in.u.squeeze(1), delta = in.delta.squeeze(1), z = in.z.squeeze(1),
                     b = in.b.squeeze(1), c = in.c.squeeze(1);
        std::vector<Tensor> states;
        Tensor batched = in.ssm_state.clone();
        for (int64_t i = 0; i < sessions; ++i) states.push_back(in.ssm_state[i].clone());
        Tensor out = Nan({sessions, dim}, at::kFloat);
        auto run = [&] {
          if (pointer_mode) {
            attnserve::kernels::mamba::SelectiveStateUpdateCuda(u, delta, in.delta_bias, true, z, b,
                                                                c, in.a, in.d_skip, states, out);
          } else {
            attnserve::kernels::mamba::SelectiveStateUpdateCuda(u, delta, in.delta_bias, true, z, b,
                                                                c, in.a, in.d_skip, batched, out);
          }
        };
        run();
        const Tensor got_state = pointer_mode ? at::stack(states) : batched;
        auto cpu64 = [](const Tensor& t) { return t.to(at::kCPU, at::kDouble).contiguous(); };
        Tensor ref_state = cpu64(in.ssm_state);
        const Tensor ref =
            ScanReference(cpu64(in.u), cpu64(in.delta), cpu64(in.delta_bias), cpu64(in.z),
                          cpu64(in.b), cpu64(in.c), cpu64(in.a), cpu64(in.d_skip), ref_state);
        row.err = std::max(RelErr(out.cpu(), ref.squeeze(1)), RelErr(got_state.cpu(), ref_state));
        row.budget = kFloat32Budget;
        Finish(row, run, 8.0 * sessions * dim * n + 4.0 * sessions * (4 * dim + 2 * n), 0, false);
      });
}

// The conv in the given dtype (float64 reference or bfloat16 baseline): returns out and the
// new state.
std::pair<Tensor, Tensor> ConvReference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const Tensor& state, at::ScalarType dtype) {
  const int64_t len = x.size(1), dim = x.size(2), width = weight.size(1);
  const Tensor xx = at::cat({state.to(dtype).transpose(1, 2), x.to(dtype)}, 1);  // (B, W+L, D)
  const Tensor w = weight.to(dtype);
  Tensor acc = bias.to(dtype).view({1, 1, dim}).expand({x.size(0), len, dim});
  for (int64_t k = 0; k < width; ++k) {
    acc = acc + xx.narrow(1, 1 + k, len) * w.select(1, k).view({1, 1, dim});
  }
  return {at::silu(acc), xx.narrow(1, len, width).transpose(1, 2).contiguous()};
}

void CheckConv(int64_t d_model, int64_t batch, int64_t len, at::ScalarType dtype) {
  const int64_t dim = 2 * d_model, width = 4;
  const bool bf16 = dtype == at::kBFloat16;
  RunCase("mamba causal_conv1d", Shape({{"d_model", d_model}, {"B", batch}, {"L", len}}),
          bf16 ? "bf16" : "fp32", [&](Row& row) {
            MambaInputs in = MakeMambaInputs(batch, 1, dim, 16, width);
            const Tensor x = AsType(at::randn({batch, len, dim}, Cuda()), dtype);
            Tensor state = in.conv_state.clone();
            Tensor out = Nan({batch, len, dim}, dtype);
            attnserve::kernels::mamba::CausalConv1dCuda(x, in.conv_weight, in.conv_bias, state,
                                                        true, out);
            const auto [ref, ref_state] =
                ConvReference(x, in.conv_weight, in.conv_bias, in.conv_state, at::kDouble);
            row.err = std::max(RelErr(out, ref), RelErr(state, ref_state));
            row.budget = kFloat32Budget;
            if (bf16) {
              row.budget = 2 * RelErr(ConvReference(x, in.conv_weight, in.conv_bias, in.conv_state,
                                                    at::kBFloat16)
                                          .first,
                                      ref);
            }
            const double elt = bf16 ? 2 : 4;
            Finish(
                row,
                [&] {
                  attnserve::kernels::mamba::CausalConv1dCuda(x, in.conv_weight, in.conv_bias,
                                                              state, true, out);
                },
                2.0 * elt * batch * len * dim + 8.0 * batch * dim * width, 0, bf16);
          });
}

void CheckConvUpdate(int64_t d_model, int64_t sessions) {
  const int64_t dim = 2 * d_model, width = 4;
  RunCase("mamba conv1d_update", Shape({{"d_model", d_model}, {"sessions", sessions}}) + " ptrs",
          "fp32", [&](Row& row) {
            MambaInputs in = MakeMambaInputs(sessions, 1, dim, 16, width);
            const Tensor x = at::randn({sessions, dim}, Cuda());
            std::vector<Tensor> states;
            for (int64_t i = 0; i < sessions; ++i) states.push_back(in.conv_state[i].clone());
            Tensor out = Nan({sessions, dim}, at::kFloat);
            auto run = [&] {
              attnserve::kernels::mamba::CausalConv1dUpdateCuda(x, in.conv_weight, in.conv_bias,
                                                                states, true, out);
            };
            run();
            const auto [ref, ref_state] = ConvReference(x.unsqueeze(1), in.conv_weight,
                                                        in.conv_bias, in.conv_state, at::kDouble);
            row.err = std::max(RelErr(out, ref.squeeze(1)), RelErr(at::stack(states), ref_state));
            row.budget = kFloat32Budget;
            Finish(row, run, 8.0 * sessions * dim + 8.0 * sessions * dim * width, 0, false);
          });
}

// ---------------------------------------------------------------- linear attention

Tensor Phi(const Tensor& x) { return at::elu(x) + 1; }

// The chunked causal form (chunks of 64, the state carried between them) in `dtype` on the
// GPU: out, S and z after the chunk. q, k, v (B, H, L, d), s (B, H, d, d), z (B, H, d).
// map = false: q and k are features already (the performer's), used as they are.
std::tuple<Tensor, Tensor, Tensor> LinearReference(const Tensor& q, const Tensor& k,
                                                   const Tensor& v, const Tensor& s,
                                                   const Tensor& z, at::ScalarType dtype,
                                                   bool map = true) {
  constexpr int64_t kChunk = 64;
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), d = q.size(3), bh = b * h;
  const int64_t n = (l + kChunk - 1) / kChunk, padded = n * kChunk;
  auto blocks = [&](const Tensor& t) {
    return at::constant_pad_nd(t.to(dtype).reshape({bh, l, d}), {0, 0, 0, padded - l})
        .view({-1, kChunk, d});
  };
  const Tensor fq = blocks(map ? Phi(q.to(dtype)) : q.to(dtype));
  // φ(0) = 1: pad φ(k) with zeros, not k.
  const Tensor fk = blocks(map ? Phi(k.to(dtype)) : k.to(dtype));
  const Tensor vb = blocks(v);
  const Tensor delta_s = at::bmm(fk.transpose(1, 2), vb).view({bh, n, d, d});
  const Tensor delta_z = fk.sum(1).view({bh, n, d});
  const Tensor s0 = s.to(dtype).reshape({bh, 1, d, d}), z0 = z.to(dtype).reshape({bh, 1, d});
  const Tensor s_after = delta_s.cumsum(1) + s0, z_after = delta_z.cumsum(1) + z0;
  const Tensor s_before = at::cat({s0, s_after.narrow(1, 0, n - 1)}, 1).view({-1, d, d});
  const Tensor z_before = at::cat({z0, z_after.narrow(1, 0, n - 1)}, 1).view({-1, d, 1});
  const Tensor scores = at::bmm(fq, fk.transpose(1, 2)).tril();
  const Tensor num = at::bmm(fq, s_before) + at::bmm(scores, vb);
  // + ε for elu + 1 features; features given: max(den, FLT_MIN) (causal_linear_attention_cpu.h).
  const Tensor raw_den = at::bmm(fq, z_before) + scores.sum(2, true);
  const Tensor den =
      map ? raw_den + 1e-6 : raw_den.clamp_min(attnserve::kernels::kPositiveNormaliserFloor);
  const Tensor out = (num / den).view({bh, padded, d}).narrow(1, 0, l).reshape({b, h, l, d});
  return {out, s_after.select(1, n - 1).reshape({b, h, d, d}),
          z_after.select(1, n - 1).reshape({b, h, d})};
}

void CheckLinear(int64_t batch, int64_t len, int64_t d, at::ScalarType dtype) {
  const int64_t heads = 16;
  const bool bf16 = dtype == at::kBFloat16;
  RunCase("linear prefill", Shape({{"B", batch}, {"H", heads}, {"L", len}, {"d", d}}),
          bf16 ? "bf16" : "fp32", [&](Row& row) {
            const Tensor q = AsType(at::randn({batch, heads, len, d}, Cuda()), dtype);
            const Tensor k = AsType(at::randn({batch, heads, len, d}, Cuda()), dtype);
            const Tensor v = AsType(at::randn({batch, heads, len, d}, Cuda()), dtype);
            // A state carried in from earlier tokens: z > 0, as a sum of φ(k) is.
            const Tensor s = at::randn({batch, heads, d, d}, Cuda()) * 10;
            const Tensor z = at::rand({batch, heads, d}, Cuda()) * 100 + 1;
            Tensor out = Nan({batch, heads, len, d}, dtype);
            Tensor s_out = Nan({batch, heads, d, d}, at::kFloat);
            Tensor z_out = Nan({batch, heads, d}, at::kFloat);
            attnserve::kernels::linear::CausalLinearAttentionCuda(q, k, v, s, z, out, s_out, z_out);
            const auto [ref, ref_s, ref_z] = LinearReference(q, k, v, s, z, at::kDouble);
            row.err = std::max({RelErr(out, ref), RelErr(s_out, ref_s), RelErr(z_out, ref_z)});
            row.budget = kFloat32Budget;
            if (bf16) {
              row.budget =
                  2 * RelErr(std::get<0>(LinearReference(q, k, v, s, z, at::kBFloat16)), ref);
            }
            const double elt = bf16 ? 2 : 4, chunks = std::ceil(len / 64.0);
            const double flops = 4.0 * 64 * d * (64 + d) * chunks * batch * heads;
            Finish(
                row,
                [&] {
                  attnserve::kernels::linear::CausalLinearAttentionCuda(q, k, v, s, z, out, s_out,
                                                                        z_out);
                },
                4.0 * elt * batch * heads * len * d, flops, bf16);
          });
}

// The performer's path: q and k are FAVOR+ features already (positive), map_features = false.
void CheckLinearOnFeatures(int64_t batch, int64_t len, int64_t d) {
  const int64_t heads = 16;
  RunCase("linear prefill, given features",
          Shape({{"B", batch}, {"H", heads}, {"L", len}, {"d", d}}), "fp32", [&](Row& row) {
            const Tensor q = at::exp(at::randn({batch, heads, len, d}, Cuda()) * 0.5) / 8;
            const Tensor k = at::exp(at::randn({batch, heads, len, d}, Cuda()) * 0.5) / 8;
            const Tensor v = at::randn({batch, heads, len, d}, Cuda());
            const Tensor s = at::randn({batch, heads, d, d}, Cuda());
            const Tensor z = at::rand({batch, heads, d}, Cuda()) * 10 + 1;
            Tensor out = Nan({batch, heads, len, d}, at::kFloat);
            Tensor s_out = Nan({batch, heads, d, d}, at::kFloat);
            Tensor z_out = Nan({batch, heads, d}, at::kFloat);
            attnserve::kernels::linear::CausalLinearAttentionCuda(q, k, v, s, z, out, s_out, z_out,
                                                                  /*map_features=*/false);
            const auto [ref, ref_s, ref_z] =
                LinearReference(q, k, v, s, z, at::kDouble, /*map=*/false);
            row.err = std::max({RelErr(out, ref), RelErr(s_out, ref_s), RelErr(z_out, ref_z)});
            row.budget = kFloat32Budget;
            const double chunks = std::ceil(len / 64.0);
            Finish(
                row,
                [&] {
                  attnserve::kernels::linear::CausalLinearAttentionCuda(q, k, v, s, z, out, s_out,
                                                                        z_out, false);
                },
                16.0 * batch * heads * len * d, 4.0 * 64 * d * (64 + d) * chunks * batch * heads,
                false);
          });
}

void CheckLinearStep(int64_t sessions, int64_t d) {
  const int64_t heads = 16;
  RunCase(
      "linear decode", Shape({{"sessions", sessions}, {"H", heads}, {"d", d}}) + " ptrs", "fp32",
      [&](Row& row) {
        const Tensor q = at::randn({sessions, heads, d}, Cuda());
        const Tensor k = at::randn({sessions, heads, d}, Cuda());
        const Tensor v = at::randn({sessions, heads, d}, Cuda());
        const Tensor s = at::randn({sessions, heads, d, d}, Cuda()) * 10;
        const Tensor z = at::rand({sessions, heads, d}, Cuda()) * 100 + 1;
        std::vector<Tensor> s_list, z_list;
        for (int64_t i = 0; i < sessions; ++i) {
          s_list.push_back(s[i].clone());
          z_list.push_back(z[i].clone());
        }
        Tensor out = Nan({sessions, heads, d}, at::kFloat);
        auto run = [&] {
          attnserve::kernels::linear::CausalLinearAttentionStepCuda(q, k, v, s_list, z_list, out);
        };
        run();
        const Tensor fq = Phi(q.to(at::kDouble)), fk = Phi(k.to(at::kDouble));
        const Tensor s_new = s.to(at::kDouble) + fk.unsqueeze(-1) * v.to(at::kDouble).unsqueeze(-2);
        const Tensor z_new = z.to(at::kDouble) + fk;
        const Tensor ref =
            at::matmul(fq.unsqueeze(-2), s_new).squeeze(-2) / ((fq * z_new).sum(-1, true) + 1e-6);
        row.err = std::max(
            {RelErr(out, ref), RelErr(at::stack(s_list), s_new), RelErr(at::stack(z_list), z_new)});
        row.budget = kFloat32Budget;
        Finish(row, run, 8.0 * sessions * heads * (d * d + d), 0, false);
      });
}

// ---------------------------------------------------------------- standard attention

// softmax(q kᵀ · scale + mask) v in `dtype` on the GPU, per (batch, head) and chunks of 4096
// queries (no Lq × Lk matrix for the long cases). Causal: query i sees keys 0 .. Lk-Lq+i;
// window > 0: only those of them less than `window` before it, or below `sinks`.
Tensor AttentionReference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                          at::ScalarType dtype, int64_t window = 0, int64_t sinks = 0) {
  const int64_t batch = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  const int64_t lk = k.size(2), offset = lk - lq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Tensor out = at::empty({batch, heads, lq, d}, q.options().dtype(dtype));
  const Tensor keys = at::arange(lk, q.options().dtype(at::kLong)).view({1, -1});
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const Tensor qh = q[b][h].to(dtype), kh = k[b][h].to(dtype), vh = v[b][h].to(dtype);
      for (int64_t q0 = 0; q0 < lq; q0 += 4096) {
        const int64_t rows = std::min<int64_t>(4096, lq - q0);
        Tensor s = at::mm(qh.narrow(0, q0, rows), kh.t()) * scale;
        if (causal) {
          const Tensor pos =
              at::arange(rows, q.options().dtype(at::kLong)).view({-1, 1}) + (offset + q0);
          s.masked_fill_(keys > pos, -std::numeric_limits<double>::infinity());
          if (window > 0) {
            s.masked_fill_((pos - keys >= window).logical_and(keys >= sinks),
                           -std::numeric_limits<double>::infinity());
          }
        }
        out[b][h].narrow(0, q0, rows).copy_(at::mm(at::softmax(s, -1), vh));
      }
    }
  }
  return out;
}

// kv_heads < 16: grouped-query attention (k and v of kv_heads heads, read in place by the
// kernel; the reference repeats them).
void CheckFlash(int64_t batch, int64_t lq, int64_t lk, int64_t d, bool causal, at::ScalarType dtype,
                int64_t kv_heads = 16) {
  const int64_t heads = 16;
  const bool bf16 = dtype == at::kBFloat16;
  RunCase(
      causal ? "flash causal" : "flash bidirectional",
      Shape({{"B", batch}, {"H", heads}, {"Hkv", kv_heads}, {"Lq", lq}, {"Lk", lk}, {"d", d}}),
      bf16 ? "bf16" : "fp32", [&](Row& row) {
        const Tensor q = AsType(at::randn({batch, heads, lq, d}, Cuda()), dtype);
        const Tensor k = AsType(at::randn({batch, kv_heads, lk, d}, Cuda()), dtype);
        const Tensor v = AsType(at::randn({batch, kv_heads, lk, d}, Cuda()), dtype);
        Tensor out = Nan({batch, heads, lq, d}, dtype);
        attnserve::kernels::standard::FlashAttentionCuda(q, k, v, causal, 0.0, out);
        const Tensor kr = k.repeat_interleave(heads / kv_heads, 1);
        const Tensor vr = v.repeat_interleave(heads / kv_heads, 1);
        const Tensor ref = AttentionReference(q, kr, vr, causal, at::kDouble);
        row.err = RelErr(out, ref);
        row.budget = kFloat32Budget;
        if (bf16) {
          row.budget = 2 * RelErr(AttentionReference(q, kr, vr, causal, at::kBFloat16), ref);
        }
        const double visible =
            causal ? lq * static_cast<double>(lk - lq) + lq * (lq + 1.0) / 2 : double(lq) * lk;
        const double elt = bf16 ? 2 : 4;
        Finish(
            row,
            [&] { attnserve::kernels::standard::FlashAttentionCuda(q, k, v, causal, 0.0, out); },
            elt * batch * d * (2.0 * heads * lq + 2.0 * kv_heads * lk),
            4.0 * batch * heads * d * visible, bf16);
      });
}

// Sliding-window attention (the sliding_window mixer's prefill): the prefill kernel with a
// window and sinks, after a prefix of keys as a chunk after the ring's contents sees them.
void CheckFlashWindow(int64_t lq, int64_t lk, int64_t d, int64_t window, int64_t sinks) {
  const int64_t heads = 16;
  RunCase(
      "flash window", Shape({{"H", heads}, {"Lq", lq}, {"Lk", lk}, {"W", window}, {"S", sinks}}),
      "fp32", [&](Row& row) {
        const Tensor q = at::randn({1, heads, lq, d}, Cuda());
        const Tensor k = at::randn({1, heads, lk, d}, Cuda());
        const Tensor v = at::randn({1, heads, lk, d}, Cuda());
        Tensor out = Nan({1, heads, lq, d}, at::kFloat);
        auto run = [&] {
          attnserve::kernels::standard::FlashAttentionCuda(q, k, v, true, 0.0, out, window, sinks);
        };
        run();
        row.err = RelErr(out, AttentionReference(q, k, v, true, at::kDouble, window, sinks));
        row.budget = kFloat32Budget;
        const double visible = lq * static_cast<double>(std::min(window, lk) + sinks);
        Finish(row, run, 4.0 * heads * d * (2.0 * lq + 2.0 * lk), 4.0 * heads * d * visible, false);
      });
}

void CheckFlashDecode(int64_t sessions, int64_t capacity, int64_t d, bool pointer_mode,
                      int64_t kv_heads = 16) {
  const int64_t heads = 16;
  RunCase("flash decode",
          Shape({{"sessions", sessions},
                 {"H", heads},
                 {"Hkv", kv_heads},
                 {"max_len", capacity},
                 {"d", d}}) +
              (pointer_mode ? " ptrs" : " batched"),
          "fp32", [&](Row& row) {
            const Tensor lens_cpu = at::randint(1, capacity + 1, {sessions}, at::kInt);
            lens_cpu[0].fill_(capacity);  // the longest one is max_seqlen
            const Tensor lens = lens_cpu.to(at::kCUDA);
            const Tensor q = at::randn({sessions, heads, d}, Cuda());
            Tensor k_cache, v_cache;
            std::vector<Tensor> k_list, v_list;
            if (pointer_mode) {
              for (int64_t i = 0; i < sessions; ++i) {
                // Caches of different capacities, as sessions grow them.
                const int64_t cap = lens_cpu[i].item<int>() + 64 * (i % 3);
                k_list.push_back(at::randn({kv_heads, cap, d}, Cuda()));
                v_list.push_back(at::randn({kv_heads, cap, d}, Cuda()));
              }
            } else {
              k_cache = at::randn({sessions, kv_heads, capacity, d}, Cuda());
              v_cache = at::randn({sessions, kv_heads, capacity, d}, Cuda());
            }
            Tensor out = Nan({sessions, heads, d}, at::kFloat);
            auto run = [&] {
              if (pointer_mode) {
                attnserve::kernels::standard::FlashDecodeCuda(q, k_list, v_list, lens, capacity,
                                                              0.0, out);
              } else {
                attnserve::kernels::standard::FlashDecodeCuda(q, k_cache, v_cache, lens, capacity,
                                                              0.0, out);
              }
            };
            run();
            Tensor ref = at::empty({sessions, heads, d}, Cuda(at::kDouble));
            double keys = 0;
            for (int64_t i = 0; i < sessions; ++i) {
              const int64_t len = lens_cpu[i].item<int>();
              keys += len;
              const Tensor kk = (pointer_mode ? k_list[i] : k_cache[i])
                                    .narrow(1, 0, len)
                                    .repeat_interleave(heads / kv_heads, 0);
              const Tensor vv = (pointer_mode ? v_list[i] : v_cache[i])
                                    .narrow(1, 0, len)
                                    .repeat_interleave(heads / kv_heads, 0);
              const Tensor s =
                  at::bmm(q[i].to(at::kDouble).unsqueeze(1), kk.to(at::kDouble).transpose(1, 2)) /
                  std::sqrt(static_cast<double>(d));
              ref[i].copy_(at::bmm(at::softmax(s, -1), vv.to(at::kDouble)).squeeze(1));
            }
            row.err = RelErr(out, ref);
            row.budget = kFloat32Budget;
            Finish(row, run, 8.0 * kv_heads * d * keys, 4.0 * heads * d * keys, false);
          });
}

// ---------------------------------------------------------------- linformer

void CheckLinformer(int64_t batch, int64_t len, int64_t d, int64_t proj) {
  const int64_t heads = 16;
  RunCase(
      "linformer (cuBLAS)", Shape({{"B", batch}, {"H", heads}, {"L", len}, {"d", d}, {"k", proj}}),
      "fp32", [&](Row& row) {
        const Tensor q = at::randn({batch, heads, len, d}, Cuda());
        const Tensor k = at::randn({batch, heads, len, d}, Cuda());
        const Tensor v = at::randn({batch, heads, len, d}, Cuda());
        const int64_t max_len = len + 128;  // sliced to E[:L]
        const Tensor e = at::randn({max_len, proj}, Cuda()) / std::sqrt(double(proj));
        const Tensor f = at::randn({max_len, proj}, Cuda()) / std::sqrt(double(proj));
        Tensor out = Nan({batch, heads, len, d}, at::kFloat);
        attnserve::kernels::linformer::LinformerAttentionCuda(q, k, v, e, f, 0.0, out);
        auto f64 = [](const Tensor& t) { return t.to(at::kDouble); };
        const Tensor kp = at::matmul(f64(e).narrow(0, 0, len).t(), f64(k));
        const Tensor vp = at::matmul(f64(f).narrow(0, 0, len).t(), f64(v));
        const Tensor s = at::matmul(f64(q), kp.transpose(-1, -2)) / std::sqrt(double(d));
        const Tensor ref = at::matmul(at::softmax(s, -1), vp);
        row.err = RelErr(out, ref);
        row.budget = kFloat32Budget;
        Finish(
            row,
            [&] { attnserve::kernels::linformer::LinformerAttentionCuda(q, k, v, e, f, 0.0, out); },
            4.0 * 4 * batch * heads * len * d, 8.0 * batch * heads * len * proj * d, false);
      });
}

// RWKV-4's WKV: k large enough (±25) that e^k overflows float32 without the running maximum;
// a state carried in from earlier tokens (a, b > 0 as sums of e^k are; p finite). The
// reference is the same stable recurrence in float64 on the GPU, step by step (the CPU
// kernel and the two-sum formula are held together by tests/unit/rwkv_test.cc).
void CheckWkv(int64_t batch, int64_t len, int64_t channels) {
  RunCase("rwkv wkv", Shape({{"B", batch}, {"L", len}, {"A", channels}}), "fp32", [&](Row& row) {
    const Tensor k = at::randn({batch, len, channels}, Cuda()) * 8;
    const Tensor v = at::randn({batch, len, channels}, Cuda());
    const Tensor decay = -at::exp(at::randn({channels}, Cuda()));
    const Tensor first = at::randn({channels}, Cuda());
    const Tensor carried =
        at::stack({at::randn({batch, channels}, Cuda()), at::rand({batch, channels}, Cuda()) + 0.5,
                   at::randn({batch, channels}, Cuda()) * 4},
                  1);
    Tensor state = carried.clone();
    Tensor out = Nan({batch, len, channels}, at::kFloat);
    attnserve::kernels::rwkv::WkvCuda(k, v, decay, first, state, out);
    auto f64 = [](const Tensor& t) { return t.to(at::kDouble); };
    Tensor a = f64(carried.select(1, 0)), b = f64(carried.select(1, 1)),
           p = f64(carried.select(1, 2));
    const Tensor w = f64(decay), u = f64(first), kd = f64(k), vd = f64(v);
    Tensor ref = at::empty({batch, len, channels}, Cuda(at::kDouble));
    for (int64_t t = 0; t < len; ++t) {
      const Tensor kt = kd.select(1, t), vt = vd.select(1, t);
      Tensor q = at::maximum(p, u + kt);
      Tensor e1 = at::exp(p - q), e2 = at::exp(u + kt - q);
      ref.select(1, t).copy_((e1 * a + e2 * vt) / (e1 * b + e2));
      q = at::maximum(p + w, kt);
      e1 = at::exp(p + w - q);
      e2 = at::exp(kt - q);
      a = e1 * a + e2 * vt;
      b = e1 * b + e2;
      p = q;
    }
    // a and b are relative to e^p: compare the true sums' logarithms' ingredients as stored.
    row.err = std::max({RelErr(out, ref), RelErr(state.select(1, 0), a),
                        RelErr(state.select(1, 1), b), RelErr(state.select(1, 2), p)});
    row.budget = kFloat32Budget;
    Tensor timed = carried.clone();
    Finish(
        row, [&] { attnserve::kernels::rwkv::WkvCuda(k, v, decay, first, timed, out); },
        4.0 * (3 * batch * len * channels + 6 * batch * channels), 0, false);
  });
}

// ---------------------------------------------------------------- main
// ---------------------------------------------------------------- sparse attention

// The Sparse Transformer's patterns (sparse_key_tiles.h) as an explicit mask over the full
// score matrix, in float64 on the GPU, chunks of 2048 queries: the reference the CPU kernel
// (SparseAttentionCpu, which needs Abseil and is not built here) is checked against in
// tests/unit/sparse_test.cc, from the same definitions. Query i is at position Lk - Lq + i.
// *visible_pairs (when given): the mask's visible (query, key) pairs.
Tensor SparseReference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                       int32_t pattern, int64_t l, int64_t c, at::ScalarType dtype,
                       double* visible_pairs = nullptr) {
  const int64_t batch = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  const int64_t lk = k.size(2), offset = lk - lq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Tensor out = at::empty({batch, heads, lq, d}, q.options().dtype(dtype));
  const Tensor keys = at::arange(lk, q.options().dtype(at::kLong)).view({1, -1});
  for (int64_t q0 = 0; q0 < lq; q0 += 2048) {
    const int64_t rows = std::min<int64_t>(2048, lq - q0);
    const Tensor pos = at::arange(rows, q.options().dtype(at::kLong)).view({-1, 1}) + (offset + q0);
    Tensor visible;
    if (pattern == attnserve::kernels::sparse::kStrided) {
      const Tensor dist = (pos - keys).abs();
      visible = (dist < l).logical_or(at::remainder(dist, l) == 0);
    } else {
      visible = (at::div(keys, l, "floor") == at::div(pos, l, "floor"))
                    .logical_or(at::remainder(keys, l) >= l - c);
    }
    if (causal) visible = visible.logical_and(keys <= pos);
    if (visible_pairs != nullptr) *visible_pairs += visible.sum().item<double>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        Tensor s = at::mm(q[b][h].narrow(0, q0, rows).to(dtype), k[b][h].to(dtype).t()) * scale;
        s.masked_fill_(visible.logical_not(), -std::numeric_limits<double>::infinity());
        out[b][h].narrow(0, q0, rows).copy_(at::mm(at::softmax(s, -1), v[b][h].to(dtype)));
      }
    }
  }
  return out;
}

// The sparse mixer's prefill kernel (compiled, never run before this check existed) against
// the masked reference; timed, with the dense kernel's time on the same inputs in the note.
void CheckSparse(int64_t batch, int64_t heads, int64_t lq, int64_t lk, int64_t d, bool causal,
                 int32_t pattern, int64_t l, int64_t c, at::ScalarType dtype) {
  const bool bf16 = dtype == at::kBFloat16;
  const bool strided = pattern == attnserve::kernels::sparse::kStrided;
  RunCase(
      std::string("sparse ") + (strided ? "strided" : "fixed") + (causal ? " causal" : " bidir"),
      Shape({{"B", batch},
             {"H", heads},
             {"Lq", lq},
             {"Lk", lk},
             {"d", d},
             {"l", l},
             {"c", strided ? 0 : c}}),
      bf16 ? "bf16" : "fp32", [&](Row& row) {
        const Tensor q = AsType(at::randn({batch, heads, lq, d}, Cuda()), dtype);
        const Tensor k = AsType(at::randn({batch, heads, lk, d}, Cuda()), dtype);
        const Tensor v = AsType(at::randn({batch, heads, lk, d}, Cuda()), dtype);
        Tensor out = Nan({batch, heads, lq, d}, dtype);  // an element not written fails
        auto run = [&] {
          attnserve::kernels::sparse::SparseAttentionCuda(q, k, v, causal, pattern, l, c, 0.0, out);
        };
        run();
        double visible = 0;
        const Tensor ref = SparseReference(q, k, v, causal, pattern, l, c, at::kDouble, &visible);
        row.err = RelErr(out, ref);
        row.budget = kFloat32Budget;
        if (bf16) {
          row.budget =
              2 * RelErr(SparseReference(q, k, v, causal, pattern, l, c, at::kBFloat16), ref);
        }
        const double elt = bf16 ? 2 : 4;
        const double dense_ms =
            TimeMs([&] { attnserve::kernels::standard::FlashAttentionCuda(q, k, v, causal); });
        row.note = "dense flash " + std::to_string(dense_ms) + " ms";
        Finish(row, run, elt * batch * heads * d * (2.0 * lq + 2.0 * lk),
               4.0 * batch * heads * d * visible, bf16);
      });
}

void PrintTable() {
  std::printf("\n%-22s %-34s %-5s %9s %9s %10s %9s %8s %7s  %s\n", "kernel", "shape", "dtype",
              "error", "budget", "time ms", "GB/s", "TFLOP/s", "floor%", "result");
  std::printf("%s\n", std::string(130, '-').c_str());
  for (const Row& r : g_rows) {
    std::printf("%-22s %-34s %-5s %9.2e %9.2e %10.3f %9.1f %8.2f %6.1f%%  %s%s%s\n",
                r.kernel.c_str(), r.shape.c_str(), r.dtype.c_str(), r.err, r.budget, r.ms, r.gbps,
                r.tflops, 100 * r.floor_frac, r.ok ? "ok" : "FAIL", r.note.empty() ? "" : "  ",
                r.note.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_options.quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      g_options.only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--only SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  if (!at::hasCUDA() || at::cuda::getNumGPUs() == 0) {
    std::printf("gpu_check: SKIPPED: no CUDA device visible to LibTorch\n");
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  at::manual_seed(0);
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  std::printf("gpu_check: %s (sm_%d%d, %d SMs), built with CUDA %d, %d CPU threads\n", prop->name,
              prop->major, prop->minor, prop->multiProcessorCount, CUDART_VERSION,
              at::get_num_threads());
  try {
    MeasureFloors();
  } catch (const std::exception& e) {
    std::printf("gpu_check: FAILED to measure the floors: %s\n", e.what());
    return 1;
  }

  const bool quick = g_options.quick;
  const at::ScalarType f32 = at::kFloat, bf16 = at::kBFloat16;
  // Mamba: d_model 768 (d_inner 1536) and 2048 (d_inner 4096).
  CheckSelectiveScan(768, 4, quick ? 512 : 2048, f32);
  CheckSelectiveScan(768, 1, quick ? 2048 : 32768, f32);
  CheckSelectiveScan(2048, 1, quick ? 1024 : 8192, f32);
  CheckSelectiveScan(768, 1, quick ? 256 : 1024, bf16);
  CheckSelectiveScan(2048, 2, quick ? 256 : 1024, bf16);
  CheckSelectiveStateUpdate(768, 64, /*pointer_mode=*/true);
  CheckSelectiveStateUpdate(2048, 64, /*pointer_mode=*/false);
  CheckConv(768, 1, quick ? 2048 : 32768, f32);
  CheckConv(2048, 4, quick ? 512 : 2048, f32);
  CheckConv(2048, 1, quick ? 1024 : 8192, bf16);
  CheckConvUpdate(2048, 64);
  // Mamba-2 (issue #50): mamba2-130m's heads (24 x 64, N 128, one group), Codestral's 8 groups,
  // the largest state the prefill kernel takes (P 128, N 256), decode at 64 sessions.
  CheckSsdScan(1, quick ? 512 : 4096, 24, 64, 1, 128);
  CheckSsdScan(2, 333, 16, 64, 8, 128);
  CheckSsdScan(1, 100, 4, 128, 2, 256);
  CheckSsdStep(64, 24, 64, 1, 128);
  CheckSsdStep(16, 128, 64, 8, 128);
  // Linear attention: H 16, d 64 and 128.
  CheckLinear(4, 512, 64, f32);
  CheckLinear(1, quick ? 4096 : 32768, 64, f32);
  CheckLinear(1, quick ? 2048 : 8192, 128, f32);
  CheckLinear(1, quick ? 1024 : 4096, 64, bf16);
  CheckLinear(1, quick ? 1024 : 4096, 128, bf16);
  CheckLinearOnFeatures(1, quick ? 2048 : 8192, 64);
  CheckLinearStep(64, 64);
  CheckLinearStep(64, 128);
  // Standard attention: H 16, d 64 and 128, causal (also after a KV prefix) and bidirectional.
  CheckFlash(4, 512, 512, 64, true, f32);
  CheckFlash(1, 4096, 4096, 64, true, f32);
  CheckFlash(1, 4096, 4096, 128, true, f32);
  CheckFlash(1, 4096, 4096, 64, false, f32);
  CheckFlash(1, 1024, quick ? 4096 : 8192, 128, true, f32);
  CheckFlash(1, quick ? 8192 : 32768, quick ? 8192 : 32768, 64, true, f32);
  CheckFlash(1, quick ? 8192 : 32768, quick ? 8192 : 32768, 128, true, f32);
  CheckFlash(1, 4096, 4096, 64, true, bf16);
  CheckFlash(1, 2048, 2048, 128, false, bf16);
  // Sliding window: W 1024 with 4 sinks (the default model's), W 4096 without, a chunk after
  // a ring's 1027 keys, and a window wider than the keys (= causal).
  CheckFlashWindow(quick ? 8192 : 32768, quick ? 8192 : 32768, 64, 1024, 4);
  CheckFlashWindow(8192, 8192, 128, 4096, 0);
  CheckFlashWindow(512, 1539, 64, 1024, 4);
  CheckFlashWindow(1000, 1000, 64, 4096, 0);
  // Blocks that start past tile 0 (d 64: the first tile prefetched), the jump from the sinks'
  // tiles to the window's at d 128, a window under one tile with sinks over two tiles, and a
  // query count that is not a multiple of 64.
  CheckFlashWindow(8192, 8192, 64, 1024, 0);
  CheckFlashWindow(4096, 4096, 128, 1024, 4);
  CheckFlashWindow(1000, 1300, 64, 40, 70);
  CheckFlashWindow(333, 1000, 128, 100, 0);
  CheckFlashDecode(16, quick ? 4096 : 32768, 128, /*pointer_mode=*/false);
  CheckFlashDecode(8, quick ? 2048 : 8192, 64, /*pointer_mode=*/true);
  // Grouped-query attention (issue #49): Llama 3's 4 query heads a group, SmolLM's 3 is not a
  // divisor of 16, so 16/8, 16/4 and MQA's 16/1; prefill after a KV prefix and decode.
  CheckFlash(1, 2048, 4096, 64, true, f32, /*kv_heads=*/4);
  CheckFlash(2, 1000, 1000, 128, true, f32, /*kv_heads=*/8);
  CheckFlash(1, 2048, 2048, 64, true, bf16, /*kv_heads=*/1);
  CheckFlashDecode(16, quick ? 4096 : 16384, 64, /*pointer_mode=*/false, /*kv_heads=*/4);
  CheckFlashDecode(8, 4096, 128, /*pointer_mode=*/true, /*kv_heads=*/1);
  // Sparse Transformer attention (the sparse mixer's prefill): both patterns, causal (also a
  // chunk after a KV prefix) and bidirectional, strides and lengths that are not multiples of
  // the kernel's 64-row tiles, l >= L (standard attention), then random shapes.
  const int32_t strided = attnserve::kernels::sparse::kStrided;
  const int32_t fixed = attnserve::kernels::sparse::kFixed;
  CheckSparse(1, 16, quick ? 8192 : 32768, quick ? 8192 : 32768, 64, true, strided, 128, 1, f32);
  CheckSparse(1, 16, 16384, 16384, 128, true, fixed, 128, 8, f32);
  CheckSparse(2, 16, 4096, 4096, 64, false, strided, 64, 1, f32);
  CheckSparse(1, 16, 4096, 4096, 64, false, fixed, 128, 8, f32);
  CheckSparse(1, 16, 333, 1000, 128, true, strided, 100, 1, f32);
  CheckSparse(1, 16, 200, 1500, 64, true, fixed, 128, 8, f32);
  CheckSparse(1, 16, 1000, 1000, 64, false, strided, 37, 1, f32);
  CheckSparse(1, 16, 777, 777, 128, false, fixed, 50, 3, f32);
  CheckSparse(1, 16, 500, 500, 64, true, strided, 512, 1, f32);
  CheckSparse(1, 16, 2048, 2048, 64, true, strided, 64, 1, bf16);
  CheckSparse(1, 16, 2048, 2048, 128, false, fixed, 64, 4, bf16);
  {
    std::mt19937_64 rng(28);
    for (int i = 0; i < 12; ++i) {
      const bool causal = i % 3 != 0;
      const int64_t lk = 1 + static_cast<int64_t>(rng() % 3000);
      const int64_t lq = causal ? 1 + static_cast<int64_t>(rng() % lk) : lk;
      const int64_t l = 1 + static_cast<int64_t>(rng() % 300);
      CheckSparse(1 + static_cast<int64_t>(rng() % 2), 4, lq, lk, i % 4 < 2 ? 64 : 128, causal,
                  i % 2 ? fixed : strided, l, 1 + static_cast<int64_t>(rng() % l), f32);
    }
  }
  // Linformer through cuBLAS: H 16, d 64, k 256.
  CheckLinformer(2, 4096, 64, 256);
  CheckLinformer(1, quick ? 8192 : 32768, 64, 256);
  // RWKV's WKV: width 768 (rwkv-169m) and 2560 (rwkv-3b); decode as seqlen 1 of 64 sessions.
  CheckWkv(4, quick ? 256 : 1024, 768);
  CheckWkv(1, quick ? 512 : 4096, 2560);
  CheckWkv(64, 1, 768);

  PrintTable();
  const int failed = static_cast<int>(
      std::count_if(g_rows.begin(), g_rows.end(), [](const Row& r) { return !r.ok; }));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\ngpu_check: %zu cases, %d failed, %.0f s\n", g_rows.size(), failed, seconds);
  return failed == 0 ? 0 : 1;
}
