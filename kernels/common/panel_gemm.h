// Y = X Wᵀ with W (out, in) kept in panels, as bfloat16 or float32: the layout of a GEMM's packed
// operand,
// kept for good, so that any number of rows of X (a decode batch: one row per session; a
// prefill chunk) multiplies it at the FMA's rate instead of at the rate of a dot product per
// (weight row, X row) pair.
//
// Layout (PackBf16Panels): W's rows in panels of kPanelOutputs = 32; the last panel padded with
// zero rows, and an odd `in` with a zero column. Panel q is one contiguous run of `pairs` =
// ceil(in / 2) groups of 32 uint32 words: word o of pair p holds the bfloat16 bits of
// w[32q + o][2p] in its low half and of w[32q + o][2p + 1] in its high half. A pair widens to
// float32 with one shift (the even column) and one mask (the odd one), and 16 of its words are
// the (weights, pairs) operand vdpbf16ps reads. Float32 panels (PackF32Panels) hold the same
// pairs as 64 floats: the even column's 32 outputs, then the odd column's.
//
// The product, for each output j and row r of X: the even and the odd columns summed apart,
// one multiply-add after the other in column order, then added:
//   E = ((0 + w[j][0]·x[r][0]) + w[j][2]·x[r][2]) + ...,  O = ((0 + w[j][1]·x[r][1]) + ...),
//   y[r][j] = E + O,
// each multiply-add fused where the CPU has FMA (every CPU of this project's x86-64-v3 and v4
// builds). The panel's 32 outputs are two 16-lane vectors; X's values are broadcast. A row's
// result does not depend on the other rows of X, on how many there are, or on the thread that
// computes it: a prefill chunk's rows get the bits each would get alone in a decode step.
//
// Threads: panels are split across ATen's intra-op threads (ParallelTileLanes). Each
// panel meets every row of X, 6 at a time (2 at a time on CPUs without AVX-512: 16 registers),
// while it sits in L1/L2; X's rows stay in L2 (the caller passes at most a few hundred KB of
// them). From two blocks of 6 rows on, the thread's next panel is prefetched into L2 meanwhile.
//
// Shapes in elements: x (rows, in) with row stride x_stride >= in; y (rows, out) contiguous.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

inline constexpr int64_t kPanelOutputs = 32;

// uint32 words of the panels of an (out, in) matrix.
int64_t Bf16PanelWords(int64_t out, int64_t in);

// Packs W, given as bfloat16 bits (out, in) row-major, into `panels` (Bf16PanelWords words).
void PackBf16Panels(const uint16_t* w, int64_t out, int64_t in, uint32_t* panels);

// Rows [first, first + count) of W as float32 into dst (count, in) row-major: exact (the
// bfloat16 values widened).
void UnpackBf16PanelRows(const uint32_t* panels, int64_t in, int64_t first, int64_t count,
                         float* dst);

void PanelGemmBf16(const uint32_t* panels, int64_t out, int64_t in, const float* x,
                   int64_t x_stride, int64_t rows, float* y);

// The same for float32 panels: floats of the panels, packing a row-major float32 W, rows back
// (exact), and the product (the definition above, W's values as they are).
int64_t F32PanelFloats(int64_t out, int64_t in);
void PackF32Panels(const float* w, int64_t out, int64_t in, float* panels);
void UnpackF32PanelRows(const float* panels, int64_t in, int64_t first, int64_t count, float* dst);
void PanelGemmF32(const float* panels, int64_t out, int64_t in, const float* x, int64_t x_stride,
                  int64_t rows, float* y);

// The same panels against X rounded to bfloat16 (--activation_precision=bf16): bf16_dot_gemm.h's
// definition, one sum a pair after the other per output. x_pairs (rows, ceil(in / 2)) words as
// RoundRowsToBf16Pairs makes them. `hardware`: on vdpbf16ps (the caller checked that the CPU
// has AVX512_BF16), else portable vector code with the same bits.
void PanelGemmBf16Pairs(const uint32_t* panels, int64_t out, int64_t in, const uint32_t* x_pairs,
                        int64_t rows, float* y, bool hardware);

}  // namespace attnserve::kernels
