#include "kernels/common/linear.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/common/bf16_gemv.h"

namespace attnserve::kernels {
namespace {

bool IsOneCpuRow(const at::Tensor& x) {
  return x.is_cpu() && x.dim() >= 1 && x.numel() == x.size(-1) && x.scalar_type() == at::kFloat;
}

std::vector<int64_t> OutputSizes(const at::Tensor& x, int64_t out_features) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out_features;
  return sizes;
}

}  // namespace

LinearWeight::LinearWeight(const at::Tensor& weight, bool bf16_copy)
    : weight_(weight.contiguous()) {
  if (bf16_copy && weight_.is_cpu()) bf16_ = weight_.to(at::kBFloat16).contiguous();
}

at::Tensor LinearWeight::operator()(const at::Tensor& x) const {
  if (bf16_.defined() && IsOneCpuRow(x)) {
    TORCH_CHECK(x.size(-1) == weight_.size(1), "linear: input has ", x.size(-1),
                " features, the weight expects ", weight_.size(1));
    const at::Tensor row = x.reshape({-1}).contiguous();
    at::Tensor y = at::empty({weight_.size(0)}, x.options());
    Bf16Gemv(reinterpret_cast<const uint16_t*>(bf16_.data_ptr()), bf16_.size(0), bf16_.size(1),
             row.data_ptr<float>(), y.data_ptr<float>());
    return y.view(OutputSizes(x, weight_.size(0)));
  }
  return Linear(x, weight_);
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  if (IsOneCpuRow(x) && weight.is_contiguous()) {
    return at::mv(weight, x.reshape({-1})).view(OutputSizes(x, weight.size(0)));
  }
  return at::linear(x, weight);
}

}  // namespace attnserve::kernels
