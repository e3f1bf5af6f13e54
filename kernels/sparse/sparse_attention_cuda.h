// Sparse Transformer attention (strided or fixed pattern, sparse_key_tiles.h) on an NVIDIA GPU:
// the shared FlashAttention kernel (kernels/standard/flash_attention_kernel.cuh) with the
// pattern's walk (sparse_flash_walk.h), so a block of queries visits only the key tiles it can
// see: O(Lq·(l + Lk/l)·d) work for strided, O(Lq·(l + c·Lk/l)·d) for fixed, as the CPU kernel
// (sparse_attention_cpu.h), never an Lq x Lk matrix.
//
// Two launches on `stream`: the long part (strided: in the residue-class layout, a block holds
// 64 queries of one class and their class's keys; fixed: the summary columns) writes each
// query's partial softmax state to `workspace`; the local part (the band or the block, natural
// layout) starts from it and writes `out`. With l >= Lk the long part is empty and only the
// local pass runs (then no workspace is needed): standard attention.
//
// COMPILED, NOT RUN: no GPU was available where this was written. The walk is checked on the
// CPU (tests/unit/sparse_key_tiles_test.cc: the two passes visit exactly the pattern's pairs);
// the kernel itself against a float64 masked reference only by tests/gpu/gpu_check.cc, on a
// machine with a GPU (tests/gpu/run.sh --only sparse). Not tuned: at head_dim 64 ptxas (sm_90,
// nvcc 13) reports 188 bytes of spill stores for this walk's instantiation (the walk's block
// plan and 64-bit index arithmetic on top of the dense kernel's 128 registers; the dense walk
// spills nothing), and a strided long-part block of a class with fewer than 64 rows (l > L/64)
// runs mostly padding rows.
//
// Params-struct convention (flash_attention_cuda.h): `attn` as for LaunchFlashAttention with
// window = sinks = 0 (causal: the queries are the last Lq of Lk positions); float32 or
// bfloat16, head_dim 64 or 128.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"
#include "kernels/standard/flash_attention_cuda.h"

namespace attnserve::kernels::sparse {

struct SparseAttentionCudaParams {
  standard::FlashAttentionCudaParams attn;  // window and sinks must be 0
  int32_t pattern = 0;                      // sparse::kStrided or sparse::kFixed
  int64_t stride = 1;                       // l >= 1
  int64_t summary = 1;                      // c, 1 <= c <= l (fixed only)
  // SparseAttentionWorkspaceElements(params) float32 elements, owned by the caller (null when
  // that is 0).
  float* workspace = nullptr;
};

// Floats of workspace: batch·heads·seqlen_q·(head_dim + 2) when the long part is not empty,
// else 0.
int64_t SparseAttentionWorkspaceElements(const SparseAttentionCudaParams& params);

cuda::CudaStatus LaunchSparseAttention(const SparseAttentionCudaParams& params,
                                       cudaStream_t stream);

}  // namespace attnserve::kernels::sparse
