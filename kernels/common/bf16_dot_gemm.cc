#include "kernels/common/bf16_dot_gemm.h"

#include <cstring>
#include <memory>

#include "kernels/common/panel_gemm.h"
#include "kernels/common/skinny_tiles.h"
#include "kernels/common/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNSERVE_BF16DOT_X86 1
#else
#define ATTNSERVE_BF16DOT_X86 0
#endif

namespace attnserve::kernels {
namespace {

using skinny::UInt32x16;
using vec::Float16;
using vec::kLanes;

// RoundToBf16 on 16 lanes (the bfloat16 bits in each lane's low half), branch-free.
ATTNSERVE_VEC_INLINE UInt32x16 RoundVector(Float16 v) {
  UInt32x16 bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const UInt32x16 nan = (bits >> 16) | 0x40u;
  const UInt32x16 signed_zero = (bits >> 16) & 0x8000u;
  UInt32x16 r = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  r = (bits & 0x7F800000u) == 0 ? signed_zero : r;
  r = (bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : r;
  return r;
}

Bf16DotIsa Resolve(Bf16DotIsa isa) {
  if (isa != Bf16DotIsa::kAuto) return isa;
  return Bf16DotIsaSupported(Bf16DotIsa::kAvx512Bf16) ? Bf16DotIsa::kAvx512Bf16
                                                      : Bf16DotIsa::kPortable;
}

}  // namespace

bool Bf16DotIsaSupported(Bf16DotIsa isa) {
  switch (isa) {
    case Bf16DotIsa::kAuto:
    case Bf16DotIsa::kPortable:
      return true;
    case Bf16DotIsa::kAvx512Bf16:
#if ATTNSERVE_BF16DOT_X86
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512bf16");
#else
      return false;
#endif
  }
  return false;
}

Bf16DotIsa Bf16DotIsaInUse() {
  static const Bf16DotIsa isa = Resolve(Bf16DotIsa::kAuto);
  return isa;
}

const char* Bf16DotIsaName(Bf16DotIsa isa) {
  switch (isa) {
    case Bf16DotIsa::kAuto:
      return "auto";
    case Bf16DotIsa::kAvx512Bf16:
      return "avx512-bf16";
    case Bf16DotIsa::kPortable:
      return "portable";
  }
  return "?";
}

uint16_t RoundToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  if ((bits & 0x7F800000u) == 0) return static_cast<uint16_t>((bits >> 16) & 0x8000);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

ATTNSERVE_MULTIVERSION
void RoundRowsToBf16Pairs(const float* x, int64_t x_stride, int64_t rows, int64_t in,
                          uint32_t* out) {
  const int64_t words = (in + 1) / 2, whole = in / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * x_stride;
    uint32_t* p = out + r * words;
    int64_t c = 0;
    for (; c + kLanes <= whole; c += kLanes) {  // 32 floats -> 16 words
      const UInt32x16 lo = RoundVector(vec::Load(row + 2 * c));
      const UInt32x16 hi = RoundVector(vec::Load(row + 2 * c + kLanes));
      const UInt32x16 even = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                                     22, 24, 26, 28, 30);
      const UInt32x16 odd = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21,
                                                    23, 25, 27, 29, 31);
      const UInt32x16 words16 = even | (odd << 16);
      std::memcpy(p + c, &words16, sizeof(words16));
    }
    for (; c < whole; ++c) {
      p[c] = RoundToBf16(row[2 * c]) | static_cast<uint32_t>(RoundToBf16(row[2 * c + 1])) << 16;
    }
    if (words > whole) p[whole] = RoundToBf16(row[in - 1]);
  }
}

void Bf16DotGemm(const uint32_t* panels, int64_t out, int64_t in, const float* x, int64_t x_stride,
                 int64_t rows, float* y, Bf16DotIsa isa) {
  isa = isa == Bf16DotIsa::kAuto ? Bf16DotIsaInUse() : isa;
  const int64_t words = (in + 1) / 2;
  // Not value-initialized: every word is written below (this runs on one thread, per call).
  std::unique_ptr<uint32_t[]> pairs(new uint32_t[static_cast<size_t>(rows * words)]);
  RoundRowsToBf16Pairs(x, x_stride, rows, in, pairs.get());
  PanelGemmBf16Pairs(panels, out, in, pairs.get(), rows, y, isa == Bf16DotIsa::kAvx512Bf16);
}

}  // namespace attnserve::kernels
