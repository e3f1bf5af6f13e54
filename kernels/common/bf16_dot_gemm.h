// Y = X Wᵀ with bfloat16 weights AND bfloat16 activations, for a few rows of X (a decode batch:
// one row per session): the arithmetic of the CPU's `vdpbf16ps` (AVX512_BF16), and of
// llama.cpp's BF16 product, which rounds activations to bfloat16 the same way.
//
// Definition (every instruction set gives these bits):
//   each x is rounded to bfloat16 (to nearest, ties to even; a float32 denormal becomes a signed
//   zero, as the instruction treats bfloat16 denormals); W holds bfloat16 bits without
//   denormals (LinearWeight flushes them).
//   16 float32 lanes acc[0..15] = +0; for each chunk of 32 columns starting at c (the last one
//   padded with zeros): acc[l] = (acc[l] + w[c+2l+1]·x[c+2l+1]) + w[c+2l]·x[c+2l], each product
//   exact in float32 and each addition rounded, odd element first: what vdpbf16ps does (checked
//   bit for bit on the hardware by tests/unit/bf16_dot_gemm_test.cc);
//   y = the fixed tree of halvings of acc (skinny_tiles.h's Sum).
// The one exception: a partial sum below float32's normal range (2^-126) is flushed to zero by
// the instruction and kept by the portable code.
//
// A row's result does not depend on the other rows of its batch. The product runs on
// AVX512_BF16 where the CPU reports it, else as portable vector code (AVX-512 / AVX2 /
// baseline clones: twice the instructions). Shapes in elements: w (out, in) with `in` even,
// x (rows, in) with row stride x_stride, y (rows, out) contiguous; output rows are split
// across ATen's intra-op threads.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

// kAuto: AVX512_BF16 where the CPU (and this build) has it, else kPortable.
enum class Bf16DotIsa { kAuto, kAvx512Bf16, kPortable };

bool Bf16DotIsaSupported(Bf16DotIsa isa);  // kAuto and kPortable always
Bf16DotIsa Bf16DotIsaInUse();              // what kAuto resolves to here
const char* Bf16DotIsaName(Bf16DotIsa isa);

// float32 -> bfloat16 bits as defined above (NaN stays a quiet NaN).
uint16_t RoundToBf16(float value);

// Rows of X as the product reads them: out[r * words + c] = RoundToBf16(x[r][2c]) |
// RoundToBf16(x[r][2c + 1]) << 16, for c < words; the same bits as RoundToBf16, as vector code.
// x has row stride x_stride (elements); out is (rows, words) contiguous.
void RoundRowsToBf16Pairs(const float* x, int64_t x_stride, int64_t rows, int64_t words,
                          uint32_t* out);

void SkinnyGemmBf16Dot(const uint16_t* w, int64_t out, int64_t in, const float* x, int64_t x_stride,
                       int64_t rows, float* y, Bf16DotIsa isa = Bf16DotIsa::kAuto);

}  // namespace attnserve::kernels
