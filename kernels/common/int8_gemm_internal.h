// What int8_gemm.cc and its 256-bit kernels (int8_gemm_ymm.inc) share: X's rows as the products
// read them, and the walk over the panels (int8_gemm.h). Internal to kernels/common; include
// only from those files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/int8_gemm.h"

namespace attnserve::kernels::int8_detail {

// One panel block's bytes: 8 steps of 16 outputs' 4 bytes.
inline constexpr int64_t kPanelBlockBytes = kInt8PanelOutputs * kInt8Block;

// X's rows as the products read them: q (rows, in) int8 in natural order, d (rows, in /
// kInt8Block) scales, and c (rows, in / kInt8Block) = -128 · Σ q over each block: vpdpbusd
// multiplies the biased weight bytes q_w + 128, and c + Σ (q_w + 128) q_x = Σ q_w q_x exactly.
struct QuantizedX {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> c;
  int64_t in = 0;
  const int8_t* q_row(int64_t r) const { return q.data() + r * in; }
  const float* d_row(int64_t r) const { return d.data() + r * (in / kInt8Block); }
  const int32_t* c_row(int64_t r) const { return c.data() + r * (in / kInt8Block); }
};

// Calls rows_fn(first panel, panel count g, first row, row count, block index, blocks) for
// panels [first, last) of an (out, in) matrix, taken `group` at a time (the last group may be
// smaller), against rows [0, rows) of X: each group meets `blocks` blocks of at most
// max_rows(g) rows of near-equal sizes (8 rows at a maximum of 6: 4 + 4, not 6 + 2), one after
// the other while its panels sit in L1.
template <typename MaxRows, typename RowsFn>
inline void ForPanelBlocks(int64_t first, int64_t last, int64_t rows, int group,
                           const MaxRows& max_rows, const RowsFn& rows_fn) {
  for (int64_t panel = first; panel < last; panel += group) {
    const int g = static_cast<int>(std::min<int64_t>(group, last - panel));
    const int max_block = max_rows(g);
    const int64_t blocks = (rows + max_block - 1) / max_block;
    for (int64_t b = 0, l = 0; b < blocks; ++b) {
      const int n = static_cast<int>((rows - l) / (blocks - b));
      rows_fn(panel, g, l, n, b, blocks);
      l += n;
    }
  }
}

// Panels [first, last) against X's rows on 256-bit vectors, the header's bits
// (int8_gemm_ymm.inc): AVX-VNNI's vpdpbusd (int8_gemm_avx_vnni.cc), AVX2's vpmaddubsw and
// vpmaddwd (int8_gemm_avx2.cc). Only where Int8IsaSupported says the CPU has them; on x86 with
// GCC or Clang only. y (rows, out).
void AvxVnniPanels(const uint8_t* panels, const float* scales, int64_t first, int64_t last,
                   int64_t out, int64_t in, const QuantizedX& x, int64_t rows, float* y);
void Avx2Panels(const uint8_t* panels, const float* scales, int64_t first, int64_t last,
                int64_t out, int64_t in, const QuantizedX& x, int64_t rows, float* y);

}  // namespace attnserve::kernels::int8_detail
