// Linformer attention on an NVIDIA GPU, the math of linformer_attention.h, per batch and head:
//   out = softmax( Q (E[:L]ᵀ K)ᵀ · scale ) (F[:L]ᵀ V)
// with E, F (max_len, proj) shared by the heads. The four matrix products go through cuBLAS
// (cublasSgemmStridedBatched, batched over heads; over batch·heads when the strides allow);
// the row softmax over `proj` columns is a small kernel (one warp per row). Float32 only.
//
// TF32: the products follow the math mode of the cuBLAS handle the caller passes (torch's
// handle follows torch.backends.cuda.matmul.allow_tf32; the default cuBLAS mode is full FP32).
//
// Params-struct convention as mamba's selective_scan: device pointers, strides in elements,
// no torch types. The caller owns every buffer, the cuBLAS handle (the launcher sets its
// stream to `stream`) and a workspace of LinformerWorkspaceElements(params) floats.
// Torch-facing wrapper: linformer_cuda_torch.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::linformer {

struct LinformerCudaParams {
  int64_t batch = 0, heads = 0, seqlen = 0, head_dim = 0, proj_len = 0;
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(head_dim)

  // (batch, heads, seqlen, head_dim), last dimension contiguous.
  const float* q = nullptr;
  int64_t q_batch_stride = 0, q_head_stride = 0, q_seq_stride = 0;
  const float* k = nullptr;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_seq_stride = 0;
  const float* v = nullptr;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_seq_stride = 0;
  // (max_len >= seqlen, proj_len), rows e_row_stride / f_row_stride apart; rows [0, seqlen).
  const float* e = nullptr;
  int64_t e_row_stride = 0;
  const float* f = nullptr;
  int64_t f_row_stride = 0;
  float* out = nullptr;  // (batch, heads, seqlen, head_dim); must not overlap the inputs
  int64_t out_batch_stride = 0, out_head_stride = 0, out_seq_stride = 0;

  // LinformerWorkspaceElements floats: E[:L]ᵀK and F[:L]ᵀV (batch·heads·proj·head_dim each),
  // then the scores (batch·heads·seqlen·proj).
  float* workspace = nullptr;
};

int64_t LinformerWorkspaceElements(const LinformerCudaParams& params);

cuda::CudaStatus LaunchLinformerAttention(const LinformerCudaParams& params, cublasHandle_t handle,
                                          cudaStream_t stream);

}  // namespace attnserve::kernels::linformer
