// y = x Wᵀ (no bias) for x (..., in) and W (out, in), as the mixers and the model apply their
// weight matrices.
//
// Up to kSkinnyGemmMaxRows rows of a step (x (B, in) or (B, 1, in): one row per session of
// the batch), and up to kSkinnyGemmMaxSequenceRows of a sequence (x (..., L, in), L > 1: a
// prefill chunk, where sgemm is faster beyond that), go to the skinny kernels (skinny_gemm.h),
// which stream W once without packing it, reading the bfloat16 copy when there is one
// (LinearWeight(w, /*bf16_copy=*/true), for weights whose values are bfloat16-exact: the server's
// --weight_precision=bf16 rounds them at load): half the bytes. A row's result there does not
// depend on the other rows (bit-identical alone or in a batch). More rows (prefill) go to
// at::linear (OpenBLAS sgemm) on the float32 W, which holds the same values: the paths differ only
// in summation order.
//
// WeightFormat::kBfloat16Dot (--weight_precision=bf16 --activation_precision=bf16): the skinny rows
// also round x to bfloat16 and multiply through bf16_dot_gemm.h (vdpbf16ps where the CPU has
// it, llama.cpp's BF16 arithmetic): half the instructions of widening the weights, at the cost of
// the activations' rounding. Its bfloat16 copy has no denormals (flushed to zero, as the
// instruction reads them). A W whose `in` is odd keeps kBfloat16's exact products. Prefill
// chunks go through the same products, 64 rows at a time (DotRowTiles), not sgemm: twice the
// FMA peak's work per instruction (pp512 on mamba-130m 682 -> 1191 tok/s, docs/benchmarks.md,
// session 18), and every row has the bits a step would give it.
//
// WeightFormat::kInt8 (--weight_precision=int8): W is quantized at construction to int8 with a
// float32 scale per block of 32 (int8_gemm.h, llama.cpp's Q8_0 granularity); the skinny rows go to
// Int8Gemm, which quantizes each row of x per block of 32 too and multiplies in integers
// (AVX512-VNNI, else AVX2, else scalar: the same bits), batch-invariant like the float kernels.
// Prefill chunks too, 64 rows at a time (DotRowTiles: vpdpbusd does four times the FMA's
// multiply-adds; pp512 on mamba-130m 746 -> 1057-1169 tok/s, docs/benchmarks.md, session 18),
// so that every row, prefilled or stepped, is quantized and multiplied alike. A W whose `in` is
// not a multiple of 32 (mamba's dt_proj) stays float32, as llama.cpp keeps such tensors wider.
//
// Memory: a LinearWeight keeps one matrix, in its format: float32, bfloat16 (half the bytes) or
// int8 with its scales (a little over a quarter). The sgemm rows of a kBfloat16 W widen it
// to float32 a block of 4 MB of output rows at a time and multiply each block by sgemm straight
// into the output's columns: the same values as a float32 copy of W would give, without keeping
// one.
#pragma once

#include <ATen/core/Tensor.h>

namespace attnserve::kernels {

// How a LinearWeight keeps its matrix for the skinny products (above). kInt8PerRow: int8 with
// one scale per row (stored once per block: the same kernel and speed), for accuracy
// comparisons against kInt8's scale per block of 32.
enum class WeightFormat { kFloat32, kBfloat16, kBfloat16Dot, kInt8, kInt8PerRow };

class LinearWeight {
 public:
  LinearWeight() = default;
  // `weight` (out, in) float32; made contiguous. With kBfloat16(Dot) its values must be
  // bfloat16-exact; with kInt8 (CPU only) it is quantized. Only the matrix of the format is kept
  // (a weight not on the CPU stays float32 as it is).
  LinearWeight(const at::Tensor& weight, WeightFormat format);
  explicit LinearWeight(const at::Tensor& weight, bool bf16_copy = false)
      : LinearWeight(weight, bf16_copy ? WeightFormat::kBfloat16 : WeightFormat::kFloat32) {}

  // Whether it holds a matrix (a default-constructed one does not).
  bool defined() const { return out_ > 0; }
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  at::Device device() const { return device_; }
  // W as float32: the kept float32 matrix, or the bfloat16 or int8 one widened (a new tensor; the
  // values the sgemm rows multiply by: d · q per block for int8).
  at::Tensor Float32Weight() const;
  // Rows `ids` (int64, any shape) of W as float32, (ids..., in): an embedding lookup in a matrix
  // kept as float32 or bfloat16 (exact). Not for int8 (its rows are quantized).
  at::Tensor Rows(const at::Tensor& ids) const;
  // Bytes of the matrices kept (W in its format, int8's scales).
  int64_t Bytes() const;
  // Whether the skinny products read int8 (false where kInt8 kept float32: `in` % 32 != 0, or
  // the weight is not on the CPU).
  bool int8() const { return int8_.defined(); }
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  // Rows of a prefill chunk in one Int8Gemm or SkinnyGemmBf16Dot call (kSkinnyGemmMaxRows: a
  // call's X rows stay in L2 while W streams past them).
  static constexpr int64_t kDotRowTile = 64;
  // y = x Wᵀ for any number of rows through the int8, bf16-dot or panel kernels (whichever W
  // has), kDotRowTile rows at a time: each row's bits are those of the decode step's.
  at::Tensor DotRowTiles(const at::Tensor& x) const;
  const uint32_t* Panels() const {
    return reinterpret_cast<const uint32_t*>(bf16_panels_.data_ptr());
  }
  // Output rows [first, first + rows) of W as float32 into `out` (rows, in), from bf16_ or int8_.
  void Widen(int64_t first, int64_t rows, float* out) const;
  // y = x Wᵀ on sgemm for a W kept in bfloat16 or int8, widened a block of rows at a time.
  at::Tensor WidenedProduct(const at::Tensor& x) const;

  int64_t out_ = 0, in_ = 0;
  at::Device device_ = at::kCPU;
  at::Tensor weight_;       // (out, in) float32, or undefined when bf16_ or int8_ holds W
  at::Tensor bf16_;         // (out, in) bfloat16 (kBfloat16Dot), or undefined
  at::Tensor bf16_panels_;  // kBfloat16: panel_gemm.h's words (int32), or undefined
  bool bf16_dot_ = false;   // kBfloat16Dot: bf16_ multiplies bfloat16-rounded activations
  at::Tensor int8_;         // (out, in) uint8: int8_gemm.h's packed, biased rows; or undefined
  at::Tensor int8_scales_;  // (out, in / 32) float32 with int8_
};

// Whether `format` keeps a bfloat16 copy.
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
