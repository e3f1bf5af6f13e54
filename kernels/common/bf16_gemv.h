// y = W x for W (rows, cols) stored as bfloat16 (row-major, contiguous) and x, y float32:
// each weight is widened to float32 (exact: bfloat16 is float32's upper half) and accumulated
// in float32. A decode step is bound by the bytes of weights it reads; bfloat16 halves them.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

// Rows are split across ATen's intra-op threads. `weight` holds the raw bfloat16 bits.
void Bf16Gemv(const uint16_t* weight, int64_t rows, int64_t cols, const float* x, float* y);

}  // namespace attnserve::kernels
