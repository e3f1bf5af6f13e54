// Y = X Wᵀ with 8-bit weights and 8-bit activations for a few rows of X (a decode batch: one row
// per session), the arithmetic of llama.cpp's Q8_0 × Q8_0 product with float32 scales:
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
// set gives the same bits (and a row's result does not depend on the batch it sits in):
//   16 float32 lanes acc[0..15] = +0; for each group g of kInt8GroupBlocks (16) consecutive
//   blocks (the last group may have fewer): lane l covers block b = 16 g + l, p = Σ q_w q_x over
//   the block's 32 elements (an exact int32; below 2^24, so exact as a float too), s = d_w[b] ·
//   d_x[b] (rounded to float32), acc[l] = fma(float(p), s, acc[l]), with p = s = 0 for a lane
//   past the last block; then y = vec::Sum(acc), the fixed tree of halvings (lanes i + 8, then
//   i + 4, then (0 + 2) + (1 + 3)) the skinny float kernels sum with.
//
// Packed rows. The integer sum of a whole block is what lets the VNNI kernel convert and scale
// once per 8 vpdpbusd instead of after each one: a vector step holds 4 bytes of each of 16
// blocks. So W's rows are stored packed: group g (gb blocks) fills bytes [512 g, 512 g + 32 gb)
// of its row, as 8 steps of 4 gb bytes, step m holding elements 4m .. 4m+3 of each of the
// group's blocks in block order (Int8PackedIndex). And biased: a stored byte is q_w + 128 (an
// unsigned byte, as vpdpbusd multiplies unsigned by signed bytes; X's row carries -128 Σ q_x
// per block to cancel the bias exactly). X is packed the same way on every call.
//
// The product runs on the best the CPU reports: AVX512-VNNI (vpdpbusd on 512-bit vectors), else
// AVX-VNNI (vpdpbusd on 256 bits: Intel's client cores and E-core Xeons have it without
// AVX-512), else AVX2 (vpmaddubsw), else scalar code; all four give bit-identical results
// (checked in tests/unit). Shapes in
// elements; X rows with stride x_stride; Y (rows, out) contiguous; output rows are split across
// ATen's intra-op threads.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

inline constexpr int64_t kInt8Block = 32;
// Blocks in one vector step of the packed order (16 int32 lanes of 4 bytes).
inline constexpr int64_t kInt8GroupBlocks = 16;

// The instruction set of the integer products; kAuto: the best the CPU has.
enum class Int8Isa { kAuto, kAvx512Vnni, kAvxVnni, kAvx2, kScalar };

// Whether this CPU (and this build) runs `isa`; kAuto and kScalar always.
bool Int8IsaSupported(Int8Isa isa);
// The instruction set kAuto resolves to on this CPU.
Int8Isa Int8IsaInUse();
const char* Int8IsaName(Int8Isa isa);

// Where element k (0 <= k < in) of a row of `in` elements sits in its packed row (above).
int64_t Int8PackedIndex(int64_t in, int64_t k);

// w (out, in) float32 row-major -> packed (out, in) biased bytes (q_w + 128 in the packed order)
// and scales (out, in / kInt8Block). `in` must be a multiple of kInt8Block. per_row: one scale
// (amax of the row / 127) repeated in every block.
void QuantizeWeightInt8(const float* w, int64_t out, int64_t in, bool per_row, uint8_t* packed,
                        float* scales);

// Rows of a matrix QuantizeWeightInt8 made, back in float32 and natural order: out (rows, in) =
// d_w · q_w, from `packed` and `scales` pointing at the first of those rows.
void DequantizeWeightInt8(const uint8_t* packed, const float* scales, int64_t rows, int64_t in,
                          float* out);

// The activations' quantization, as plain scalar code: n values -> q = round(v / (amax / 127))
// clamped to [-127, 127] (NaN -> 0; NaNs do not count in amax), and the scale d = Σ v q / Σ q²
// (for n = kInt8Block summed in a fixed tree), or amax / 127 where that is not finite and
// positive.
void QuantizeBlockInt8Scalar(const float* v, int64_t n, int8_t* q, float* scale);

// `blocks` consecutive blocks of kInt8Block activations quantized as Int8Gemm quantizes X's
// rows, as vector code, in natural order: QuantizeBlockInt8Scalar's bits per block (tested).
void QuantizeBlocksInt8(const float* v, int64_t blocks, int8_t* q, float* scales);

// y (rows, out) = x Wᵀ as defined above, for W as QuantizeWeightInt8 made it. rows >= 1.
void Int8Gemm(const uint8_t* packed, const float* scales, int64_t out, int64_t in, const float* x,
              int64_t x_stride, int64_t rows, float* y, Int8Isa isa = Int8Isa::kAuto);

}  // namespace attnserve::kernels
