// Y = X Wᵀ with 8-bit weights and 8-bit activations for a few rows of X (a decode batch: one row
// per session), the arithmetic of llama.cpp's Q8_0 × Q8_0 product with float32 scales:
//
//   W (out, in), in a multiple of kInt8Block, as int8 q_w in [-127, 127] and one float32 scale
//   d_w per block of kInt8Block consecutive elements of a row (or, QuantizeWeightInt8 with
//   per_row, one scale for the whole row, stored once per block): w ≈ d_w · q_w.
//   X (rows, in) quantized on every call the same way, per block of kInt8Block: d_x = amax/127,
//   q_x = round(x / d_x).
//
// y[r][j] is defined by integer products and one fixed float order, so that every instruction
// set gives the same bits (and a row's result does not depend on the batch it sits in):
//   16 float32 lanes acc[0..15] = +0; for each pair of blocks (2t, 2t+1) (a missing 2t+1 counts
//   with p = 0, s = 0): lane l covers block b = 2t + l/8 and its elements 4(l%8) .. 4(l%8)+3,
//   p = Σ q_w q_x over those 4 (an exact int32), s = d_w[b] · d_x[b] (rounded to float32),
//   acc[l] = fma(float(p), s, acc[l]); then y = ((a0 + a2) + (a1 + a3)) with a = the fixed tree of
//   halvings of acc (lanes i + 8, then i + 4), as the skinny float kernels sum.
//
// The product runs on AVX512-VNNI (vpdpbusd) where the CPU reports it, else AVX2 (vpmaddubsw),
// else scalar code; all three give bit-identical results (checked in tests/unit). Shapes in
// elements; X rows with stride x_stride; Y (rows, out) contiguous; output rows are split across
// ATen's intra-op threads.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

inline constexpr int64_t kInt8Block = 32;

// The instruction set of the integer products; kAuto: the best the CPU has.
enum class Int8Isa { kAuto, kAvx512Vnni, kAvx2, kScalar };

// Whether this CPU (and this build) runs `isa`; kAuto and kScalar always.
bool Int8IsaSupported(Int8Isa isa);
// The instruction set kAuto resolves to on this CPU.
Int8Isa Int8IsaInUse();
const char* Int8IsaName(Int8Isa isa);

// w (out, in) float32 row-major -> q (out, in) and scales (out, in / kInt8Block). `in` must be
// a multiple of kInt8Block. per_row: one scale (amax of the row / 127) repeated in every block.
void QuantizeWeightInt8(const float* w, int64_t out, int64_t in, bool per_row, int8_t* q,
                        float* scales);

// `blocks` consecutive blocks of kInt8Block activations quantized as Int8Gemm quantizes X's
// rows, as vector code: the same bits as QuantizeWeightInt8 gives them per block (tested).
void QuantizeBlocksInt8(const float* v, int64_t blocks, int8_t* q, float* scales);

// y (rows, out) = x Wᵀ as defined above, for W as QuantizeWeightInt8 made it. rows >= 1.
void Int8Gemm(const int8_t* q, const float* scales, int64_t out, int64_t in, const float* x,
              int64_t x_stride, int64_t rows, float* y, Int8Isa isa = Int8Isa::kAuto);

}  // namespace attnserve::kernels
