#include "kernels/mamba/mamba_reference.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace attnserve::kernels::mamba {

at::Tensor MambaReference(const MixerConfig& c, const WeightMap& weights, const at::Tensor& x) {
  auto w = [&](const char* name) { return weights.at(name).to(at::kDouble); };
  const int64_t batch = x.size(0), len = x.size(1), d_inner = c.d_inner();
  const int64_t r = c.resolved_dt_rank(), n = c.d_state, k_width = c.d_conv;
  const int64_t heads = std::max<int64_t>(1, c.mamba_heads), head_dim = d_inner / heads;
  at::Tensor xd = x.to(at::kDouble);
  at::Tensor xz = at::matmul(xd, w("in_proj.weight").t());
  at::Tensor xs, z;
  if (heads == 1) {
    xs = xz.narrow(2, 0, d_inner);
    z = xz.narrow(2, d_inner, d_inner);
  } else {  // Zamba: channel 2i is x's i-th, 2i + 1 the gate's
    xs = xz.view({batch, len, d_inner, 2}).select(3, 0);
    z = xz.view({batch, len, d_inner, 2}).select(3, 1);
  }

  // Depthwise causal convolution, zero history: conv[t] = b + Σ_k w[k] x[t - (K-1) + k].
  at::Tensor conv_w = w("conv1d.weight").view({d_inner, k_width});
  at::Tensor u = w("conv1d.bias").expand({batch, len, d_inner}).clone();
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t k = 0; k < k_width; ++k) {
      const int64_t j = t - (k_width - 1) + k;
      if (j >= 0) u.select(1, t) += conv_w.select(1, k) * xs.select(1, j);
    }
  }
  u = u * at::sigmoid(u);

  at::Tensor y = at::empty({batch, len, d_inner}, at::kDouble);
  for (int64_t head = 0; head < heads; ++head) {
    // This head's channels, projections, A and D (Zamba: x_proj_weight (H, r + 2N, P),
    // dt_proj_weight (H, P, r), dt_proj_bias, A_log, D per head; one head: Mamba's).
    const at::Tensor u_h = u.narrow(2, head * head_dim, head_dim);
    at::Tensor x_proj, dt_proj, dt_bias, a_log, d_skip;
    if (heads == 1) {
      x_proj = w("x_proj.weight");
      dt_proj = w("dt_proj.weight");
      dt_bias = w("dt_proj.bias");
      a_log = w("A_log");
      d_skip = w("D");
    } else {
      x_proj = w("x_proj_weight")[head];
      dt_proj = w("dt_proj_weight")[head];
      dt_bias = w("dt_proj_bias")[head];
      a_log = w("A_log")[head];
      d_skip = w("D")[head];
    }
    at::Tensor x_dbl = at::matmul(u_h, x_proj.t());
    if (c.bcdt_rms_epsilon > 0) {  // Falcon-Mamba: dt, B and C each over its root mean square
      const auto rms = [&](const at::Tensor& t) {
        return t / at::sqrt(t.pow(2).mean(-1, /*keepdim=*/true) + c.bcdt_rms_epsilon);
      };
      x_dbl = at::cat(
          {rms(x_dbl.narrow(2, 0, r)), rms(x_dbl.narrow(2, r, n)), rms(x_dbl.narrow(2, r + n, n))},
          2);
      if (c.bcdt_norm_weights) {  // Jamba: the norms' weights
        x_dbl = x_dbl * at::cat({w("dt_layernorm.weight"), w("b_layernorm.weight"),
                                 w("c_layernorm.weight")});
      }
    }
    at::Tensor dt = at::matmul(x_dbl.narrow(2, 0, r), dt_proj.t()) + dt_bias;
    dt = at::log1p(at::exp(dt));  // softplus
    at::Tensor b_mat = x_dbl.narrow(2, r, n), c_mat = x_dbl.narrow(2, r + n, n);
    at::Tensor a = -at::exp(a_log);  // (P, N)
    at::Tensor h = at::zeros({batch, head_dim, n}, at::kDouble);
    at::Tensor y_h = y.narrow(2, head * head_dim, head_dim);
    for (int64_t t = 0; t < len; ++t) {
      at::Tensor dt_t = dt.select(1, t).unsqueeze(-1);  // (B, P, 1)
      h = at::exp(dt_t * a) * h +
          dt_t * b_mat.select(1, t).unsqueeze(1) * u_h.select(1, t).unsqueeze(-1);
      y_h.select(1, t).copy_((h * c_mat.select(1, t).unsqueeze(1)).sum(-1) +
                             u_h.select(1, t) * d_skip);
    }
  }
  y = y * (z * at::sigmoid(z));
  return at::matmul(y, w("out_proj.weight").t());
}

}  // namespace attnserve::kernels::mamba
