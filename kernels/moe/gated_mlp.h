// The gated MLP of a transformer block, down(act(gate(x)) * up(x)) with optional biases: the
// dense MLP of Model's layers and each expert of a mixture-of-experts layer (moe_mlp.h). Built
// without a gate it is the plain MLP down(act(up(x))) (Nemotron-H's experts: relu2).
//
// Shapes: x (..., d_model) float32, contiguous, on the weights' device; the result has x's shape.
// Each product is a LinearWeight (kernels/common/linear.h), so a row's result does not depend on
// the other rows given with it (a decode step's batch, a prefill chunk, an expert's group of
// tokens). Immutable after construction; safe to call from many threads at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/common/linear.h"
#include "kernels/common/low_rank_adapter.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// act of the gate (a config's hidden_act): "silu" (SwiGLU), "gelu_pytorch_tanh" (GeLU's tanh
// approximation), "gelu" (exact, erf), "relu2" (relu(x)², Nemotron-H's).
enum class MlpActivation { kSilu, kGeluTanh, kGelu, kRelu2 };

// hidden_act -> MlpActivation; "" is silu; anything else kSilu with *known false when given.
MlpActivation ParseMlpActivation(const std::string& hidden_act, bool* known = nullptr);

// Random weights of a gated MLP under `prefix` (prefix + "gate_proj.weight", "up_proj.weight",
// "down_proj.weight"; without gate_proj for a plain one), drawn from `gen` in that order: gate
// and up N(0, 1/d_model), down N(0, 1/d_ff).
void AddRandomGatedMlpWeights(const std::string& prefix, int64_t d_model, int64_t d_ff,
                              at::Generator& gen, WeightMap* weights, bool gated = true);

struct GatedMlp {
  LinearWeight gate_up;                // gate_proj and up_proj stacked: (2 · d_ff, d_model); a
                                       // plain MLP's up_proj alone (d_ff, d_model)
  LinearWeight down;                   // (d_model, d_ff)
  at::Tensor gate_up_bias, down_bias;  // (2 · d_ff), (d_model); undefined without biases
  MlpActivation act = MlpActivation::kSilu;
  // Added to gate_up's output (gate rows first) after its bias, or undefined: Zamba2's adapter
  // of one hybrid layer over a shared block's MLP (a copy of a GatedMlp shares its matrices).
  LowRankAdapter gate_up_adapter;

  GatedMlp() = default;
  // From Hugging Face's gate_proj, up_proj and down_proj weights (out, in) and, optionally,
  // their biases (undefined: none), kept as `format` (linear.h). An undefined `gate`: a plain
  // MLP.
  GatedMlp(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down,
           WeightFormat format, MlpActivation act, const at::Tensor& gate_bias = {},
           const at::Tensor& up_bias = {}, const at::Tensor& down_bias = {});

  bool defined() const { return gate_up.defined(); }
  bool gated() const { return gate_up.out_features() == 2 * d_ff(); }
  int64_t d_ff() const { return down.in_features(); }
  // Bytes of its matrices as kept.
  int64_t Bytes() const { return gate_up.Bytes() + down.Bytes(); }
  at::Tensor operator()(const at::Tensor& x) const;
};

}  // namespace attnserve::kernels
