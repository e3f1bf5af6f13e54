// Y = X Wᵀ with 8-bit weights and 8-bit activations for any number of rows of X (a decode batch:
// one row per session; a prefill chunk), the arithmetic of llama.cpp's Q8_0 × Q8_0 product with
// float32 scales:
//
//   W (out, in), in a multiple of kInt8Block, as int8 q_w in [-127, 127] and one float32 scale
//   d_w per block of kInt8Block consecutive elements of a row (or, QuantizeWeightInt8 with
//   per_row, one scale for the whole row, stored once per block): w ≈ d_w · q_w, q_w =
//   round(w / (amax / 127)) as Q8_0 rounds, and d_w refit to those q_w in least squares
//   (Σ w q_w / Σ q_w², as llama.cpp's k-quants refit their scales; Q8_0 keeps amax / 127).
//   X (rows, in) quantized on every call the same way, per block of kInt8Block: q_x =
//   round(x / (amax / 127)), d_x = Σ x q_x / Σ q_x² (QuantizeBlockInt8Scalar).
//
// y[r][j] is defined by integer products and one fixed float order, so that every instruction
// set gives the same bits (and a row's result does not depend on the batch it sits in): one
// float32 sum per output over W's blocks in order,
//   acc = +0; for b = 0 .. in / kInt8Block - 1: p = Σ q_w q_x over the block's 32 elements (an
//   exact int32; below 2^24, so exact as a float too), s = d_w[b] · d_x[b] (rounded to float32),
//   acc = fma(float(p), s, acc);  y = acc.
//
// Panels. W's rows are stored in panels of kInt8PanelOutputs (16) rows, the last padded with
// zero rows (scale 0): panel P, block b is 8 steps of 64 bytes, step m holding elements
// 32 b + 4 m .. 32 b + 4 m + 3 of each of the panel's 16 rows (Int8PanelIndex), the operand of
// one vpdpbusd that sums 4 products into each of 16 int32 lanes, one lane per output. X's 4
// bytes of that step are broadcast, so X stays in its natural order. A panel's scales are 16
// floats a block (Int8PanelScaleIndex). Stored bytes are biased, q_w + 128 (an unsigned byte, as
// vpdpbusd multiplies unsigned by signed bytes; each X block's sum starts at -128 Σ q_x to cancel
// the bias exactly). A panel (16 · in bytes: 12-24 KB for mamba-130m) meets a block of up to 8
// rows of X at a time while it sits in L1; from 9 rows on, two adjacent panels meet blocks of up
// to 6 rows and share each broadcast (AVX512-VNNI).
//
// The product runs on the best the CPU reports: AVX512-VNNI (vpdpbusd on 512-bit vectors), else
// AVX-VNNI (vpdpbusd on 256 bits: Intel's client cores and E-core Xeons have it without
// AVX-512), else AVX2 (vpmaddubsw), else scalar code; all four give bit-identical results
// (checked in tests/unit). Shapes in elements; X rows with stride x_stride; Y (rows, out)
// contiguous; panels are split across ATen's intra-op threads.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

inline constexpr int64_t kInt8Block = 32;
// Output rows of a panel (16 int32 lanes of 4 bytes).
inline constexpr int64_t kInt8PanelOutputs = 16;

// The instruction set of the integer products; kAuto: the best the CPU has.
enum class Int8Isa { kAuto, kAvx512Vnni, kAvxVnni, kAvx2, kScalar };

// Whether this CPU (and this build) runs `isa`; kAuto and kScalar always.
bool Int8IsaSupported(Int8Isa isa);
// The instruction set kAuto resolves to on this CPU.
Int8Isa Int8IsaInUse();
const char* Int8IsaName(Int8Isa isa);

// Bytes of the panels of an (out, in) matrix (out rounded up to whole panels), and floats of
// their scales.
int64_t Int8PanelBytes(int64_t out, int64_t in);
int64_t Int8PanelScaleCount(int64_t out, int64_t in);
// Where element (j, k) of W sits in its panels (above), and the scale of row j's block b.
int64_t Int8PanelIndex(int64_t in, int64_t j, int64_t k);
int64_t Int8PanelScaleIndex(int64_t in, int64_t j, int64_t b);

// w (out, in) float32 row-major -> panels (Int8PanelBytes: q_w + 128 in the panel order above)
// and their scales (Int8PanelScaleCount). `in` must be a multiple of kInt8Block. per_row: one
// scale (amax of the row / 127, refit) repeated in every block.
void QuantizeWeightInt8(const float* w, int64_t out, int64_t in, bool per_row, uint8_t* panels,
                        float* scales);

// Rows [first, first + count) of a matrix QuantizeWeightInt8 made, back in float32 and natural
// order: dst (count, in) = d_w · q_w (exact).
void DequantizeWeightInt8(const uint8_t* panels, const float* scales, int64_t in, int64_t first,
                          int64_t count, float* dst);

// The activations' quantization, as plain scalar code: n values -> q = round(v / (amax / 127))
// clamped to [-127, 127] (NaN -> 0; NaNs do not count in amax), and the scale d = Σ v q / Σ q²
// (for n = kInt8Block summed in a fixed tree), or amax / 127 where that is not finite and
// positive.
void QuantizeBlockInt8Scalar(const float* v, int64_t n, int8_t* q, float* scale);

// `blocks` consecutive blocks of kInt8Block activations quantized as Int8Gemm quantizes X's
// rows, as vector code, in natural order: QuantizeBlockInt8Scalar's bits per block (tested).
void QuantizeBlocksInt8(const float* v, int64_t blocks, int8_t* q, float* scales);

// y (rows, out) = x Wᵀ as defined above, for W as QuantizeWeightInt8 made it. rows >= 1.
void Int8Gemm(const uint8_t* panels, const float* scales, int64_t out, int64_t in, const float* x,
              int64_t x_stride, int64_t rows, float* y, Int8Isa isa = Int8Isa::kAuto);

}  // namespace attnserve::kernels
