// Y = X Wᵀ with bfloat16 weights AND bfloat16 activations, for a few rows of X (a decode batch:
// one row per session): the arithmetic of the CPU's `vdpbf16ps` (AVX512_BF16), and of
// llama.cpp's BF16 product, which rounds activations to bfloat16 the same way.
//
// Definition (every instruction set gives these bits):
//   each x is rounded to bfloat16 (to nearest, ties to even; a float32 denormal becomes a signed
//   zero, as the instruction treats bfloat16 denormals); W holds bfloat16 bits without
//   denormals (LinearWeight flushes them), in panel_gemm.h's panels.
//   For each output j: acc = +0; for each pair of columns (2p, 2p + 1) in order (an odd `in`'s
//   last pair padded with zeros): acc = (acc + w[j][2p+1]·x[2p+1]) + w[j][2p]·x[2p], each
//   product exact in float32 and each addition rounded, odd element first: what vdpbf16ps does
//   in each of its lanes (checked bit for bit on the hardware by
//   tests/unit/bf16_dot_gemm_test.cc); y[j] = acc.
// The one exception: a partial sum below float32's normal range (2^-126) is flushed to zero by
// the instruction and kept by the portable code.
//
// A row's result does not depend on the other rows of its batch. The product runs on
// AVX512_BF16 where the CPU reports it, else as portable vector code (AVX-512 / AVX2 /
// baseline clones: twice the instructions). Shapes in elements: x (rows, in) with row stride
// x_stride, y (rows, out) contiguous; panels are split across ATen's intra-op threads.
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

// Rows of X as the product reads them: with words = ceil(in / 2), out[r * words + c] =
// RoundToBf16(x[r][2c]) | RoundToBf16(x[r][2c + 1]) << 16 (0 for column `in` of an odd row);
// the same bits as RoundToBf16, as vector code. x has row stride x_stride (elements); out is
// (rows, words) contiguous.
void RoundRowsToBf16Pairs(const float* x, int64_t x_stride, int64_t rows, int64_t in,
                          uint32_t* out);

// Y = X Wᵀ by the definition above, W as PackBf16Panels made it.
void Bf16DotGemm(const uint32_t* panels, int64_t out, int64_t in, const float* x, int64_t x_stride,
                 int64_t rows, float* y, Bf16DotIsa isa = Bf16DotIsa::kAuto);

}  // namespace attnserve::kernels
