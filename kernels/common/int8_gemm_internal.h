// What int8_gemm.cc and its 256-bit kernels (int8_gemm_ymm.inc) share: X's rows as the products
// read them, and the groups of blocks of the packed order (int8_gemm.h). Internal to
// kernels/common; include only from those two files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/int8_gemm.h"

namespace attnserve::kernels::int8_detail {

// One row of X as the products read it: q (in) int8 in the packed order, d (in / kInt8Block)
// scales, and c (in / kInt8Block) = -128 · Σ q over each block: vpdpbusd multiplies the
// biased weight bytes q_w + 128, and c + Σ (q_w + 128) q_x = Σ q_w q_x exactly.
struct QuantizedX {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> c;
  int64_t in = 0;
  const int8_t* q_row(int64_t r) const { return q.data() + r * in; }
  const float* d_row(int64_t r) const { return d.data() + r * (in / kInt8Block); }
  const int32_t* c_row(int64_t r) const { return c.data() + r * (in / kInt8Block); }
};

// Blocks of the group that starts at block 16 g of nb.
inline int GroupBlocks(int64_t g, int64_t nb) {
  return static_cast<int>(std::min(kInt8GroupBlocks, nb - g * kInt8GroupBlocks));
}
inline int64_t Groups(int64_t nb) { return (nb + kInt8GroupBlocks - 1) / kInt8GroupBlocks; }

// Weight rows [begin, end) against X's rows [0, rows) on 256-bit vectors, the header's bits
// (int8_gemm_ymm.inc): AVX-VNNI's vpdpbusd (int8_gemm_avx_vnni.cc), AVX2's vpmaddubsw and
// vpmaddwd (int8_gemm_avx2.cc). Only where Int8IsaSupported says the CPU has them; on x86 with
// GCC or Clang only.
void AvxVnniRows(const uint8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
                 const QuantizedX& x, int64_t rows, float* y, int64_t out);
void Avx2Rows(const uint8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
              const QuantizedX& x, int64_t rows, float* y, int64_t out);

}  // namespace attnserve::kernels::int8_detail
