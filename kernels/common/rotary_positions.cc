#include "kernels/common/rotary_positions.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace attnserve::kernels {
namespace {

constexpr const char* kTypes[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3"};

// transformers computes the frequencies in float32 tensors: base ** (arange(0, dim, 2) / dim).
std::vector<float> BasePowers(float base, int64_t dim) {
  std::vector<float> powers(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    powers[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  }
  return powers;
}

std::vector<float> Inverse(const std::vector<float>& powers) {
  std::vector<float> inv(powers.size());
  for (size_t i = 0; i < powers.size(); ++i) inv[i] = 1.0f / powers[i];
  return inv;
}

}  // namespace

absl::Status ValidateRotaryConfig(const RotaryConfig& c, int64_t head_dim) {
  if (!c.enabled()) return absl::OkStatus();
  if (std::find(std::begin(kTypes), std::end(kTypes), c.type) == std::end(kTypes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling.rope_type \"", c.type,
                     "\" is not supported (default, linear, dynamic, yarn, longrope, llama3)"));
  }
  if (!(c.theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta must be > 0, got ", c.theta));
  }
  const int64_t dim = c.rotary_dim > 0 ? c.rotary_dim : head_dim;
  if (dim % 2 != 0 || dim > head_dim || dim < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the rotary dimension (head_dim x partial_rotary_factor) must be even and in [2, head_dim "
        "= ",
        head_dim, "], got ", dim));
  }
  if (c.type != "default" && !(c.factor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling.factor must be > 0 for rope_type ", c.type, ", got ", c.factor));
  }
  if ((c.type == "dynamic" || c.type == "yarn" || c.type == "longrope") &&
      c.max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_type ", c.type, " needs max_position_embeddings > 0"));
  }
  if (c.type == "llama3") {
    if (c.original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError(
          "rope_type llama3 needs rope_scaling.original_max_position_embeddings > 0");
    }
    if (!(c.high_freq_factor > c.low_freq_factor) || !(c.low_freq_factor > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_type llama3 needs 0 < low_freq_factor < high_freq_factor, got ",
                       c.low_freq_factor, " and ", c.high_freq_factor));
    }
  }
  if (c.type == "longrope") {
    for (const auto* factors : {&c.short_factor, &c.long_factor}) {
      if (static_cast<int64_t>(factors->size()) != dim / 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rope_type longrope needs short_factor and long_factor of rotary_dim / 2 = ", dim / 2,
            " values, got ", factors->size()));
      }
    }
  }
  return absl::OkStatus();
}

RotaryPositions::RotaryPositions(const RotaryConfig& config, int64_t head_dim)
    : config_(config),
      head_dim_(head_dim),
      rotary_dim_(config.rotary_dim > 0 ? config.rotary_dim : head_dim) {
  if (enabled()) inv_freq_ = InverseFrequencies(0, &attention_factor_);
}

std::vector<float> RotaryPositions::InverseFrequencies(int64_t length,
                                                       float* attention_factor) const {
  const RotaryConfig& c = config_;
  const int64_t dim = rotary_dim_;
  const float base = static_cast<float>(c.theta);
  *attention_factor = 1.0f;
  if (c.type == "default") return Inverse(BasePowers(base, dim));
  if (c.type == "linear") {
    std::vector<float> inv = Inverse(BasePowers(base, dim));
    for (float& f : inv) f /= static_cast<float>(c.factor);
    return inv;
  }
  if (c.type == "dynamic") {
    // The length of the call, at least max_position_embeddings (below it: the plain base).
    const int64_t n = std::max(length, c.max_position_embeddings);
    const float factor = static_cast<float>(c.factor);
    const float ratio =
        factor * static_cast<float>(n) / static_cast<float>(c.max_position_embeddings) -
        (factor - 1.0f);
    const float scaled =
        base * std::pow(ratio, static_cast<float>(static_cast<double>(dim) / (dim - 2)));
    return Inverse(BasePowers(scaled, dim));
  }
  if (c.type == "yarn") {
    *attention_factor = static_cast<float>(c.attention_factor > 0 ? c.attention_factor
                                                                  : 0.1 * std::log(c.factor) + 1.0);
    const double max_pos = static_cast<double>(c.max_position_embeddings);
    const auto correction_dim = [&](double rotations) {
      return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(c.theta));
    };
    const double low = std::max(std::floor(correction_dim(c.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(c.beta_slow)), static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    const std::vector<float> powers = BasePowers(base, dim);
    std::vector<float> inv(dim / 2);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float ramp =
          std::clamp(static_cast<float>((static_cast<float>(i) - low) / (high - low)), 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float interpolated = 1.0f / (static_cast<float>(c.factor) * powers[i]);
      const float extrapolated = 1.0f / powers[i];
      inv[i] = interpolated * (1.0f - extrapolation) + extrapolated * extrapolation;
    }
    return inv;
  }
  if (c.type == "longrope") {
    double factor = c.factor;
    double original = static_cast<double>(c.max_position_embeddings);
    double expanded = original * factor;
    if (c.original_max_position_embeddings > 0) {
      // The config's own original length: the expanded one is max_position_embeddings.
      original = static_cast<double>(c.original_max_position_embeddings);
      expanded = static_cast<double>(c.max_position_embeddings);
      factor = expanded / original;
    }
    *attention_factor =
        static_cast<float>(c.attention_factor > 0 ? c.attention_factor
                           : factor <= 1.0        ? 1.0
                                           : std::sqrt(1 + std::log(factor) / std::log(original)));
    const std::vector<double>& ext = expanded > original ? c.long_factor : c.short_factor;
    const std::vector<float> powers = BasePowers(base, dim);
    std::vector<float> inv(dim / 2);
    for (int64_t i = 0; i < dim / 2; ++i) inv[i] = 1.0f / (static_cast<float>(ext[i]) * powers[i]);
    return inv;
  }
  // llama3
  std::vector<float> inv = Inverse(BasePowers(base, dim));
  const float factor = static_cast<float>(c.factor);
  const float low = static_cast<float>(c.low_freq_factor),
              high = static_cast<float>(c.high_freq_factor);
  const float old_context = static_cast<float>(c.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2 * M_PI) / f;
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
      const float smooth = (old_context / wavelen - low) / (high - low);
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
  return inv;
}

void RotaryPositions::Apply(at::Tensor& q, at::Tensor& k,
                            const std::vector<int64_t>& starts) const {
  if (!enabled()) return;
  const int64_t b = q.size(0), l = q.size(2);
  const int64_t half = rotary_dim_ / 2;
  // cos and sin (B, L, half), times the attention factor, for both tensors.
  at::Tensor cos_sin = at::empty({2, b, l, half}, at::kFloat);
  float* cos_p = cos_sin.data_ptr<float>();
  float* sin_p = cos_p + b * l * half;
  std::vector<float> dynamic;
  for (int64_t row = 0; row < b; ++row) {
    const int64_t start = starts.size() == 1 ? starts[0] : starts[row];
    for (int64_t t = 0; t < l; ++t) {
      float factor = attention_factor_;
      const std::vector<float>* inv = &inv_freq_;
      if (config_.type == "dynamic" && start + t + 1 > config_.max_position_embeddings) {
        // The frequencies of a sequence ending at this token (transformers' step path).
        dynamic = InverseFrequencies(start + t + 1, &factor);
        inv = &dynamic;
      }
      const float position = static_cast<float>(start + t);
      float* c = cos_p + (row * l + t) * half;
      float* s = sin_p + (row * l + t) * half;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = (*inv)[i] * position;  // float32, as transformers' matmul
        c[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * factor;
        s[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * factor;
      }
    }
  }
  if (!q.is_cpu()) {
    const at::Tensor on_device = cos_sin.to(q.device());
    const at::Tensor c = on_device[0].unsqueeze(1), s = on_device[1].unsqueeze(1);  // (B,1,L,half)
    for (at::Tensor* x : {&q, &k}) {
      at::Tensor x1 = x->narrow(3, 0, half), x2 = x->narrow(3, half, half);
      const at::Tensor r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
      x1.copy_(r1);
      x2.copy_(r2);
    }
    return;
  }
  for (at::Tensor* x : {&q, &k}) {
    const int64_t heads = x->size(1), d = x->size(3);
    float* data = x->data_ptr<float>();
    for (int64_t row = 0; row < b; ++row) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t t = 0; t < l; ++t) {
          float* v = data + ((row * heads + h) * l + t) * d;
          const float* c = cos_p + (row * l + t) * half;
          const float* s = sin_p + (row * l + t) * half;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * c[i] - x2 * s[i];
            v[i + half] = x2 * c[i] + x1 * s[i];
          }
        }
      }
    }
  }
}

}  // namespace attnserve::kernels
