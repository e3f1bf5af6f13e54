#include "kernels/moe/gated_mlp.h"

#include <ATen/ATen.h>

#include <cmath>

namespace attnserve::kernels {

MlpActivation ParseMlpActivation(const std::string& hidden_act, bool* known) {
  if (known != nullptr) *known = true;
  if (hidden_act.empty() || hidden_act == "silu") return MlpActivation::kSilu;
  if (hidden_act == "gelu_pytorch_tanh") return MlpActivation::kGeluTanh;
  if (hidden_act == "gelu") return MlpActivation::kGelu;
  if (known != nullptr) *known = false;
  return MlpActivation::kSilu;
}

void AddRandomGatedMlpWeights(const std::string& prefix, int64_t d_model, int64_t d_ff,
                              at::Generator& gen, WeightMap* w) {
  const double in_std = 1.0 / std::sqrt(static_cast<double>(d_model));
  (*w)[prefix + "gate_proj.weight"] = at::normal(0.0, in_std, {d_ff, d_model}, gen);
  (*w)[prefix + "up_proj.weight"] = at::normal(0.0, in_std, {d_ff, d_model}, gen);
  (*w)[prefix + "down_proj.weight"] =
      at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(d_ff)), {d_model, d_ff}, gen);
}

GatedMlp::GatedMlp(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down_weight,
                   WeightFormat format, MlpActivation activation, const at::Tensor& gate_bias,
                   const at::Tensor& up_bias, const at::Tensor& down_b)
    : gate_up(at::cat({gate, up}, 0), format), down(down_weight, format), act(activation) {
  if (gate_bias.defined()) gate_up_bias = at::cat({gate_bias, up_bias}, 0).contiguous();
  if (down_b.defined()) down_bias = down_b.contiguous();
}

at::Tensor GatedMlp::operator()(const at::Tensor& x) const {
  at::Tensor gu = gate_up(x);
  if (gate_up_bias.defined()) gu.add_(gate_up_bias);
  if (gate_up_adapter.defined()) gate_up_adapter.AddTo(x, gu);
  const int64_t width = d_ff();
  at::Tensor gate = gu.narrow(-1, 0, width), up = gu.narrow(-1, width, width);
  at::Tensor gated;
  if (act == MlpActivation::kSilu) {
    gated = at::silu(gate);
  } else {
    // ATen's vectorised GeLU and its scalar tail round differently, and which elements fall in
    // the tail depends on the rows given together: one row at a time keeps a row's bits its own.
    const at::Tensor rows = gate.reshape({-1, width});
    gated = at::empty(rows.sizes(), rows.options());
    const char* approximate = act == MlpActivation::kGeluTanh ? "tanh" : "none";
    for (int64_t r = 0; r < rows.size(0); ++r) {
      at::Tensor out_row = gated.select(0, r);
      at::gelu_out(out_row, rows.select(0, r), approximate);
    }
    gated = gated.view(gate.sizes());
  }
  at::Tensor y = down(gated * up);
  if (down_bias.defined()) y.add_(down_bias);
  return y;
}

}  // namespace attnserve::kernels
