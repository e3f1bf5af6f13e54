#include "kernels/moe/gated_mlp.h"

#include <ATen/ATen.h>

namespace attnserve::kernels {

GatedMlp::GatedMlp(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down_weight,
                   WeightFormat format, bool gelu, const at::Tensor& gate_bias,
                   const at::Tensor& up_bias, const at::Tensor& down_b)
    : gate_up(at::cat({gate, up}, 0), format), down(down_weight, format), gelu_tanh(gelu) {
  if (gate_bias.defined()) gate_up_bias = at::cat({gate_bias, up_bias}, 0).contiguous();
  if (down_b.defined()) down_bias = down_b.contiguous();
}

at::Tensor GatedMlp::operator()(const at::Tensor& x) const {
  at::Tensor gu = gate_up(x);
  if (gate_up_bias.defined()) gu.add_(gate_up_bias);
  const int64_t width = d_ff();
  at::Tensor gate = gu.narrow(-1, 0, width), up = gu.narrow(-1, width, width);
  at::Tensor y = down((gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate)) * up);
  if (down_bias.defined()) y.add_(down_bias);
  return y;
}

}  // namespace attnserve::kernels
