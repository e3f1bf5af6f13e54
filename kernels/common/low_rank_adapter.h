// A low-rank addition to a linear map's output: y += [B_0 (A_0 x), B_1 (A_1 x), ...], the parts'
// outputs side by side (LoRA's form; Zamba2's "adapters" on the q, k, v projections and on the
// gate_up projection of its shared transformer blocks, one set per hybrid layer).
//
// Shapes: part i has A_i (r_i, in) and B_i (out_i, r_i); x (..., in) float32 contiguous on the
// weights' device; y (..., Σ out_i). The A_i are stacked into one product, then each B_i reads
// its r_i columns of that. Each product is a LinearWeight (linear.h): a row's result does not
// depend on the other rows given with it, in every WeightFormat (a B_i whose r_i is not a
// multiple of 32 stays float32 under kInt8, as linear.h says).
// Immutable after construction; safe to call from many threads at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "kernels/common/linear.h"

namespace attnserve::kernels {

class LowRankAdapter {
 public:
  LowRankAdapter() = default;
  // downs[i] = A_i, ups[i] = B_i (float32, (out, in) as Hugging Face's nn.Linear weights).
  LowRankAdapter(const std::vector<at::Tensor>& downs, const std::vector<at::Tensor>& ups,
                 WeightFormat format);

  bool defined() const { return down_.defined(); }
  int64_t in_features() const { return down_.in_features(); }
  int64_t out_features() const;
  // Bytes of its matrices as kept.
  int64_t Bytes() const;
  // y (..., out_features) += the adapter of x (..., in_features); y contiguous.
  void AddTo(const at::Tensor& x, at::Tensor& y) const;

 private:
  LinearWeight down_;              // the A_i stacked: (Σ r_i, in)
  std::vector<LinearWeight> ups_;  // B_i (out_i, r_i)
};

}  // namespace attnserve::kernels
