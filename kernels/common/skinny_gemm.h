// Y = X Wᵀ for a few rows of X (a decode batch: one row per session) and a weight matrix W
// (out, in), row-major and contiguous, in float32 or as bfloat16 bits. The product of a
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

// Rows of X above which a batch goes to sgemm instead (its packing is then amortised).
inline constexpr int64_t kSkinnyGemmMaxRows = 64;

void SkinnyGemmF32(const float* w, int64_t out, int64_t in, const float* x, int64_t x_stride,
                   int64_t rows, float* y);

// W as raw bfloat16 bits (each widened to float32 exactly; float32 accumulation).
void SkinnyGemmBf16(const uint16_t* w, int64_t out, int64_t in, const float* x, int64_t x_stride,
                    int64_t rows, float* y);

}  // namespace attnserve::kernels
