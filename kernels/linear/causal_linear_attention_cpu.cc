#include "kernels/linear/causal_linear_attention_cpu.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

// φ(x) = elu(x) + 1 > 0.
at::Tensor FeatureMap(const at::Tensor& x) { return at::elu(x).add_(1.0); }

// Zero rows appended along dim 1 of a (N, L, d) tensor up to `padded` rows. Zero rows of φ(k)
// add nothing to S and z, and the outputs of zero rows of φ(q) are dropped.
at::Tensor PadRows(const at::Tensor& t, int64_t padded) {
  if (t.size(1) == padded) return t.contiguous();
  return at::constant_pad_nd(t, {0, 0, 0, padded - t.size(1)});
}

LinearAttentionResult CausalImpl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& s, const at::Tensor& z, int64_t chunk) {
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), d = q.size(3);
  const int64_t bh = b * h;
  if (l == 0) return {at::empty({b, h, 0, d}, q.options()), s, z};
  const int64_t n = (l + chunk - 1) / chunk;  // blocks
  const int64_t padded = n * chunk;

  // Blocks as a batch: (B·H·n, chunk, d).
  const at::Tensor fq = PadRows(FeatureMap(q).reshape({bh, l, d}), padded).view({-1, chunk, d});
  const at::Tensor fk = PadRows(FeatureMap(k).reshape({bh, l, d}), padded).view({-1, chunk, d});
  const at::Tensor vb = PadRows(v.reshape({bh, l, d}), padded).view({-1, chunk, d});

  // What each block adds to the state: ΔS = φ(K_c)ᵀ V_c, Δz = Σ_rows φ(K_c).
  const at::Tensor delta_s = at::bmm(fk.transpose(1, 2), vb).view({bh, n, d, d});
  const at::Tensor delta_z = fk.sum(1).view({bh, n, d});
  const at::Tensor s0 = s.reshape({bh, 1, d, d});
  const at::Tensor z0 = z.reshape({bh, 1, d});
  // State after each block (inclusive prefix sums), and before each block (exclusive: the
  // incoming state, then the inclusive sums shifted by one block).
  const at::Tensor s_after = delta_s.cumsum(1).add_(s0);
  const at::Tensor z_after = delta_z.cumsum(1).add_(z0);
  const at::Tensor s_before = at::cat({s0, s_after.narrow(1, 0, n - 1)}, 1).view({-1, d, d});
  const at::Tensor z_before = at::cat({z0, z_after.narrow(1, 0, n - 1)}, 1).view({-1, d, 1});

  // Within a block: scores φ(q_i)·φ(k_j) for j <= i (the diagonal included).
  const at::Tensor scores = at::bmm(fq, fk.transpose(1, 2)).tril_();  // (B·H·n, chunk, chunk)
  at::Tensor numerator = at::bmm(fq, s_before).baddbmm_(scores, vb);
  const at::Tensor denominator =
      at::bmm(fq, z_before).add_(scores.sum(2, /*keepdim=*/true)).add_(kLinearAttentionEps);
  at::Tensor out =
      numerator.div_(denominator).view({bh, padded, d}).narrow(1, 0, l).reshape({b, h, l, d});
  // contiguous() copies the last block's state out, so the result does not keep every
  // block's (d, d) state alive.
  return {std::move(out), s_after.select(1, n - 1).reshape({b, h, d, d}).contiguous(),
          z_after.select(1, n - 1).reshape({b, h, d}).contiguous()};
}

absl::Status CheckQkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1, -1}));
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {q.size(0), q.size(1), q.size(2), q.size(3)}));
  return CheckFloatTensor(v, "v", {q.size(0), q.size(1), q.size(2), q.size(3)});
}

}  // namespace

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionCpu(const at::Tensor& q,
                                                               const at::Tensor& k,
                                                               const at::Tensor& v,
                                                               const at::Tensor& s,
                                                               const at::Tensor& z, int64_t chunk) {
  RETURN_IF_ERROR(CheckQkv(q, k, v));
  const int64_t b = q.size(0), h = q.size(1), d = q.size(3);
  RETURN_IF_ERROR(CheckFloatTensor(s, "S", {b, h, d, d}));
  RETURN_IF_ERROR(CheckFloatTensor(z, "z", {b, h, d}));
  if (chunk <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk must be > 0, got ", chunk));
  }
  return GuardTorch("causal linear attention", [&]() -> absl::StatusOr<LinearAttentionResult> {
    return CausalImpl(q, k, v, s, z, chunk);
  });
}

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepCpu(const at::Tensor& q,
                                                                   const at::Tensor& k,
                                                                   const at::Tensor& v,
                                                                   const at::Tensor& s,
                                                                   const at::Tensor& z) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1}));
  const int64_t b = q.size(0), h = q.size(1), d = q.size(2);
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {b, h, d}));
  RETURN_IF_ERROR(CheckFloatTensor(v, "v", {b, h, d}));
  RETURN_IF_ERROR(CheckFloatTensor(s, "S", {b, h, d, d}));
  RETURN_IF_ERROR(CheckFloatTensor(z, "z", {b, h, d}));
  return GuardTorch("causal linear attention step", [&]() -> absl::StatusOr<LinearAttentionResult> {
    const at::Tensor fq = FeatureMap(q), fk = FeatureMap(k);
    // The token enters the state before it is read: o_t uses S_t, z_t.
    at::Tensor s_new = at::addcmul(s, fk.unsqueeze(-1), v.unsqueeze(-2));
    at::Tensor z_new = z + fk;
    const at::Tensor numerator = at::matmul(fq.unsqueeze(-2), s_new).squeeze(-2);
    const at::Tensor denominator = (fq * z_new).sum(-1, /*keepdim=*/true).add_(kLinearAttentionEps);
    return LinearAttentionResult{numerator / denominator, std::move(s_new), std::move(z_new)};
  });
}

absl::StatusOr<at::Tensor> LinearAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v) {
  RETURN_IF_ERROR(CheckQkv(q, k, v));
  return GuardTorch("linear attention", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t b = q.size(0), h = q.size(1), l = q.size(2), d = q.size(3);
    const at::Tensor fq = FeatureMap(q).reshape({b * h, l, d});
    const at::Tensor fk = FeatureMap(k).reshape({b * h, l, d});
    const at::Tensor kv = at::bmm(fk.transpose(1, 2), v.reshape({b * h, l, d}));  // (B·H, d, d)
    const at::Tensor k_sum = fk.sum(1).unsqueeze(2);                              // (B·H, d, 1)
    return at::bmm(fq, kv).div_(at::bmm(fq, k_sum).add_(kLinearAttentionEps)).view({b, h, l, d});
  });
}

}  // namespace attnserve::kernels
