#include "kernels/short_conv/short_conv_reference.h"

#include <ATen/ATen.h>

namespace attnserve::kernels::short_conv {

at::Tensor ShortConvReference(const MixerConfig& c, const WeightMap& weights, const at::Tensor& x) {
  auto w = [&](const char* name) { return weights.at(name).to(at::kDouble); };
  const int64_t d = c.d_model, len = x.size(1), k_width = c.d_conv;
  at::Tensor bcx = at::matmul(x.to(at::kDouble), w("in_proj.weight").t());
  if (c.conv_bias) bcx = bcx + w("in_proj.bias");
  const at::Tensor b = bcx.narrow(2, 0, d), gate_c = bcx.narrow(2, d, d),
                   xs = bcx.narrow(2, 2 * d, d);
  const at::Tensor bx = b * xs;
  const at::Tensor kernel = w("conv.weight").view({d, k_width});
  at::Tensor conv = at::zeros_like(bx);
  if (c.conv_bias) conv = conv + w("conv.bias");
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t k = 0; k < k_width; ++k) {
      const int64_t j = t - (k_width - 1) + k;  // tap k reads position j (zero before 0)
      if (j >= 0) conv.select(1, t) += kernel.select(1, k) * bx.select(1, j);
    }
  }
  at::Tensor y = at::matmul(gate_c * conv, w("out_proj.weight").t());
  if (c.conv_bias) y = y + w("out_proj.bias");
  return y;
}

}  // namespace attnserve::kernels::short_conv
