#include "kernels/linear/causal_linear_attention_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

// φ(x) = elu(x) + 1 > 0.
at::Tensor FeatureMap(const at::Tensor& x) { return at::elu(x).add_(1.0); }

// The normaliser, guarded in place: + ε for elu + 1 features, max(den, FLT_MIN) for features
// given (kPositiveNormaliserFloor).
at::Tensor& GuardNormaliser(at::Tensor& den, bool map_features) {
  return map_features ? den.add_(kLinearAttentionEps) : den.clamp_min_(kPositiveNormaliserFloor);
}

// Zero rows appended along dim 1 of a (N, L, d) tensor up to `padded` rows. Zero rows of φ(k)
// add nothing to S and z, and the outputs of zero rows of φ(q) are dropped.
at::Tensor PadRows(const at::Tensor& t, int64_t padded) {
  if (t.size(1) == padded) return t.contiguous();
  return at::constant_pad_nd(t, {0, 0, 0, padded - t.size(1)});
}

// Exclusive prefix sums over blocks, in place, starting from an initial value:
//   delta[i][c] <- initial[i] + Σ_{c' < c} delta[i][c'], and returns
//   final[i] = initial[i] + Σ_c delta[i][c] (a new (N, E) tensor),
// for delta (N, n, E) and initial (N, E), float32 contiguous. A plain loop rather than
// at::cumsum, which on a middle dimension walks memory with a stride of E floats (a page for
// E = 64·64) and took tens of milliseconds at N·n·E = 2M; in place, because every fresh
// multi-megabyte buffer costs its page faults again.
at::Tensor ExclusivePrefixSumInPlace(at::Tensor& delta, const at::Tensor& initial) {
  const int64_t rows = delta.size(0), blocks = delta.size(1), width = delta.size(2);
  at::Tensor final_value = initial.clone(at::MemoryFormat::Contiguous);
  float* data = delta.data_ptr<float>();
  float* running = final_value.data_ptr<float>();
  // Rows are independent; small problems stay on the calling thread.
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, blocks * width));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* run = running + i * width;
      for (int64_t c = 0; c < blocks; ++c) {
        float* block = data + (i * blocks + c) * width;
        for (int64_t j = 0; j < width; ++j) {
          const float increment = block[j];
          block[j] = run[j];
          run[j] += increment;
        }
      }
    }
  });
  return final_value;
}

// With map_features, q and k are mapped by φ here; without, they are features already (another
// feature map's, e.g. the Performer's FAVOR+).
LinearAttentionResult CausalImpl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& s, const at::Tensor& z, int64_t chunk,
                                 bool map_features) {
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), d = q.size(3);
  const int64_t bh = b * h;
  if (l == 0) return {at::empty({b, h, 0, d}, q.options()), s, z};
  const int64_t n = (l + chunk - 1) / chunk;  // blocks
  const int64_t padded = n * chunk;

  // Blocks as a batch: (B·H·n, chunk, d). φ(Q) and φ(K) are new buffers owned here.
  // (PadRows copies, so φ(K)'s buffer below is ours even when k is the caller's features.)
  const at::Tensor fq =
      PadRows((map_features ? FeatureMap(q) : q).reshape({bh, l, d}), padded).view({-1, chunk, d});
  at::Tensor fk =
      PadRows((map_features ? FeatureMap(k) : k).reshape({bh, l, d}), padded).view({-1, chunk, d});
  if (!map_features && l == padded) fk = fk.clone();  // no pad: a view of the caller's features
  const at::Tensor vb = PadRows(v.reshape({bh, l, d}), padded).view({-1, chunk, d});

  // What each block adds to the state: ΔS = φ(K_c)ᵀ V_c, Δz = Σ_rows φ(K_c); turned in place
  // into the state before each block (the incoming state plus the blocks before it), and the
  // state after the last block.
  at::Tensor s_before = at::bmm(fk.transpose(1, 2), vb).view({bh, n, d * d});
  at::Tensor z_before = fk.sum(1).view({bh, n, d});
  at::Tensor s_final = ExclusivePrefixSumInPlace(s_before, s.reshape({bh, d * d}));
  at::Tensor z_final = ExclusivePrefixSumInPlace(z_before, z.reshape({bh, d}));
  s_before = s_before.view({-1, d, d});
  z_before = z_before.view({-1, d, 1});

  // Within a block: scores φ(q_i)·φ(k_j) for j <= i (the diagonal included).
  const at::Tensor scores = at::bmm(fq, fk.transpose(1, 2)).tril_();  // (B·H·n, chunk, chunk)
  // φ(K) is not read after this point: its buffer takes the numerator (saves a buffer of the
  // size of q and its page faults).
  at::Tensor numerator = std::move(fk);
  at::bmm_out(numerator, fq, s_before);
  numerator.baddbmm_(scores, vb);
  at::Tensor denominator = at::bmm(fq, z_before).add_(scores.sum(2, /*keepdim=*/true));
  GuardNormaliser(denominator, map_features);
  at::Tensor out =
      numerator.div_(denominator).view({bh, padded, d}).narrow(1, 0, l).reshape({b, h, l, d});
  return {std::move(out), s_final.view({b, h, d, d}), z_final.view({b, h, d})};
}

absl::Status CheckQkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Device& device = at::Device(at::kCPU)) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1, -1}, device));
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {q.size(0), q.size(1), q.size(2), q.size(3)}, device));
  return CheckFloatTensor(v, "v", {q.size(0), q.size(1), q.size(2), q.size(3)}, device);
}

}  // namespace

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionCpu(const at::Tensor& q,
                                                               const at::Tensor& k,
                                                               const at::Tensor& v,
                                                               const at::Tensor& s,
                                                               const at::Tensor& z, int64_t chunk) {
  return CausalLinearAttentionOnFeaturesCpu(q, k, v, s, z, chunk, /*map_features=*/true);
}

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionOnFeaturesCpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, int64_t chunk, bool map_features) {
  RETURN_IF_ERROR(CheckQkv(q, k, v));
  const int64_t b = q.size(0), h = q.size(1), d = q.size(3);
  RETURN_IF_ERROR(CheckFloatTensor(s, "S", {b, h, d, d}));
  RETURN_IF_ERROR(CheckFloatTensor(z, "z", {b, h, d}));
  if (chunk <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk must be > 0, got ", chunk));
  }
  return GuardTorch("causal linear attention", [&]() -> absl::StatusOr<LinearAttentionResult> {
    return CausalImpl(q, k, v, s, z, chunk, map_features);
  });
}

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepCpu(const at::Tensor& q,
                                                                   const at::Tensor& k,
                                                                   const at::Tensor& v,
                                                                   const at::Tensor& s,
                                                                   const at::Tensor& z) {
  return CausalLinearAttentionStepOnFeaturesCpu(q, k, v, s, z, /*map_features=*/true);
}

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepOnFeaturesCpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, bool map_features) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1}));
  const int64_t b = q.size(0), h = q.size(1), d = q.size(2);
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {b, h, d}));
  RETURN_IF_ERROR(CheckFloatTensor(v, "v", {b, h, d}));
  RETURN_IF_ERROR(CheckFloatTensor(s, "S", {b, h, d, d}));
  RETURN_IF_ERROR(CheckFloatTensor(z, "z", {b, h, d}));
  return GuardTorch("causal linear attention step", [&]() -> absl::StatusOr<LinearAttentionResult> {
    const at::Tensor fq = map_features ? FeatureMap(q) : q;
    const at::Tensor fk = map_features ? FeatureMap(k) : k;
    // The token enters the state before it is read: o_t uses S_t, z_t.
    at::Tensor s_new = at::addcmul(s, fk.unsqueeze(-1), v.unsqueeze(-2));
    at::Tensor z_new = z + fk;
    const at::Tensor numerator = at::matmul(fq.unsqueeze(-2), s_new).squeeze(-2);
    at::Tensor denominator = (fq * z_new).sum(-1, /*keepdim=*/true);
    GuardNormaliser(denominator, map_features);
    return LinearAttentionResult{numerator / denominator, std::move(s_new), std::move(z_new)};
  });
}

absl::StatusOr<at::Tensor> LinearAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v) {
  return LinearAttentionOnFeaturesCpu(q, k, v, /*map_features=*/true);
}

absl::StatusOr<at::Tensor> LinearAttentionOnFeaturesCpu(const at::Tensor& q, const at::Tensor& k,
                                                        const at::Tensor& v, bool map_features) {
  // Plain ATen products: the same code serves CUDA tensors (through cuBLAS).
  RETURN_IF_ERROR(CheckQkv(q, k, v, q.defined() ? q.device() : at::Device(at::kCPU)));
  return GuardTorch("linear attention", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t b = q.size(0), h = q.size(1), l = q.size(2), d = q.size(3);
    const at::Tensor fq = (map_features ? FeatureMap(q) : q).reshape({b * h, l, d});
    const at::Tensor fk = (map_features ? FeatureMap(k) : k).reshape({b * h, l, d});
    const at::Tensor kv = at::bmm(fk.transpose(1, 2), v.reshape({b * h, l, d}));  // (B·H, d, d)
    const at::Tensor k_sum = fk.sum(1).unsqueeze(2);                              // (B·H, d, 1)
    at::Tensor denominator = at::bmm(fq, k_sum);
    return at::bmm(fq, kv).div_(GuardNormaliser(denominator, map_features)).view({b, h, l, d});
  });
}

}  // namespace attnserve::kernels
