// RMSNorm of float32 rows in one pass, for the CPU: out = (x · r) · weight with
// r = 1 / sqrt(mean(x²) + epsilon), per row. It replaces six ATen operations (pow, mean, add,
// rsqrt and two products, each dispatched and allocated): at a decode step's one row of
// mamba-130m, 25 norms cost more than the step's scan.
//
// Each row's sum of squares is accumulated in 16 float32 lanes over the columns in order and
// summed by vector_math.h's fixed tree, so a row's result does not depend on the other rows of
// the call (a session's step is bit-identical alone and in any batch).
//
// Shapes: x (rows, width) with row stride x_stride (elements), weight (width), out (rows,
// width) contiguous; out may be x when x_stride == width. Rows are split across ATen's intra-op
// threads when there are enough of them to pay for a parallel region.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnserve::kernels {

void RmsNormRows(const float* x, int64_t x_stride, int64_t rows, int64_t width, const float* weight,
                 float epsilon, float* out);

// x (..., width) -> RMSNorm over the last dimension times weight (width): RmsNormRows for
// contiguous float32 CPU tensors, ATen's operations otherwise (a device's tensors).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double epsilon);

}  // namespace attnserve::kernels
