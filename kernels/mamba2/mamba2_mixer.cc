#include "kernels/mamba2/mamba2_mixer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/linear.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/mamba/causal_conv1d_cpu.h"
#include "kernels/mamba/conv_ssm_mixer.h"
#include "kernels/mamba2/gated_rms_norm_cpu.h"
#include "kernels/mamba2/ssd_scan_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/mamba/mamba_cuda_torch.h"
#include "kernels/mamba2/mamba2_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

class Mamba2Mixer final : public ConvSsmMixer {
 public:
  Mamba2Mixer(const MixerConfig& config, const WeightMap& w)
      : ConvSsmMixer("mamba2",
                     {config.d_inner() + 2 * config.ssm_groups * config.d_state, config.d_conv},
                     {config.ssm_heads, config.ssm_head_dim(), config.d_state}),
        config_(config),
        d_inner_(config.d_inner()),
        heads_(config.ssm_heads),
        head_dim_(config.ssm_head_dim()),
        group_width_(config.ssm_groups * config.d_state),
        conv_dim_(config.d_inner() + 2 * config.ssm_groups * config.d_state),
        in_proj_(w.at("in_proj.weight"), config.weight_format),
        conv_weight_(w.at("conv1d.weight").view({conv_dim_, config.d_conv}).contiguous()),
        conv_weight_t_(conv_weight_.t().contiguous()),
        conv_bias_(w.at("conv1d.bias")),
        dt_bias_(w.at("dt_bias")),
        a_((-at::exp(w.at("A_log"))).contiguous()),
        d_skip_(w.at("D")),
        norm_weight_(config.ssm_norm == MixerConfig::SsmNorm::kGateOnly ? at::Tensor()
                                                                        : w.at("norm.weight")),
        out_proj_(w.at("out_proj.weight"), config.weight_format) {}

  const MixerConfig& config() const override { return config_; }

 private:
  at::Device device() const override { return in_proj_.device(); }

  at::Tensor Forward(const at::Tensor& x, MixerState* state, const RowStates* rows) const override {
    if (x.is_cuda()) return ForwardCuda(x, state);
    const int64_t batch = x.size(0), length = x.size(1);
    at::Tensor zxbcdt = in_proj_(x);  // (B, L, d_inner + conv_dim + H)
    const int64_t row = zxbcdt.size(2);
    at::Tensor xbc = at::empty({batch, length, conv_dim_}, x.options());
    mamba::CausalConv1dParams conv;
    conv.batch = batch;
    conv.seqlen = length;
    conv.dim = conv_dim_;
    conv.width = config_.d_conv;
    conv.in = zxbcdt.data_ptr<float>() + d_inner_;
    conv.in_batch_stride = length * row;
    conv.in_seq_stride = row;
    conv.weight_t = conv_weight_t_.data_ptr<float>();
    conv.bias = conv_bias_.data_ptr<float>();
    conv.state = rows ? nullptr : state->tensors[0].data_ptr<float>();
    conv.row_states = rows ? rows->conv : nullptr;
    conv.out = xbc.data_ptr<float>();

    at::Tensor y = at::empty({batch, length, d_inner_}, x.options());
    mamba2::SsdScanParams scan;
    scan.batch = batch;
    scan.seqlen = length;
    scan.heads = heads_;
    scan.head_dim = head_dim_;
    scan.groups = config_.ssm_groups;
    scan.dstate = config_.d_state;
    scan.chunk = config_.ssm_chunk_size;
    scan.x = xbc.data_ptr<float>();
    scan.x_batch_stride = length * conv_dim_;
    scan.x_seq_stride = conv_dim_;
    scan.B = scan.x + d_inner_;
    scan.C = scan.B + group_width_;
    scan.bc_batch_stride = scan.x_batch_stride;
    scan.bc_seq_stride = conv_dim_;
    scan.dt = zxbcdt.data_ptr<float>() + d_inner_ + conv_dim_;
    scan.dt_batch_stride = length * row;
    scan.dt_seq_stride = row;
    scan.dt_bias = dt_bias_.data_ptr<float>();
    scan.dt_min = static_cast<float>(config_.dt_min);
    scan.dt_max = static_cast<float>(config_.dt_max);
    scan.A = a_.data_ptr<float>();
    scan.D = d_skip_.data_ptr<float>();
    scan.out = y.data_ptr<float>();
    scan.state = rows ? nullptr : state->tensors[1].data_ptr<float>();
    scan.row_states = rows ? rows->ssm : nullptr;

    mamba2::GatedRmsNormParams norm;
    norm.rows = batch * length;
    norm.dim = d_inner_;
    norm.groups = config_.ssm_groups;
    norm.y = y.data_ptr<float>();
    norm.z = zxbcdt.data_ptr<float>();
    norm.z_row_stride = row;
    norm.weight = norm_weight_.defined() ? norm_weight_.data_ptr<float>() : nullptr;
    norm.eps = static_cast<float>(config_.norm_epsilon);
    norm.out = y.data_ptr<float>();
    norm.mode = config_.ssm_norm;
    if (length == 1 && batch > 1) {
      // A decode step of several rows: each row's conv, scan and norm in one task, one parallel
      // region instead of three (the kernels' own regions run inline inside it), the row's xBC
      // and y still in cache from one to the next. A row's bits are those it gets alone. 24
      // layers x 16 rows of mamba2-130m, 2 threads: 12.8% of a step's samples were libgomp's
      // barriers with three regions.
      at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) StepRow(conv, scan, norm, b);
      });
    } else {
      mamba::CausalConv1dCpu(conv);
      mamba2::SsdScanCpu(scan);
      mamba2::GatedRmsNormCpu(norm);
    }
    if (state != nullptr) state->position += length;
    return out_proj_(y);
  }

  // Row b of a one-token step: the three kernels' params narrowed to that row.
  void StepRow(mamba::CausalConv1dParams conv, mamba2::SsdScanParams scan,
               mamba2::GatedRmsNormParams norm, int64_t b) const {
    conv.batch = 1;
    conv.in += b * conv.in_batch_stride;
    conv.out += b * conv_dim_;
    if (conv.row_states != nullptr) {
      conv.row_states += b;
    } else {
      conv.state += b * conv_dim_ * config_.d_conv;
    }
    scan.batch = 1;
    scan.x += b * scan.x_batch_stride;
    scan.B += b * scan.bc_batch_stride;
    scan.C += b * scan.bc_batch_stride;
    scan.dt += b * scan.dt_batch_stride;
    scan.out += b * d_inner_;
    if (scan.row_states != nullptr) {
      scan.row_states += b;
    } else {
      scan.state += b * d_inner_ * config_.d_state;
    }
    norm.rows = 1;
    norm.y += b * d_inner_;
    norm.z += b * norm.z_row_stride;
    norm.out += b * d_inner_;
    mamba::CausalConv1dCpu(conv);
    mamba2::SsdScanCpu(scan);
    mamba2::GatedRmsNormCpu(norm);
  }

  // The same on a GPU (ssd_scan_cuda.h, mamba's conv kernel), the gated norm in ATen ops; a
  // batch of sessions' steps comes gathered into one state (Mixer::StepBatch).
  at::Tensor ForwardCuda(const at::Tensor& x, MixerState* state) const {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    const int64_t batch = x.size(0), length = x.size(1);
    at::Tensor zxbcdt = in_proj_(x);
    at::Tensor xbc = mamba::CausalConv1dCuda(zxbcdt.narrow(2, d_inner_, conv_dim_), conv_weight_,
                                             conv_bias_, state->tensors[0], /*silu=*/true);
    at::Tensor y =
        mamba2::SsdScanCuda(xbc.contiguous(), zxbcdt.narrow(2, d_inner_ + conv_dim_, heads_),
                            heads_, config_.ssm_groups, config_.d_state, dt_bias_, a_, d_skip_,
                            config_.dt_min, config_.dt_max, state->tensors[1]);
    at::Tensor z = zxbcdt.narrow(2, 0, d_inner_);
    at::Tensor gate = z * at::sigmoid(z);
    state->position += length;
    using Mode = MixerConfig::SsmNorm;
    if (config_.ssm_norm == Mode::kGateOnly) return out_proj_(y * gate);
    const bool gate_first = config_.ssm_norm == Mode::kGateThenNorm;
    at::Tensor v = (gate_first ? y * gate : y)
                       .reshape({batch, length, config_.ssm_groups, d_inner_ / config_.ssm_groups});
    v = (v * at::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_epsilon))
            .view({batch, length, d_inner_}) *
        norm_weight_;
    return out_proj_(gate_first ? v : v * gate);
#else
    (void)state;
    TORCH_CHECK(false, "mamba2: a CUDA tensor ", x.sizes(),
                " reached a build without CUDA kernels");
#endif
  }

  const MixerConfig config_;
  const int64_t d_inner_, heads_, head_dim_, group_width_, conv_dim_;
  const LinearWeight in_proj_;
  // conv_weight_ (conv_dim, d_conv) for the CUDA kernel, conv_weight_t_ (d_conv, conv_dim) for
  // the CPU one; a_ = -exp(A_log) (H).
  const at::Tensor conv_weight_, conv_weight_t_, conv_bias_, dt_bias_, a_, d_skip_, norm_weight_;
  const LinearWeight out_proj_;
};

}  // namespace

std::vector<WeightSpec> ExpectedMamba2Weights(const MixerConfig& c) {
  const int64_t d_inner = c.d_inner(), h = c.ssm_heads;
  const int64_t conv_dim = d_inner + 2 * c.ssm_groups * c.d_state;
  std::vector<WeightSpec> specs = {{"in_proj.weight", {d_inner + conv_dim + h, c.d_model}},
                                   {"conv1d.weight", {conv_dim, 1, c.d_conv}},
                                   {"conv1d.bias", {conv_dim}},
                                   {"dt_bias", {h}},
                                   {"A_log", {h}},
                                   {"D", {h}}};
  if (c.ssm_norm != MixerConfig::SsmNorm::kGateOnly) specs.push_back({"norm.weight", {d_inner}});
  specs.push_back({"out_proj.weight", {c.d_model, d_inner}});
  return specs;
}

// mamba_ssm's Mamba2 initialisation: dt log-uniform in [1e-3, 1e-1] (through softplus's
// inverse), A uniform in [1, 16], D = 1; the norm's weight drawn near 1 so that tests see it.
WeightMap RandomMamba2Weights(const MixerConfig& c, at::Generator& gen) {
  const int64_t d_inner = c.d_inner(), h = c.ssm_heads;
  const int64_t conv_dim = d_inner + 2 * c.ssm_groups * c.d_state;
  auto uniform = [&](std::vector<int64_t> shape, double lo, double hi) {
    return at::empty(shape, at::kFloat).uniform_(lo, hi, gen);
  };
  const double in_bound = 1.0 / std::sqrt(c.d_model), conv_bound = 1.0 / std::sqrt(c.d_conv);
  WeightMap w;
  w["in_proj.weight"] = uniform({d_inner + conv_dim + h, c.d_model}, -in_bound, in_bound);
  w["conv1d.weight"] = uniform({conv_dim, 1, c.d_conv}, -conv_bound, conv_bound);
  w["conv1d.bias"] = uniform({conv_dim}, -conv_bound, conv_bound);
  at::Tensor dt = at::exp(uniform({h}, 0, 1) * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3))
                      .clamp_min(1e-4);
  w["dt_bias"] = dt + at::log(-at::expm1(-dt));
  w["A_log"] = at::log(uniform({h}, 1, 16));
  w["D"] = uniform({h}, 0.5, 1.5);
  if (c.ssm_norm != MixerConfig::SsmNorm::kGateOnly) {
    w["norm.weight"] = uniform({d_inner}, 0.5, 1.5);
  }
  w["out_proj.weight"] =
      uniform({c.d_model, d_inner}, -1.0 / std::sqrt(d_inner), 1.0 / std::sqrt(d_inner));
  return w;
}

std::unique_ptr<Mixer> CreateMamba2Mixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<Mamba2Mixer>(config, weights);
}

}  // namespace attnserve::kernels
