#include "kernels/common/linear.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "kernels/common/bf16_dot_gemm.h"
#include "kernels/common/int8_gemm.h"
#include "kernels/common/skinny_gemm.h"

namespace attnserve::kernels {
namespace {

// Rows of a float32 CPU input when the skinny kernels take it; 0 otherwise. A step's input
// (B, in) or (B, 1, in), one row per session, up to kSkinnyGemmMaxRows; a sequence's
// (..., L, in) with L > 1, a prefill chunk, up to kSkinnyGemmMaxSequenceRows.
int64_t SkinnyRows(const at::Tensor& x) {
  if (!x.is_cpu() || x.dim() < 1 || x.scalar_type() != at::kFloat || x.size(-1) == 0) return 0;
  const int64_t rows = x.numel() / x.size(-1);
  const bool sequence = x.dim() >= 3 && x.size(-2) > 1;
  return rows >= 1 && rows <= (sequence ? kSkinnyGemmMaxSequenceRows : kSkinnyGemmMaxRows) ? rows
                                                                                           : 0;
}

std::vector<int64_t> OutputSizes(const at::Tensor& x, int64_t out_features) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out_features;
  return sizes;
}

// y = x Wᵀ through the skinny kernels; `bf16` (same shape as `weight`) when there is a copy
// (`bf16_dot`: multiplied by bfloat16-rounded x where `in` is even), else `int8` and its scales
// when there are.
at::Tensor SkinnyProduct(const at::Tensor& x, int64_t rows, const at::Tensor& weight,
                         const at::Tensor& bf16, bool bf16_dot = false, const at::Tensor& int8 = {},
                         const at::Tensor& int8_scales = {}) {
  const int64_t out = weight.size(0), in = weight.size(1);
  TORCH_CHECK(x.size(-1) == in, "linear: input has ", x.size(-1), " features, the weight expects ",
              in);
  at::Tensor x2 = x.reshape({rows, in});
  if (x2.stride(1) != 1) x2 = x2.contiguous();
  at::Tensor y = at::empty({rows, out}, x.options());
  if (int8.defined()) {
    Int8Gemm(int8.data_ptr<int8_t>(), int8_scales.data_ptr<float>(), out, in, x2.data_ptr<float>(),
             x2.stride(0), rows, y.data_ptr<float>());
  } else if (bf16.defined() && bf16_dot && in % 2 == 0) {
    SkinnyGemmBf16Dot(reinterpret_cast<const uint16_t*>(bf16.data_ptr()), out, in,
                      x2.data_ptr<float>(), x2.stride(0), rows, y.data_ptr<float>());
  } else if (bf16.defined()) {
    SkinnyGemmBf16(reinterpret_cast<const uint16_t*>(bf16.data_ptr()), out, in,
                   x2.data_ptr<float>(), x2.stride(0), rows, y.data_ptr<float>());
  } else {
    SkinnyGemmF32(weight.data_ptr<float>(), out, in, x2.data_ptr<float>(), x2.stride(0), rows,
                  y.data_ptr<float>());
  }
  return y.view(OutputSizes(x, out));
}

}  // namespace

LinearWeight::LinearWeight(const at::Tensor& weight, WeightFormat format)
    : weight_(weight.contiguous()) {
  if (!weight_.is_cpu()) return;
  if (IsBfloat16(format)) {
    at::Tensor values = weight_;
    if (format == WeightFormat::kBfloat16Dot) {
      // vdpbf16ps reads bfloat16 denormals as zero: so does every path here.
      values = at::where(values.abs() < std::numeric_limits<float>::min(), at::zeros_like(values),
                         values);
      bf16_dot_ = true;
    }
    bf16_ = values.to(at::kBFloat16).contiguous();
  }
  if (IsInt8(format) && weight_.dim() == 2 && weight_.size(1) % kInt8Block == 0 &&
      weight_.scalar_type() == at::kFloat) {
    const int64_t out = weight_.size(0), in = weight_.size(1);
    int8_ = at::empty({out, in}, weight_.options().dtype(at::kChar));
    int8_scales_ = at::empty({out, in / kInt8Block}, weight_.options());
    QuantizeWeightInt8(weight_.data_ptr<float>(), out, in, format == WeightFormat::kInt8PerRow,
                       int8_.data_ptr<int8_t>(), int8_scales_.data_ptr<float>());
    // The dequantized W, for the sgemm rows: d · q per block.
    weight_ =
        (int8_.to(at::kFloat).view({out, in / kInt8Block, kInt8Block}) * int8_scales_.unsqueeze(2))
            .view({out, in})
            .contiguous();
  }
}

at::Tensor LinearWeight::operator()(const at::Tensor& x) const {
  if (const int64_t rows = weight_.is_cpu() ? SkinnyRows(x) : 0; rows > 0) {
    return SkinnyProduct(x, rows, weight_, bf16_, bf16_dot_, int8_, int8_scales_);
  }
  return at::linear(x, weight_);
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  if (const int64_t rows =
          weight.is_cpu() && weight.is_contiguous() && weight.scalar_type() == at::kFloat
              ? SkinnyRows(x)
              : 0;
      rows > 0) {
    return SkinnyProduct(x, rows, weight, at::Tensor());
  }
  return at::linear(x, weight);
}

}  // namespace attnserve::kernels
