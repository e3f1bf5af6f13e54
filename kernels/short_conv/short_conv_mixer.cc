#include "kernels/short_conv/short_conv_mixer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "kernels/common/linear.h"
#include "kernels/mamba/causal_conv1d_cpu.h"
#include "kernels/mamba/conv_ssm_mixer.h"

namespace attnserve::kernels {
namespace {

class ShortConvMixer final : public ConvSsmMixer {
 public:
  ShortConvMixer(const MixerConfig& config, const WeightMap& w)
      : ConvSsmMixer("short_conv", {config.d_model, config.d_conv}, {}),
        config_(config),
        in_proj_(w.at("in_proj.weight"), config.weight_format),
        out_proj_(w.at("out_proj.weight"), config.weight_format),
        conv_weight_(w.at("conv.weight").view({config.d_model, config.d_conv}).contiguous()),
        conv_weight_t_(conv_weight_.t().contiguous()) {
    if (config.conv_bias) {
      in_bias_ = w.at("in_proj.bias");
      conv_bias_ = w.at("conv.bias");
      out_bias_ = w.at("out_proj.bias");
    }
  }

  const MixerConfig& config() const override { return config_; }

 private:
  at::Device device() const override { return out_proj_.device(); }

  at::Tensor Forward(const at::Tensor& x, MixerState* state, const RowStates* rows) const override {
    const int64_t batch = x.size(0), length = x.size(1), d = config_.d_model;
    at::Tensor bcx = in_proj_(x);  // (B, L, 3·D): B, C, x
    if (in_bias_.defined()) bcx.add_(in_bias_);
    const at::Tensor bx = (bcx.narrow(2, 0, d) * bcx.narrow(2, 2 * d, d)).contiguous();
    at::Tensor conv;
    if (x.is_cuda()) {
      conv = ConvAten(bx, state);
    } else {
      conv = at::empty_like(bx);
      mamba::CausalConv1dParams p;
      p.batch = batch;
      p.seqlen = length;
      p.dim = d;
      p.width = config_.d_conv;
      p.in = bx.data_ptr<float>();
      p.in_batch_stride = length * d;
      p.in_seq_stride = d;
      p.weight_t = conv_weight_t_.data_ptr<float>();
      p.bias = conv_bias_.defined() ? conv_bias_.data_ptr<float>() : nullptr;
      p.silu = false;
      p.state = rows ? nullptr : state->tensors[0].data_ptr<float>();
      p.row_states = rows ? rows->conv : nullptr;
      p.out = conv.data_ptr<float>();
      mamba::CausalConv1dCpu(p);
    }
    if (state != nullptr) state->position += length;
    at::Tensor y = out_proj_(bcx.narrow(2, d, d) * conv);
    if (out_bias_.defined()) y.add_(out_bias_);
    return y;
  }

  // The same convolution in ATen's operations (weights on a GPU): the state's K inputs, then
  // the chunk's, convolved; the last K kept.
  at::Tensor ConvAten(const at::Tensor& bx, MixerState* state) const {
    const int64_t length = bx.size(1), k = config_.d_conv;
    const at::Tensor inputs = at::cat({state->tensors[0], bx.transpose(1, 2)}, 2);  // (B, D, K+L)
    const std::vector<int64_t> stride = {1}, padding = {0}, dilation = {1};
    at::Tensor conv = at::conv1d(inputs, conv_weight_.unsqueeze(1),
                                 conv_bias_.defined() ? conv_bias_ : at::Tensor(), stride, padding,
                                 dilation, config_.d_model);  // (B, D, L + 1)  // (B, D, L + 1)
    state->tensors[0].copy_(inputs.narrow(2, length, k));
    return conv.narrow(2, 1, length).transpose(1, 2).contiguous();
  }

  const MixerConfig config_;
  const LinearWeight in_proj_, out_proj_;
  // conv_weight_ (D, K); conv_weight_t_ (K, D) for the CPU kernel.
  const at::Tensor conv_weight_, conv_weight_t_;
  at::Tensor in_bias_, conv_bias_, out_bias_;  // undefined without conv_bias
};

}  // namespace

std::vector<WeightSpec> ExpectedShortConvWeights(const MixerConfig& c) {
  const int64_t d = c.d_model;
  std::vector<WeightSpec> specs = {{"in_proj.weight", {3 * d, d}},
                                   {"conv.weight", {d, 1, c.d_conv}},
                                   {"out_proj.weight", {d, d}}};
  if (c.conv_bias) {
    specs.push_back({"in_proj.bias", {3 * d}});
    specs.push_back({"conv.bias", {d}});
    specs.push_back({"out_proj.bias", {d}});
  }
  return specs;
}

// nn.Linear's and nn.Conv1d's default initialisation: uniform in ±1/sqrt(fan_in).
WeightMap RandomShortConvWeights(const MixerConfig& c, at::Generator& gen) {
  WeightMap w;
  for (const WeightSpec& spec : ExpectedShortConvWeights(c)) {
    const int64_t fan_in =
        spec.name == "conv.weight" || spec.name == "conv.bias" ? c.d_conv : c.d_model;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    w[spec.name] = at::empty(spec.shape, at::kFloat).uniform_(-bound, bound, gen);
  }
  return w;
}

std::unique_ptr<Mixer> CreateShortConvMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<ShortConvMixer>(config, weights);
}

}  // namespace attnserve::kernels
