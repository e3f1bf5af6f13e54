#include "kernels/common/linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/bf16_dot_gemm.h"
#include "kernels/common/int8_gemm.h"
#include "kernels/common/panel_gemm.h"
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

// y = x Wᵀ (W (out, in) float32) through the skinny kernel.
at::Tensor SkinnyProduct(const at::Tensor& x, int64_t rows, int64_t out, int64_t in,
                         const at::Tensor& weight) {
  TORCH_CHECK(x.size(-1) == in, "linear: input has ", x.size(-1), " features, the weight expects ",
              in);
  at::Tensor x2 = x.reshape({rows, in});
  if (x2.stride(1) != 1) x2 = x2.contiguous();
  at::Tensor y = at::empty({rows, out}, x.options());
  SkinnyGemmF32(weight.data_ptr<float>(), out, in, x2.data_ptr<float>(), x2.stride(0), rows,
                y.data_ptr<float>());
  return y.view(OutputSizes(x, out));
}

}  // namespace

LinearWeight::LinearWeight(const at::Tensor& weight, WeightFormat format)
    : out_(weight.size(0)),
      in_(weight.size(1)),
      device_(weight.device()),
      weight_(weight.contiguous()) {
  if (!weight_.is_cpu()) return;
  if (IsInt8(format) && weight_.dim() == 2 && in_ % kInt8Block == 0 &&
      weight_.scalar_type() == at::kFloat) {
    int8_ = at::empty({Int8PanelBytes(out_, in_)}, weight_.options().dtype(at::kByte));
    int8_scales_ = at::empty({Int8PanelScaleCount(out_, in_)}, weight_.options());
    QuantizeWeightInt8(weight_.data_ptr<float>(), out_, in_, format == WeightFormat::kInt8PerRow,
                       int8_.data_ptr<uint8_t>(), int8_scales_.data_ptr<float>());
    weight_ = at::Tensor();  // the sgemm rows widen int8_
    return;
  }
  if (IsBfloat16(format)) {
    at::Tensor values = weight_;
    if (format == WeightFormat::kBfloat16Dot) {
      // vdpbf16ps reads bfloat16 denormals as zero: so does every path here.
      values = at::where(values.abs() < std::numeric_limits<float>::min(), at::zeros_like(values),
                         values);
      bf16_dot_ = true;
    }
    const at::Tensor bits = values.to(at::kBFloat16).contiguous();
    bf16_panels_ = at::empty({Bf16PanelWords(out_, in_)}, bits.options().dtype(at::kInt));
    PackBf16Panels(reinterpret_cast<const uint16_t*>(bits.data_ptr()), out_, in_,
                   reinterpret_cast<uint32_t*>(bf16_panels_.data_ptr()));
    weight_ = at::Tensor();                          // every row count multiplies the panels
  } else if (weight_.scalar_type() == at::kFloat) {  // float32, or int8's float32 leftovers
    f32_panels_ = at::empty({F32PanelFloats(out_, in_)}, weight_.options());
    PackF32Panels(weight_.data_ptr<float>(), out_, in_, f32_panels_.data_ptr<float>());
    weight_ = at::Tensor();
  }
}

void LinearWeight::Widen(int64_t first, int64_t rows, float* out) const {
  at::parallel_for(0, rows, std::max<int64_t>(1, 4096 / in_), [&](int64_t begin, int64_t end) {
    if (int8_.defined()) {
      DequantizeWeightInt8(int8_.data_ptr<uint8_t>(), int8_scales_.data_ptr<float>(), in_,
                           first + begin, end - begin, out + begin * in_);
      return;
    }
    if (f32_panels_.defined()) {
      UnpackF32PanelRows(f32_panels_.data_ptr<float>(), in_, first + begin, end - begin,
                         out + begin * in_);
      return;
    }
    UnpackBf16PanelRows(Panels(), in_, first + begin, end - begin, out + begin * in_);
  });
}

at::Tensor LinearWeight::Float32Weight() const {
  if (weight_.defined() || !defined()) return weight_;
  at::Tensor w = at::empty({out_, in_}, at::kFloat);
  Widen(0, out_, w.data_ptr<float>());
  return w;
}

at::Tensor LinearWeight::Rows(const at::Tensor& ids) const {
  TORCH_CHECK(!int8_.defined(), "LinearWeight::Rows: an int8 matrix has no exact rows");
  if (weight_.defined()) return at::embedding(weight_, ids);
  TORCH_CHECK(defined(), "LinearWeight::Rows: no matrix");
  const at::Tensor flat = ids.to(at::kLong).contiguous().view(-1);
  std::vector<int64_t> sizes = ids.sizes().vec();
  sizes.push_back(in_);
  at::Tensor rows = at::empty(sizes, at::kFloat);
  const int64_t* id = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    TORCH_CHECK(id[i] >= 0 && id[i] < out_, "LinearWeight::Rows: index ", id[i],
                " out of range for ", out_, " rows");
    Widen(id[i], 1, rows.data_ptr<float>() + i * in_);  // exact: float32 or bfloat16 panels
  }
  return rows;
}

int64_t LinearWeight::Bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor* t : {&weight_, &f32_panels_, &bf16_panels_, &int8_, &int8_scales_}) {
    if (t->defined()) bytes += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return bytes;
}

at::Tensor LinearWeight::operator()(const at::Tensor& x) const {
  // On a device, or a CPU matrix that is not float32: as it is.
  if (weight_.defined()) return Linear(x, weight_);
  // Panels or int8 on the CPU: every row count through their own kernels.
  return DotRowTiles(x);
}

at::Tensor LinearWeight::DotRowTiles(const at::Tensor& x) const {
  TORCH_CHECK(x.is_cpu() && x.scalar_type() == at::kFloat,
              "linear: a bfloat16 or int8 weight multiplies float32 CPU inputs, not ",
              x.scalar_type());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == in_, "linear: input has ",
              x.dim() >= 1 ? x.size(-1) : 0, " features, the weight expects ", in_);
  const at::Tensor x2 = x.reshape({-1, in_}).contiguous();
  const int64_t rows = x2.size(0);
  at::Tensor y = at::empty({rows, out_}, x.options());
  for (int64_t first = 0; first < rows; first += kDotRowTile) {
    const int64_t n = std::min(kDotRowTile, rows - first);
    const float* xs = x2.data_ptr<float>() + first * in_;
    float* ys = y.data_ptr<float>() + first * out_;
    if (int8_.defined()) {
      Int8Gemm(int8_.data_ptr<uint8_t>(), int8_scales_.data_ptr<float>(), out_, in_, xs, in_, n,
               ys);
    } else if (f32_panels_.defined()) {
      PanelGemmF32(f32_panels_.data_ptr<float>(), out_, in_, xs, in_, n, ys);
    } else if (bf16_dot_) {
      Bf16DotGemm(Panels(), out_, in_, xs, in_, n, ys);
    } else {
      PanelGemmBf16(Panels(), out_, in_, xs, in_, n, ys);
    }
  }
  return y.view(OutputSizes(x, out_));
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  if (const int64_t rows =
          weight.is_cpu() && weight.is_contiguous() && weight.scalar_type() == at::kFloat
              ? SkinnyRows(x)
              : 0;
      rows > 0) {
    return SkinnyProduct(x, rows, weight.size(0), weight.size(1), weight);
  }
  return at::linear(x, weight);
}

}  // namespace attnserve::kernels
