#include "kernels/mamba/mamba_mixer.h"

#include <ATen/ATen.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/linear.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/mamba/causal_conv1d_cpu.h"
#include "kernels/mamba/conv_ssm_mixer.h"
#include "kernels/mamba/selective_scan_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/mamba/mamba_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

// Runs where its weights are: on the CPU kernels (causal_conv1d_cpu, selective_scan_cpu), or,
// for weights on a CUDA device, on the CUDA kernels (mamba_cuda_torch.h) when this build has
// them. Inputs and states must be on the weights' device.
class MambaMixer final : public ConvSsmMixer {
 public:
  MambaMixer(const MixerConfig& config, const WeightMap& w)
      : ConvSsmMixer("mamba", {config.d_inner(), config.d_conv},
                     {config.d_inner(), config.d_state}),
        config_(config),
        d_inner_(config.d_inner()),
        dt_rank_(config.resolved_dt_rank()),
        heads_(config.mamba_heads),
        head_dim_(d_inner_ / heads_),
        in_proj_(InProj(config, w), config.weight_format),
        conv_weight_(w.at("conv1d.weight").view({d_inner_, config.d_conv}).contiguous()),
        conv_weight_t_(conv_weight_.t().contiguous()),
        conv_bias_(w.at("conv1d.bias")),
        dt_proj_bias_(w.at(heads_ > 1 ? "dt_proj_bias" : "dt_proj.bias").reshape({-1})),
        a_((-at::exp(w.at("A_log"))).reshape({d_inner_, config.d_state}).contiguous()),
        a_t_(a_.t().contiguous()),
        d_skip_(w.at("D").reshape({-1})),
        out_proj_(w.at("out_proj.weight"), config.weight_format) {
    // Each head's x_proj and dt_proj (one head: the whole matrices), and its A transposed.
    for (int64_t h = 0; h < heads_; ++h) {
      const bool one = heads_ == 1;
      x_proj_.emplace_back(one ? w.at("x_proj.weight") : w.at("x_proj_weight")[h],
                           config.weight_format);
      dt_proj_weight_.emplace_back(one ? w.at("dt_proj.weight") : w.at("dt_proj_weight")[h],
                                   config.weight_format);
      a_t_heads_.push_back(one ? a_t_ : a_t_.narrow(1, h * head_dim_, head_dim_).contiguous());
    }
    if (config.bcdt_norm_weights) {
      bcdt_norm_weight_ = at::cat({w.at("dt_layernorm.weight"), w.at("b_layernorm.weight"),
                                   w.at("c_layernorm.weight")})
                              .contiguous();
    }
  }

  const MixerConfig& config() const override { return config_; }

 private:
  at::Device device() const override { return in_proj_.device(); }

  at::Tensor Forward(const at::Tensor& x, MixerState* state, const RowStates* rows) const override {
    static const at::Tensor kNone;
    const int64_t n_state = config_.d_state;
    at::Tensor xz = in_proj_(x);  // (B, L, 2·d_inner): x half, then z half
    at::Tensor x_in = xz.narrow(2, 0, d_inner_);
    at::Tensor z = xz.narrow(2, d_inner_, d_inner_);
    at::Tensor u = ConvSilu(x_in, state ? state->tensors[0] : kNone, rows ? rows->conv : nullptr);
    TORCH_CHECK(heads_ == 1 || !u.is_cuda(), "mamba: multi-head (Zamba) layers run on the CPU");
    std::vector<at::Tensor> ys;
    for (int64_t h = 0; h < heads_; ++h) {
      const at::Tensor u_h = heads_ == 1 ? u : u.narrow(2, h * head_dim_, head_dim_).contiguous();
      at::Tensor x_dbl = x_proj_[h](u_h);  // (B, L, dt_rank + 2·d_state)
      if (config_.bcdt_rms_epsilon > 0) x_dbl = NormDtBC(x_dbl);
      // dt_proj without its bias: the scan adds the bias and applies softplus on the fly.
      at::Tensor delta = dt_proj_weight_[h](x_dbl.narrow(2, 0, dt_rank_));
      at::Tensor b_mat = x_dbl.narrow(2, dt_rank_, n_state);
      at::Tensor c_mat = x_dbl.narrow(2, dt_rank_ + n_state, n_state);
      ys.push_back(Scan(h, u, delta, z, b_mat, c_mat, state ? state->tensors[1] : kNone,
                        rows ? rows->ssm : nullptr));
    }
    if (state != nullptr) state->position += x.size(1);
    return out_proj_(heads_ == 1 ? ys[0] : at::cat(ys, 2));
  }

  // in_proj as [x | z] rows: Zamba's interleaved rows (2i: x, 2i + 1: z) regrouped.
  static at::Tensor InProj(const MixerConfig& c, const WeightMap& w) {
    const at::Tensor& in_proj = w.at("in_proj.weight");
    if (c.mamba_heads == 1) return in_proj;
    return in_proj.view({c.d_inner(), 2, c.d_model}).transpose(0, 1).reshape({-1, c.d_model});
  }

  // Falcon-Mamba: dt, B and C each divided by its root mean square (no weight), as
  // transformers' rms_forward: x · rsqrt(mean(x²) + ε), in float32. Jamba: then times the
  // norms' weights (JambaRMSNorm's dt_layernorm, b_layernorm, c_layernorm). On the CPU in place,
  // one pass a row (a decode step's rows are a few: six ATen operations a section cost more
  // than the arithmetic); each row's result is its own.
  at::Tensor NormDtBC(at::Tensor x_dbl) const {
    const double eps = config_.bcdt_rms_epsilon;
    const int64_t n = config_.d_state, width = dt_rank_ + 2 * n;
    if (!x_dbl.is_cpu()) {
      const auto rms = [eps](const at::Tensor& t) {
        return t * at::rsqrt(t.pow(2).mean(-1, /*keepdim=*/true) + eps);
      };
      at::Tensor normed =
          at::cat({rms(x_dbl.narrow(2, 0, dt_rank_)), rms(x_dbl.narrow(2, dt_rank_, n)),
                   rms(x_dbl.narrow(2, dt_rank_ + n, n))},
                  2);
      if (bcdt_norm_weight_.defined()) normed.mul_(bcdt_norm_weight_);
      return normed;
    }
    x_dbl = x_dbl.contiguous();
    float* data = x_dbl.data_ptr<float>();
    const float* weight =
        bcdt_norm_weight_.defined() ? bcdt_norm_weight_.data_ptr<float>() : nullptr;
    const int64_t begins[3] = {0, dt_rank_, dt_rank_ + n}, sizes[3] = {dt_rank_, n, n};
    for (int64_t row = 0; row < x_dbl.numel() / width; ++row) {
      float* x = data + row * width;
      for (int part = 0; part < 3; ++part) {
        float* seg = x + begins[part];
        double squares = 0;
        for (int64_t i = 0; i < sizes[part]; ++i) squares += double{seg[i]} * seg[i];
        const float scale = static_cast<float>(1.0 / std::sqrt(squares / sizes[part] + eps));
        for (int64_t i = 0; i < sizes[part]; ++i) {
          seg[i] *= scale;
          if (weight != nullptr) seg[i] *= weight[begins[part] + i];
        }
      }
    }
    return x_dbl;
  }

  // silu(causal_conv1d(x_in)) continuing from conv_state, which is updated in place.
  // With `row_states`, row b's state is row_states[b] instead (CPU only).
  at::Tensor ConvSilu(const at::Tensor& x_in, const at::Tensor& conv_state,
                      float* const* row_states) const {
    if (x_in.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
      return mamba::CausalConv1dCuda(x_in, conv_weight_, conv_bias_, conv_state, /*silu=*/true);
#else
      TORCH_CHECK(false, "mamba: a CUDA tensor reached a build without CUDA kernels");
#endif
    }
    at::Tensor u = at::empty({x_in.size(0), x_in.size(1), d_inner_}, x_in.options());
    mamba::CausalConv1dParams conv;
    conv.batch = x_in.size(0);
    conv.seqlen = x_in.size(1);
    conv.dim = d_inner_;
    conv.width = config_.d_conv;
    conv.in = x_in.data_ptr<float>();
    conv.in_batch_stride = x_in.stride(0);
    conv.in_seq_stride = x_in.stride(1);
    conv.weight_t = conv_weight_t_.data_ptr<float>();
    conv.bias = conv_bias_.data_ptr<float>();
    conv.state = row_states ? nullptr : conv_state.data_ptr<float>();
    conv.row_states = row_states;
    conv.out = u.data_ptr<float>();
    mamba::CausalConv1dCpu(conv);
    return u;
  }

  // The selective scan of head `head`'s channels (all of them with one head) with
  // softplus(delta + bias), the D skip and the silu(z) gate, continuing from ssm_state (or
  // row_states, as in ConvSilu), which is updated in place. u and z hold every channel; delta
  // the head's; b_mat and c_mat are views into one x_dbl row. Returns (B, L, head's channels).
  at::Tensor Scan(int64_t head, const at::Tensor& u, const at::Tensor& delta, const at::Tensor& z,
                  const at::Tensor& b_mat, const at::Tensor& c_mat, const at::Tensor& ssm_state,
                  float* const* row_states) const {
    if (u.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
      return mamba::SelectiveScanCuda(u, delta, dt_proj_bias_, /*delta_softplus=*/true, z, b_mat,
                                      c_mat, a_, d_skip_, ssm_state);
#else
      TORCH_CHECK(false, "mamba: a CUDA tensor reached a build without CUDA kernels");
#endif
    }
    const int64_t first = head * head_dim_, n_state = config_.d_state;
    at::Tensor y = at::empty({u.size(0), u.size(1), head_dim_}, u.options());
    // A head of several: its rows of each batch row's state, as row states.
    std::vector<float*> head_states;
    if (heads_ > 1) {
      for (int64_t b = 0; b < u.size(0); ++b) {
        float* whole =
            row_states ? row_states[b] : ssm_state.data_ptr<float>() + b * d_inner_ * n_state;
        head_states.push_back(whole + first * n_state);
      }
      row_states = head_states.data();
    }
    mamba::SelectiveScanParams scan;
    scan.batch = u.size(0);
    scan.seqlen = u.size(1);
    scan.dim = head_dim_;
    scan.dstate = n_state;
    scan.u = u.data_ptr<float>() + first;
    scan.u_batch_stride = u.stride(0);
    scan.u_seq_stride = u.stride(1);
    scan.delta = delta.data_ptr<float>();
    scan.delta_batch_stride = delta.stride(0);
    scan.delta_seq_stride = delta.stride(1);
    scan.delta_bias = dt_proj_bias_.data_ptr<float>() + first;
    scan.delta_softplus = true;
    scan.z = z.data_ptr<float>() + first;
    scan.z_batch_stride = z.stride(0);
    scan.z_seq_stride = z.stride(1);
    scan.B = b_mat.data_ptr<float>();
    scan.C = c_mat.data_ptr<float>();
    // B and C are narrowed from the same rows, so they share the row strides.
    scan.bc_batch_stride = b_mat.stride(0);
    scan.bc_seq_stride = b_mat.stride(1);
    scan.A_t = a_t_heads_[head].data_ptr<float>();
    scan.A = a_.data_ptr<float>() + first * n_state;
    scan.D = d_skip_.data_ptr<float>() + first;
    scan.out = y.data_ptr<float>();
    scan.state = row_states ? nullptr : ssm_state.data_ptr<float>();
    scan.row_states = row_states;
    mamba::SelectiveScanCpu(scan);
    return y;
  }

  const MixerConfig config_;
  const int64_t d_inner_, dt_rank_, heads_, head_dim_;
  // conv_weight_ (d_inner, d_conv) for the CUDA kernel, conv_weight_t_ (d_conv, d_inner) for
  // the CPU one; a_ = -exp(A_log) (d_inner, d_state) and its transpose likewise.
  const LinearWeight in_proj_;
  const at::Tensor conv_weight_, conv_weight_t_, conv_bias_;
  const at::Tensor dt_proj_bias_, a_, a_t_, d_skip_;  // every head's, flat over d_inner
  const LinearWeight out_proj_;
  // Per head (one entry with one head): x_proj, dt_proj, and A transposed (d_state, P).
  std::vector<LinearWeight> x_proj_, dt_proj_weight_;
  std::vector<at::Tensor> a_t_heads_;
  at::Tensor bcdt_norm_weight_;  // (dt_rank + 2·d_state): Jamba's norm weights; or undefined
};

}  // namespace

std::vector<WeightSpec> ExpectedMambaWeights(const MixerConfig& c) {
  const int64_t d_inner = c.d_inner(), r = c.resolved_dt_rank();
  if (c.mamba_heads > 1) {  // Zamba's multi-head layout
    const int64_t h = c.mamba_heads, p = d_inner / h;
    return {{"in_proj.weight", {2 * d_inner, c.d_model}},
            {"conv1d.weight", {d_inner, 1, c.d_conv}},
            {"conv1d.bias", {d_inner}},
            {"x_proj_weight", {h, r + 2 * c.d_state, p}},
            {"dt_proj_weight", {h, p, r}},
            {"dt_proj_bias", {h, p}},
            {"A_log", {h, p, c.d_state}},
            {"D", {h, p}},
            {"out_proj.weight", {c.d_model, d_inner}}};
  }
  std::vector<WeightSpec> specs = {{"in_proj.weight", {2 * d_inner, c.d_model}},
                                   {"conv1d.weight", {d_inner, 1, c.d_conv}},
                                   {"conv1d.bias", {d_inner}},
                                   {"x_proj.weight", {r + 2 * c.d_state, d_inner}},
                                   {"dt_proj.weight", {d_inner, r}},
                                   {"dt_proj.bias", {d_inner}},
                                   {"A_log", {d_inner, c.d_state}},
                                   {"D", {d_inner}},
                                   {"out_proj.weight", {c.d_model, d_inner}}};
  if (c.bcdt_norm_weights) {
    specs.push_back({"dt_layernorm.weight", {r}});
    specs.push_back({"b_layernorm.weight", {c.d_state}});
    specs.push_back({"c_layernorm.weight", {c.d_state}});
  }
  return specs;
}

// The initialisation of mamba_ssm's Mamba block: S4D-real A, dt log-uniform in [1e-3, 1e-1].
WeightMap RandomMambaWeights(const MixerConfig& c, at::Generator& gen) {
  const int64_t d_inner = c.d_inner(), r = c.resolved_dt_rank();
  auto uniform = [&](std::vector<int64_t> shape, double bound) {
    return at::empty(shape, at::kFloat).uniform_(-bound, bound, gen);
  };
  WeightMap w;
  w["in_proj.weight"] = uniform({2 * d_inner, c.d_model}, 1.0 / std::sqrt(c.d_model));
  w["conv1d.weight"] = uniform({d_inner, 1, c.d_conv}, 1.0 / std::sqrt(c.d_conv));
  w["conv1d.bias"] = uniform({d_inner}, 1.0 / std::sqrt(c.d_conv));
  w["x_proj.weight"] = uniform({r + 2 * c.d_state, d_inner}, 1.0 / std::sqrt(d_inner));
  w["dt_proj.weight"] = uniform({d_inner, r}, 1.0 / std::sqrt(r));
  at::Tensor dt = at::exp(at::empty({d_inner}, at::kFloat).uniform_(0, 1, gen) *
                              (std::log(0.1) - std::log(1e-3)) +
                          std::log(1e-3))
                      .clamp_min(1e-4);
  w["dt_proj.bias"] = dt + at::log(-at::expm1(-dt));  // inverse softplus
  w["A_log"] = at::log(at::arange(1, c.d_state + 1, at::kFloat)).repeat({d_inner, 1});
  w["D"] = at::ones({d_inner}, at::kFloat);
  w["out_proj.weight"] = uniform({c.d_model, d_inner}, 1.0 / std::sqrt(d_inner));
  if (c.mamba_heads > 1) {  // Zamba's layout of the same draws: each head's slices
    const int64_t h = c.mamba_heads, p = d_inner / h;
    const at::Tensor x_proj = w.at("x_proj.weight");  // (r + 2N, d_inner)
    w["x_proj_weight"] = x_proj.view({-1, h, p}).permute({1, 0, 2}).contiguous();
    w["dt_proj_weight"] = w.at("dt_proj.weight").view({h, p, r}).contiguous();
    w["dt_proj_bias"] = w.at("dt_proj.bias").view({h, p}).contiguous();
    w["A_log"] = w.at("A_log").view({h, p, c.d_state}).contiguous();
    w["D"] = w.at("D").view({h, p}).contiguous();
    for (const char* name : {"x_proj.weight", "dt_proj.weight", "dt_proj.bias"}) w.erase(name);
  }
  if (c.bcdt_norm_weights) {  // around 1, not 1: a test then sees each weight applied
    w["dt_layernorm.weight"] = 1 + uniform({r}, 0.25);
    w["b_layernorm.weight"] = 1 + uniform({c.d_state}, 0.25);
    w["c_layernorm.weight"] = 1 + uniform({c.d_state}, 0.25);
  }
  return w;
}

std::unique_ptr<Mixer> CreateMambaMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<MambaMixer>(config, weights);
}

}  // namespace attnserve::kernels
