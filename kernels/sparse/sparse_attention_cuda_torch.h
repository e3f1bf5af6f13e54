// Torch-facing wrapper of the CUDA sparse attention kernel (sparse_attention_cuda.h): checks
// devices, shapes and dtypes, allocates the workspace and launches on the current CUDA stream
// of the inputs' device. Built only when LibTorch has CUDA. COMPILED, NOT RUN where it was
// written (no GPU); tests/gpu/gpu_check.cc checks it where one is.
//
// q (B, H, Lq, d), k, v (B, H, Lk, d) float32 or bfloat16 (one dtype) on one CUDA device,
// head_dim 64 or 128 (a narrowed view of a KV cache is fine). causal: the queries are the last
// Lq of the Lk positions; otherwise Lq = Lk. pattern: sparse::kStrided or sparse::kFixed with
// stride l >= 1 and (fixed) summary columns 1 <= c <= l. Returns (B, H, Lq, d) (into `out`
// when given).
// Errors throw c10::Error.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnserve::kernels::sparse {

at::Tensor SparseAttentionCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, int32_t pattern, int64_t stride, int64_t summary,
                               double softmax_scale = 0.0, const at::Tensor& out = {});

}  // namespace attnserve::kernels::sparse
