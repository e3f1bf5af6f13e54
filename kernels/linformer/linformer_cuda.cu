#include <climits>
#include <cmath>
#include <string>

#include "kernels/linformer/linformer_cuda.h"

namespace attnserve::kernels::linformer {
namespace {

using cuda::CudaStatus;

constexpr int kSoftmaxWarps = 8;

// Row softmax of a (rows, cols) contiguous matrix, in place; one warp per row.
__global__ void __launch_bounds__(kSoftmaxWarps * 32)
    RowSoftmaxKernel(float* x, int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kSoftmaxWarps + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together: rows are per warp
  const int lane = threadIdx.x % 32;
  float* r = x + row * cols;
  float m = -INFINITY;
  for (int64_t j = lane; j < cols; j += 32) m = fmaxf(m, r[j]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float e = __expf(r[j] - m);
    r[j] = e;
    sum += e;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < cols; j += 32) r[j] *= inv;
}

// One operand of a batched product: base pointer, leading dimension (row stride, row-major)
// and the strides between batches and heads.
struct Operand {
  const float* ptr;
  int64_t ld, batch_stride, head_stride;
};

// C (M × N) = alpha · op(A) (M × K) · op(B) (K × N) + 0 · C for every (batch, head), all
// matrices row-major. cuBLAS is column-major, where a row-major X is Xᵀ: so it computes
// Cᵀ = op(B)ᵀ op(A)ᵀ with the operands swapped and the same transpose flags.
CudaStatus RowMajorGemm(cublasHandle_t handle, int64_t batch, int64_t heads, bool trans_a,
                        bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, Operand a,
                        Operand b, float* c, int64_t ldc, int64_t c_batch_stride,
                        int64_t c_head_stride) {
  const float beta = 0.0f;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // One call over batch·heads when every operand's batch stride is heads · head stride.
  const bool uniform = batch == 1 || (a.batch_stride == heads * a.head_stride &&
                                      b.batch_stride == heads * b.head_stride &&
                                      c_batch_stride == heads * c_head_stride);
  const int64_t calls = uniform ? 1 : batch;
  const int64_t count = uniform ? batch * heads : heads;
  for (int64_t i = 0; i < calls; ++i) {
    ATTNSERVE_CUBLAS_CHECK(cublasSgemmStridedBatched(
        handle, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
        b.ptr + i * b.batch_stride, static_cast<int>(b.ld), b.head_stride,
        a.ptr + i * a.batch_stride, static_cast<int>(a.ld), a.head_stride, &beta,
        c + i * c_batch_stride, static_cast<int>(ldc), c_head_stride, static_cast<int>(count)));
  }
  return CudaStatus();
}

}  // namespace

int64_t LinformerWorkspaceElements(const LinformerCudaParams& p) {
  return p.batch * p.heads * (2 * p.proj_len * p.head_dim + p.seqlen * p.proj_len);
}

CudaStatus LaunchLinformerAttention(const LinformerCudaParams& p, cublasHandle_t handle,
                                    cudaStream_t stream) {
  if (p.batch < 0 || p.heads < 0 || p.seqlen < 0 || p.head_dim <= 0 || p.proj_len <= 0) {
    return CudaStatus::InvalidArgument(
        "linformer (CUDA): need batch, heads, seqlen >= 0 and head_dim, proj_len > 0, got "
        "batch " +
        std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", seqlen " +
        std::to_string(p.seqlen) + ", head_dim " + std::to_string(p.head_dim) + ", proj_len " +
        std::to_string(p.proj_len));
  }
  const int64_t biggest = p.batch * p.heads;
  if (p.seqlen > INT_MAX || p.head_dim > INT_MAX || p.proj_len > INT_MAX || biggest > INT_MAX ||
      p.q_seq_stride > INT_MAX || p.k_seq_stride > INT_MAX || p.v_seq_stride > INT_MAX ||
      p.out_seq_stride > INT_MAX || p.e_row_stride > INT_MAX || p.f_row_stride > INT_MAX) {
    return CudaStatus::InvalidArgument("linformer (CUDA): sizes exceed cuBLAS's int range");
  }
  if (p.batch == 0 || p.heads == 0 || p.seqlen == 0) return CudaStatus();
  if (!p.q || !p.k || !p.v || !p.e || !p.f || !p.out || !p.workspace || !handle) {
    return CudaStatus::InvalidArgument(
        "linformer (CUDA): q, k, v, e, f, out, workspace and the cuBLAS handle must be "
        "non-null");
  }
  const float scale = p.softmax_scale != 0.0f
                          ? p.softmax_scale
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  const int64_t bh = p.batch * p.heads, pk = p.proj_len, d = p.head_dim, l = p.seqlen;
  float* k_proj = p.workspace;           // (B, H, proj, d)
  float* v_proj = k_proj + bh * pk * d;  // (B, H, proj, d)
  float* scores = v_proj + bh * pk * d;  // (B, H, L, proj)
  ATTNSERVE_CUBLAS_CHECK(cublasSetStream(handle, stream));

  // E[:L]ᵀ K and F[:L]ᵀ V: (proj × L)(L × d); E, F are shared (stride 0).
  ATTNSERVE_CUDA_RETURN_IF_ERROR(RowMajorGemm(
      handle, p.batch, p.heads, /*trans_a=*/true, /*trans_b=*/false, pk, d, l, 1.0f,
      {p.e, p.e_row_stride, 0, 0}, {p.k, p.k_seq_stride, p.k_batch_stride, p.k_head_stride}, k_proj,
      d, p.heads * pk * d, pk * d));
  ATTNSERVE_CUDA_RETURN_IF_ERROR(RowMajorGemm(
      handle, p.batch, p.heads, true, false, pk, d, l, 1.0f, {p.f, p.f_row_stride, 0, 0},
      {p.v, p.v_seq_stride, p.v_batch_stride, p.v_head_stride}, v_proj, d, p.heads * pk * d,
      pk * d));
  // Scores Q (E[:L]ᵀ K)ᵀ · scale: (L × d)(d × proj).
  ATTNSERVE_CUDA_RETURN_IF_ERROR(
      RowMajorGemm(handle, p.batch, p.heads, false, /*trans_b=*/true, l, pk, d, scale,
                   {p.q, p.q_seq_stride, p.q_batch_stride, p.q_head_stride},
                   {k_proj, d, p.heads * pk * d, pk * d}, scores, pk, p.heads * l * pk, l * pk));
  const int64_t rows = bh * l;
  const int64_t blocks = (rows + kSoftmaxWarps - 1) / kSoftmaxWarps;
  if (blocks > INT_MAX) return CudaStatus::InvalidArgument("linformer (CUDA): too many rows");
  RowSoftmaxKernel<<<static_cast<unsigned>(blocks), kSoftmaxWarps * 32, 0, stream>>>(scores, rows,
                                                                                     pk);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  // out = P (F[:L]ᵀ V): (L × proj)(proj × d).
  return RowMajorGemm(handle, p.batch, p.heads, false, false, l, d, pk, 1.0f,
                      {scores, pk, p.heads * l * pk, l * pk}, {v_proj, d, p.heads * pk * d, pk * d},
                      p.out, p.out_seq_stride, p.out_batch_stride, p.out_head_stride);
}

}  // namespace attnserve::kernels::linformer
