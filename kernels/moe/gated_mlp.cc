#include "kernels/moe/gated_mlp.h"

#include <ATen/ATen.h>

#include <cmath>

namespace attnserve::kernels {

MlpActivation ParseMlpActivation(const std::string& hidden_act, bool* known) {
  if (known != nullptr) *known = true;
  if (hidden_act.empty() || hidden_act == "silu") return MlpActivation::kSilu;
  if (hidden_act == "gelu_pytorch_tanh") return MlpActivation::kGeluTanh;
  if (hidden_act == "gelu") return MlpActivation::kGelu;
  if (hidden_act == "relu2") return MlpActivation::kRelu2;
  if (known != nullptr) *known = false;
  return MlpActivation::kSilu;
}

void AddRandomGatedMlpWeights(const std::string& prefix, int64_t d_model, int64_t d_ff,
                              at::Generator& gen, WeightMap* w, bool gated) {
  const double in_std = 1.0 / std::sqrt(static_cast<double>(d_model));
  if (gated) (*w)[prefix + "gate_proj.weight"] = at::normal(0.0, in_std, {d_ff, d_model}, gen);
  (*w)[prefix + "up_proj.weight"] = at::normal(0.0, in_std, {d_ff, d_model}, gen);
  (*w)[prefix + "down_proj.weight"] =
      at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(d_ff)), {d_model, d_ff}, gen);
}

GatedMlp::GatedMlp(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down_weight,
                   WeightFormat format, MlpActivation activation, const at::Tensor& gate_bias,
                   const at::Tensor& up_bias, const at::Tensor& down_b)
    : gate_up(gate.defined() ? at::cat({gate, up}, 0) : up, format),
      down(down_weight, format),
      act(activation) {
  if (gate_bias.defined()) gate_up_bias = at::cat({gate_bias, up_bias}, 0).contiguous();
  if (!gate.defined() && up_bias.defined()) gate_up_bias = up_bias.contiguous();
  if (down_b.defined()) down_bias = down_b.contiguous();
}

namespace {

// act(t) for t (..., width); a row's bits do not depend on the rows given with it.
at::Tensor Activate(const at::Tensor& t, MlpActivation act) {
  switch (act) {
    case MlpActivation::kSilu:
      return at::silu(t);
    case MlpActivation::kRelu2:
      return at::relu(t).square();  // exact element by element
    case MlpActivation::kGelu:
    case MlpActivation::kGeluTanh:
      break;
  }
  // ATen's vectorised GeLU and its scalar tail round differently, and which elements fall in
  // the tail depends on the rows given together: one row at a time keeps a row's bits its own.
  const int64_t width = t.size(-1);
  const at::Tensor rows = t.reshape({-1, width});
  at::Tensor out = at::empty(rows.sizes(), rows.options());
  const char* approximate = act == MlpActivation::kGeluTanh ? "tanh" : "none";
  for (int64_t r = 0; r < rows.size(0); ++r) {
    at::Tensor out_row = out.select(0, r);
    at::gelu_out(out_row, rows.select(0, r), approximate);
  }
  return out.view(t.sizes());
}

}  // namespace

at::Tensor GatedMlp::operator()(const at::Tensor& x) const {
  at::Tensor gu = gate_up(x);
  if (gate_up_bias.defined()) gu.add_(gate_up_bias);
  if (gate_up_adapter.defined()) gate_up_adapter.AddTo(x, gu);
  at::Tensor y;
  if (!gated()) {
    y = down(Activate(gu, act));
  } else {
    const int64_t width = d_ff();
    y = down(Activate(gu.narrow(-1, 0, width), act) * gu.narrow(-1, width, width));
  }
  if (down_bias.defined()) y.add_(down_bias);
  return y;
}

}  // namespace attnserve::kernels
