#include "kernels/common/low_rank_adapter.h"

#include <ATen/ATen.h>

namespace attnserve::kernels {

LowRankAdapter::LowRankAdapter(const std::vector<at::Tensor>& downs,
                               const std::vector<at::Tensor>& ups, WeightFormat format)
    : down_(at::cat(downs, 0), format) {
  for (const at::Tensor& up : ups) ups_.emplace_back(up, format);
}

int64_t LowRankAdapter::out_features() const {
  int64_t out = 0;
  for (const LinearWeight& up : ups_) out += up.out_features();
  return out;
}

int64_t LowRankAdapter::Bytes() const {
  int64_t bytes = down_.Bytes();
  for (const LinearWeight& up : ups_) bytes += up.Bytes();
  return bytes;
}

void LowRankAdapter::AddTo(const at::Tensor& x, at::Tensor& y) const {
  const at::Tensor low = down_(x);  // (..., Σ r_i)
  int64_t rank_offset = 0, out_offset = 0;
  for (const LinearWeight& up : ups_) {
    const int64_t rank = up.in_features(), out = up.out_features();
    const at::Tensor part = ups_.size() == 1 ? low : low.narrow(-1, rank_offset, rank).contiguous();
    y.narrow(-1, out_offset, out).add_(up(part));
    rank_offset += rank;
    out_offset += out;
  }
}

}  // namespace attnserve::kernels
