// y = x Wᵀ (no bias) for x (..., in) and W (out, in), as the mixers and the model apply their
// weight matrices.
//
// On the CPU a LinearWeight keeps its matrix only in the layout its kernel reads, and every row
// count (a decode step's rows, one per session; a prefill chunk's, 64 at a time: DotRowTiles)
// goes through that one kernel, so that a row's result does not depend on the other rows of its
// batch and a prefilled row has the bits a step would give it.
//
// WeightFormat::kFloat32: W in float32 panels of 32 output rows (panel_gemm.h), one FMA kernel
// with X's values broadcast: 80-88% of the FMA peak from 24 rows on, against OpenBLAS sgemm's
// 110-200 GFLOP/s on these shapes (docs/benchmarks.md). A weight on a device, or not
// float32, stays as it is (at::linear).
//
// WeightFormat::kBfloat16 (--weight_precision=bf16, whose values the server rounds to bfloat16
// at load): the same panels in bfloat16, half the bytes, widened in registers.
//
// WeightFormat::kBfloat16Dot (--weight_precision=bf16 --activation_precision=bf16): the same
// panels, against x rounded to bfloat16, through bf16_dot_gemm.h (vdpbf16ps where the CPU has
// it, llama.cpp's BF16 arithmetic): half the instructions of widening the weights, at the cost of
// the activations' rounding. The panels have no denormals (flushed to zero, as the instruction
// reads them). Prefill chunks as kBfloat16's.
//
// WeightFormat::kInt8 (--weight_precision=int8): W is quantized at construction to int8 with a
// float32 scale per block of 32 (int8_gemm.h, llama.cpp's Q8_0 granularity); every row goes to
// Int8Gemm, which quantizes each row of x per block of 32 too and multiplies in integers
// (AVX512-VNNI, else AVX-VNNI, else AVX2, else scalar: the same bits), batch-invariant like the
// float kernels; prefill chunks 64 rows at a time (DotRowTiles: vpdpbusd does four times the
// FMA's multiply-adds; pp512 on mamba-130m 746 -> 1057-1169 tok/s, docs/benchmarks.md), so that
// every row, prefilled or stepped, is quantized and multiplied alike. A W whose `in` is not a
// multiple of 32 (mamba's dt_proj) stays float32, as llama.cpp keeps such tensors wider.
//
// Memory: a LinearWeight keeps one matrix, in its format: float32 or bfloat16 panels (the last
// panel padded to 32 rows) or int8 with its scales (a little over a quarter of float32).
//
// Linear(x, weight), for a float32 tensor without a LinearWeight: up to kSkinnyGemmMaxRows rows
// of a step and kSkinnyGemmMaxSequenceRows of a sequence through the row-major skinny kernel
// (skinny_gemm.h), more through at::linear (sgemm).
#pragma once

#include <ATen/core/Tensor.h>

namespace attnserve::kernels {

// How a LinearWeight keeps its matrix for its products (above). kInt8PerRow: int8 with
// one scale per row (stored once per block: the same kernel and speed), for accuracy
// comparisons against kInt8's scale per block of 32.
enum class WeightFormat { kFloat32, kBfloat16, kBfloat16Dot, kInt8, kInt8PerRow };

class LinearWeight {
 public:
  LinearWeight() = default;
  // `weight` (out, in) float32; made contiguous. With kBfloat16(Dot) its values must be
  // bfloat16-exact; with kInt8 (CPU only) it is quantized. Only the matrix of the format is kept
  // (a weight not on the CPU stays as it is).
  LinearWeight(const at::Tensor& weight, WeightFormat format);
  explicit LinearWeight(const at::Tensor& weight, bool bf16_copy = false)
      : LinearWeight(weight, bf16_copy ? WeightFormat::kBfloat16 : WeightFormat::kFloat32) {}

  // Whether it holds a matrix (a default-constructed one does not).
  bool defined() const { return out_ > 0; }
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  at::Device device() const { return device_; }
  // W as float32 (out, in): a new tensor unpacked from the panels, or the int8 matrix widened
  // (d · q per block); the kept tensor itself on a device.
  at::Tensor Float32Weight() const;
  // Rows `ids` (int64, any shape) of W as float32, (ids..., in): an embedding lookup in a matrix
  // kept as float32 or bfloat16 panels (exact). Not for int8 (its rows are quantized).
  at::Tensor Rows(const at::Tensor& ids) const;
  // Bytes of the matrices kept (W in its format, int8's scales).
  int64_t Bytes() const;
  // Whether the products read int8 (false where kInt8 kept float32: `in` % 32 != 0, or the
  // weight is not on the CPU).
  bool int8() const { return int8_.defined(); }
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  // Rows of a prefill chunk in one product call (kSkinnyGemmMaxRows: a call's X rows stay in L2
  // while W streams past them).
  static constexpr int64_t kDotRowTile = 64;
  // y = x Wᵀ for any number of rows through the panel, bf16-dot or int8 kernels (whichever W
  // has), kDotRowTile rows at a time: each row's bits are those of the decode step's.
  at::Tensor DotRowTiles(const at::Tensor& x) const;
  const uint32_t* Panels() const {
    return reinterpret_cast<const uint32_t*>(bf16_panels_.data_ptr());
  }
  // Output rows [first, first + rows) of W as float32 into `out` (rows, in), from the panels or
  // int8_.
  void Widen(int64_t first, int64_t rows, float* out) const;

  int64_t out_ = 0, in_ = 0;
  at::Device device_ = at::kCPU;
  at::Tensor weight_;       // (out, in) as given on a device (or not float32), else undefined
  at::Tensor f32_panels_;   // kFloat32 on the CPU: panel_gemm.h's float32 panels, or undefined
  at::Tensor bf16_panels_;  // kBfloat16(Dot): panel_gemm.h's words (int32), or undefined
  bool bf16_dot_ = false;   // kBfloat16Dot: the panels multiply bfloat16-rounded activations
  at::Tensor int8_;         // uint8: int8_gemm.h's panels of biased bytes; or undefined
  at::Tensor int8_scales_;  // float32: the panels' scales, with int8_
};

// Whether `format` keeps the matrix in bfloat16 (panels).
inline bool IsBfloat16(WeightFormat format) {
  return format == WeightFormat::kBfloat16 || format == WeightFormat::kBfloat16Dot;
}

// Whether `format` is one of the int8 ones.
inline bool IsInt8(WeightFormat format) {
  return format == WeightFormat::kInt8 || format == WeightFormat::kInt8PerRow;
}

// For a weight without a LinearWeight of its own.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight);

}  // namespace attnserve::kernels
