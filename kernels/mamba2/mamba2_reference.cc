#include "kernels/mamba2/mamba2_reference.h"

#include <ATen/ATen.h>

namespace attnserve::kernels::mamba2 {

at::Tensor Mamba2Reference(const MixerConfig& c, const WeightMap& weights, const at::Tensor& x) {
  auto w = [&](const char* name) { return weights.at(name).to(at::kDouble); };
  const int64_t batch = x.size(0), len = x.size(1), d_inner = c.d_inner();
  const int64_t heads = c.ssm_heads, p = c.ssm_head_dim(), n = c.d_state, groups = c.ssm_groups;
  const int64_t conv_dim = d_inner + 2 * groups * n, k_width = c.d_conv;
  at::Tensor proj = at::matmul(x.to(at::kDouble), w("in_proj.weight").t());
  at::Tensor z = proj.narrow(2, 0, d_inner);
  at::Tensor xbc_in = proj.narrow(2, d_inner, conv_dim);
  at::Tensor dt_in = proj.narrow(2, d_inner + conv_dim, heads);

  // Depthwise causal convolution, zero history, then SiLU.
  at::Tensor conv_w = w("conv1d.weight").view({conv_dim, k_width});
  at::Tensor xbc = w("conv1d.bias").expand({batch, len, conv_dim}).clone();
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t k = 0; k < k_width; ++k) {
      const int64_t j = t - (k_width - 1) + k;
      if (j >= 0) xbc.select(1, t) += conv_w.select(1, k) * xbc_in.select(1, j);
    }
  }
  xbc = xbc * at::sigmoid(xbc);
  at::Tensor xs = xbc.narrow(2, 0, d_inner).reshape({batch, len, heads, p});
  at::Tensor b_mat = xbc.narrow(2, d_inner, groups * n).reshape({batch, len, groups, n});
  at::Tensor c_mat =
      xbc.narrow(2, d_inner + groups * n, groups * n).reshape({batch, len, groups, n});
  // Group g's B and C serve heads [g·H/G, (g+1)·H/G).
  b_mat = b_mat.repeat_interleave(heads / groups, 2);
  c_mat = c_mat.repeat_interleave(heads / groups, 2);

  at::Tensor dt = dt_in + w("dt_bias");
  dt = at::where(dt > 20, dt, at::log1p(at::exp(dt)));  // softplus, torch's threshold
  dt = dt.clamp(c.dt_min, c.dt_max);
  at::Tensor a = -at::exp(w("A_log"));  // (H)

  at::Tensor s = at::zeros({batch, heads, p, n}, at::kDouble);
  at::Tensor y = at::empty({batch, len, heads, p}, at::kDouble);
  for (int64_t t = 0; t < len; ++t) {
    at::Tensor dt_t = dt.select(1, t);  // (B, H)
    at::Tensor decay = at::exp(dt_t * a).view({batch, heads, 1, 1});
    at::Tensor x_t = xs.select(1, t);  // (B, H, P)
    s = decay * s + (dt_t.unsqueeze(-1) * x_t).unsqueeze(-1) * b_mat.select(1, t).unsqueeze(2);
    y.select(1, t).copy_((s * c_mat.select(1, t).unsqueeze(2)).sum(-1));
  }
  y = y + xs * w("D").view({1, 1, heads, 1});
  y = y.reshape({batch, len, d_inner});

  // The gate, and the RMSNorm per group before or after it, or none.
  using Mode = MixerConfig::SsmNorm;
  const at::Tensor gate = z * at::sigmoid(z);
  if (c.ssm_norm == Mode::kGateOnly) return at::matmul(y * gate, w("out_proj.weight").t());
  const bool gate_first = c.ssm_norm == Mode::kGateThenNorm;
  at::Tensor v = (gate_first ? y * gate : y).reshape({batch, len, groups, d_inner / groups});
  v = v / at::sqrt(v.pow(2).mean(-1, /*keepdim=*/true) + c.norm_epsilon);
  v = v.reshape({batch, len, d_inner}) * w("norm.weight");
  if (!gate_first) v = v * gate;
  return at::matmul(v, w("out_proj.weight").t());
}

}  // namespace attnserve::kernels::mamba2
