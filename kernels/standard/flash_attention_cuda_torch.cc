#include "kernels/standard/flash_attention_cuda_torch.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/standard/flash_attention_cuda.h"

namespace attnserve::kernels::standard {
namespace {

using cuda::CheckCudaTensor;
using cuda::RowsForVectorLoads;

void CheckHeadDim(int64_t d) {
  TORCH_CHECK(d == 64 || d == 128, "flash attention (CUDA): head_dim must be 64 or 128, got ", d);
}

// Everything but the caches; keep_alive->front() is the output.
FlashDecodeCudaParams DecodeParams(const at::Tensor& q, const at::Tensor& seqlens,
                                   int64_t max_seqlen, double softmax_scale, const at::Tensor& out,
                                   std::vector<at::Tensor>* keep_alive) {
  const at::Device device = q.device();
  CheckCudaTensor(q, "q", device, {-1, -1, -1}, {at::kFloat, at::kBFloat16});
  CheckHeadDim(q.size(2));
  TORCH_CHECK(max_seqlen >= 1, "flash decode: max_seqlen must be >= 1, got ", max_seqlen);
  if (seqlens.defined()) {
    CheckCudaTensor(seqlens, "seqlens", device, {q.size(0)}, {at::kInt});
  }
  const at::Tensor q_c = RowsForVectorLoads(q);
  const at::Tensor lens = seqlens.defined() ? seqlens.contiguous() : seqlens;
  at::Tensor result = cuda::OutputOrNew(out, "flash decode out", q.sizes(), q.options());
  *keep_alive = {result, q_c, lens};
  FlashDecodeCudaParams p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.head_dim = q.size(2);
  p.dtype = cuda::ToDType(q.scalar_type());
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.q = q_c.data_ptr();
  p.q_batch_stride = q_c.stride(0);
  p.q_head_stride = q_c.stride(1);
  p.out = result.data_ptr();
  p.out_batch_stride = result.stride(0);
  p.out_head_stride = result.stride(1);
  p.seqlens = lens.defined() ? lens.data_ptr<int32_t>() : nullptr;
  p.max_seqlen = max_seqlen;
  return p;
}

// Chooses the split count, allocates the workspace (kept in *workspace) and launches.
void LaunchDecodeWithWorkspace(FlashDecodeCudaParams p, const at::Tensor& q,
                               at::Tensor* workspace) {
  int sm_count = 0;
  cuda::ThrowIfError(cuda::CurrentDeviceSmCount(&sm_count));
  p.num_splits = FlashDecodeNumSplits(p, sm_count);
  const int64_t elements = FlashDecodeWorkspaceElements(p);
  if (elements > 0) {
    *workspace = at::empty({elements}, q.options().dtype(at::kFloat));
    p.workspace = workspace->data_ptr<float>();
  }
  cuda::ThrowIfError(LaunchFlashDecode(p, cuda::CurrentStream()));
}

}  // namespace

at::Tensor FlashAttentionCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              bool causal, double softmax_scale, const at::Tensor& out,
                              int64_t window, int64_t sinks) {
  TORCH_CHECK(q.defined() && q.is_cuda(), "flash attention: q must be a CUDA tensor");
  TORCH_CHECK(window >= 0 && sinks >= 0 && (window == 0 || causal) && (sinks == 0 || window > 0),
              "flash attention: a window (>= 0) is causal only and sinks (>= 0) need a window, "
              "got window ",
              window, ", sinks ", sinks, causal ? "" : ", not causal");
  const at::Device device = q.device();
  const c10::cuda::CUDAGuard guard(device);
  CheckCudaTensor(q, "q", device, {-1, -1, -1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t batch = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  CheckHeadDim(d);
  CheckCudaTensor(k, "k", device, {batch, -1, -1, d}, {q.scalar_type()});
  const int64_t lk = k.size(2), kv_heads = k.size(1);
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "flash attention: q's ", heads,
              " heads are not a multiple of k's ", kv_heads);
  CheckCudaTensor(v, "v", device, {batch, kv_heads, lk, d}, {q.scalar_type()});
  TORCH_CHECK(!causal || lk >= lq,
              "causal attention needs at least as many keys as queries (the queries are the "
              "last Lq of the Lk positions), got Lq = ",
              lq, ", Lk = ", lk);
  TORCH_CHECK(lq == 0 || lk > 0, "attention over no keys is undefined, got Lq = ", lq, ", Lk = 0");
  const at::Tensor q_c = RowsForVectorLoads(q), k_c = RowsForVectorLoads(k),
                   v_c = RowsForVectorLoads(v);
  at::Tensor result = cuda::OutputOrNew(out, "flash attention out", q.sizes(), q.options());

  FlashAttentionCudaParams p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.seqlen_q = lq;
  p.seqlen_k = lk;
  p.head_dim = d;
  p.dtype = cuda::ToDType(q.scalar_type());
  p.causal = causal;
  p.window = window;
  p.sinks = sinks;
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.q = q_c.data_ptr();
  p.q_batch_stride = q_c.stride(0);
  p.q_head_stride = q_c.stride(1);
  p.q_seq_stride = q_c.stride(2);
  p.k = k_c.data_ptr();
  p.k_batch_stride = k_c.stride(0);
  p.k_head_stride = k_c.stride(1);
  p.k_seq_stride = k_c.stride(2);
  p.v = v_c.data_ptr();
  p.v_batch_stride = v_c.stride(0);
  p.v_head_stride = v_c.stride(1);
  p.v_seq_stride = v_c.stride(2);
  p.out = result.data_ptr();
  p.out_batch_stride = result.stride(0);
  p.out_head_stride = result.stride(1);
  p.out_seq_stride = result.stride(2);
  cuda::ThrowIfError(LaunchFlashAttention(p, cuda::CurrentStream()));
  return result;
}

at::Tensor FlashDecodeCuda(const at::Tensor& q, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& seqlens, int64_t max_seqlen,
                           double softmax_scale, const at::Tensor& out) {
  TORCH_CHECK(q.defined() && q.is_cuda(), "flash decode: q must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(q.device());
  std::vector<at::Tensor> keep_alive;
  FlashDecodeCudaParams p = DecodeParams(q, seqlens, max_seqlen, softmax_scale, out, &keep_alive);
  CheckCudaTensor(k_cache, "k_cache", q.device(), {p.batch, -1, -1, p.head_dim}, {q.scalar_type()});
  p.kv_heads = k_cache.size(1);
  TORCH_CHECK(p.kv_heads > 0 && p.heads % p.kv_heads == 0, "flash decode: q's ", p.heads,
              " heads are not a multiple of the caches' ", p.kv_heads);
  CheckCudaTensor(v_cache, "v_cache", q.device(),
                  {p.batch, p.kv_heads, k_cache.size(2), p.head_dim}, {q.scalar_type()});
  TORCH_CHECK(k_cache.size(2) >= max_seqlen, "flash decode: cache capacity ", k_cache.size(2),
              " < max_seqlen ", max_seqlen);
  const at::Tensor k_c = RowsForVectorLoads(k_cache), v_c = RowsForVectorLoads(v_cache);
  p.k = k_c.data_ptr();
  p.k_batch_stride = k_c.stride(0);
  p.k_head_stride = k_c.stride(1);
  p.k_seq_stride = k_c.stride(2);
  p.v = v_c.data_ptr();
  p.v_batch_stride = v_c.stride(0);
  p.v_head_stride = v_c.stride(1);
  p.v_seq_stride = v_c.stride(2);
  at::Tensor workspace;
  LaunchDecodeWithWorkspace(p, q, &workspace);
  return keep_alive.front();
}

at::Tensor FlashDecodeCuda(const at::Tensor& q, const std::vector<at::Tensor>& k_caches,
                           const std::vector<at::Tensor>& v_caches, const at::Tensor& seqlens,
                           int64_t max_seqlen, double softmax_scale, const at::Tensor& out) {
  TORCH_CHECK(q.defined() && q.is_cuda(), "flash decode: q must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(q.device());
  std::vector<at::Tensor> keep_alive;
  FlashDecodeCudaParams p = DecodeParams(q, seqlens, max_seqlen, softmax_scale, out, &keep_alive);
  TORCH_CHECK(static_cast<int64_t>(k_caches.size()) == p.batch &&
                  static_cast<int64_t>(v_caches.size()) == p.batch,
              "flash decode: expected ", p.batch, " k and v caches, got ", k_caches.size(), " and ",
              v_caches.size());
  const int64_t align = q.element_size() * 4;
  at::Tensor head_strides = at::empty({p.batch}, at::kLong);
  for (int64_t i = 0; i < p.batch; ++i) {
    const at::Tensor& kc = k_caches[i];
    const at::Tensor& vc = v_caches[i];
    CheckCudaTensor(kc, "k_caches[i]", q.device(), {-1, -1, p.head_dim}, {q.scalar_type()});
    if (i == 0) p.kv_heads = kc.size(0);
    TORCH_CHECK(kc.size(0) == p.kv_heads && p.kv_heads > 0 && p.heads % p.kv_heads == 0,
                "flash decode: every cache must hold the same number of heads, a divisor of q's ",
                p.heads);
    CheckCudaTensor(vc, "v_caches[i]", q.device(), {p.kv_heads, kc.size(1), p.head_dim},
                    {q.scalar_type()});
    TORCH_CHECK(kc.stride(2) == 1 && kc.stride(1) == p.head_dim && vc.strides() == kc.strides(),
                "flash decode: every cache must have contiguous rows, and k and v the same "
                "strides");
    TORCH_CHECK(kc.stride(0) % 4 == 0 && cuda::IsAligned(kc.data_ptr(), static_cast<int>(align)) &&
                    cuda::IsAligned(vc.data_ptr(), static_cast<int>(align)),
                "flash decode: caches must be aligned to ", align,
                " bytes with head strides "
                "that are multiples of 4");
    // With seqlens, capacity_i >= seqlens[i] is the caller's contract (the lengths are on the
    // device); without, every session attends to max_seqlen keys.
    TORCH_CHECK(seqlens.defined() || kc.size(1) >= max_seqlen, "flash decode: cache ", i, " holds ",
                kc.size(1), " positions, fewer than max_seqlen ", max_seqlen);
    head_strides.data_ptr<int64_t>()[i] = kc.stride(0);
  }
  const at::Tensor k_ptrs = cuda::DevicePointerArray(k_caches, q.device());
  const at::Tensor v_ptrs = cuda::DevicePointerArray(v_caches, q.device());
  const at::Tensor strides_dev = head_strides.to(q.device());
  p.k_ptrs = reinterpret_cast<const void* const*>(k_ptrs.data_ptr<int64_t>());
  p.v_ptrs = reinterpret_cast<const void* const*>(v_ptrs.data_ptr<int64_t>());
  p.kv_head_strides = strides_dev.data_ptr<int64_t>();
  p.k_seq_stride = p.head_dim;
  p.v_seq_stride = p.head_dim;
  at::Tensor workspace;
  LaunchDecodeWithWorkspace(p, q, &workspace);
  return keep_alive.front();
}

}  // namespace attnserve::kernels::standard
