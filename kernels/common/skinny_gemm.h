// Y = X Wᵀ for a few rows of X (a decode batch: one row per session) and a float32 weight matrix
// W (out, in), row-major and contiguous (bfloat16 weights: panel_gemm.h). The product of a
// decode step is bound by the bytes of W it reads; these kernels stream W once, with no
// packing (OpenBLAS's sgemm packs all of W first, which for 16 rows costs more than the
// arithmetic: 54 GFLOP/s on mamba-130m's lm_head), and each block of 4 weight rows meets every
// row of X while it is in registers or L1.
//
// Every y[b][j] is accumulated in the same order whatever `rows` is and wherever row b sits,
// so a session's result does not depend on which sessions share its batch: bit-identical to
// the same row computed alone.
//
// Shapes (elements): w (out, in), x (rows, in) with row stride x_stride, y (rows, out)
// contiguous. Output rows are split across ATen's intra-op threads.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

// Rows of a decode step's X (one per session) above which it goes to sgemm instead.
inline constexpr int64_t kSkinnyGemmMaxRows = 64;
// Rows of a sequence's X (a prefill chunk) above which it goes to sgemm: where OpenBLAS's
// AVX-512 sgemm overtakes these kernels on the default models' and mamba-130m's matrices
// (bench/linear_bench.cc: equal at 32 rows, 1.3-1.7x faster at 48-64). Decode steps keep the
// skinny kernels up to kSkinnyGemmMaxRows for their batch invariance (above).
inline constexpr int64_t kSkinnyGemmMaxSequenceRows = 32;

void SkinnyGemmF32(const float* w, int64_t out, int64_t in, const float* x, int64_t x_stride,
                   int64_t rows, float* y);

}  // namespace attnserve::kernels
