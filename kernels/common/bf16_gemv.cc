#include "kernels/common/bf16_gemv.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/vector_math.h"

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;
typedef uint32_t UInt32x16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));

// 16 uint32 words hold 32 bfloat16 weights, two per word: the even-indexed weight in the low
// half, the odd one in the high half. Each becomes a float32 by moving its bits to the top of
// the word, so the widening is one shift and one mask on full-width vectors.
inline void LoadBf16Pairs(const uint16_t* p, Float16* even, Float16* odd) {
  UInt32x16 words;
  std::memcpy(&words, p, sizeof(words));
  const UInt32x16 lo = words << 16;
  const UInt32x16 hi = words & 0xFFFF0000u;
  std::memcpy(even, &lo, sizeof(*even));
  std::memcpy(odd, &hi, sizeof(*odd));
}

inline Float16 LoadFloat(const float* p) {
  Float16 out;
  std::memcpy(&out, p, sizeof(out));
  return out;
}

inline float Sum(Float16 v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

// y[r] for rows [begin, end); x_even / x_odd hold x's even- and odd-indexed elements, so that
// they line up with LoadBf16Pairs. Four rows at a time share each load of x.
ATTNSERVE_MULTIVERSION
void GemvRows(const uint16_t* weight, int64_t begin, int64_t end, int64_t cols, const float* x,
              const float* x_even, const float* x_odd, float* y) {
  constexpr int64_t kStep = 2 * kLanes;  // weights per vector iteration
  const int64_t vec_cols = cols - cols % kStep;
  auto tail = [&](const uint16_t* w) {
    float s = 0;
    for (int64_t c = vec_cols; c < cols; ++c) s += Bf16ToFloat(w[c]) * x[c];
    return s;
  };
  int64_t r = begin;
  for (; r + 4 <= end; r += 4) {
    const uint16_t* w[4] = {weight + r * cols, weight + (r + 1) * cols, weight + (r + 2) * cols,
                            weight + (r + 3) * cols};
    Float16 acc[4] = {};
    for (int64_t c = 0; c < vec_cols; c += kStep) {
      const Float16 xe = LoadFloat(x_even + c / 2), xo = LoadFloat(x_odd + c / 2);
      for (int i = 0; i < 4; ++i) {
        Float16 even, odd;
        LoadBf16Pairs(w[i] + c, &even, &odd);
        acc[i] += even * xe + odd * xo;
      }
    }
    for (int i = 0; i < 4; ++i) y[r + i] = Sum(acc[i]) + tail(w[i]);
  }
  for (; r < end; ++r) {
    const uint16_t* w = weight + r * cols;
    Float16 acc = {};
    for (int64_t c = 0; c < vec_cols; c += kStep) {
      Float16 even, odd;
      LoadBf16Pairs(w + c, &even, &odd);
      acc += even * LoadFloat(x_even + c / 2) + odd * LoadFloat(x_odd + c / 2);
    }
    y[r] = Sum(acc) + tail(w);
  }
}

}  // namespace

void Bf16Gemv(const uint16_t* weight, int64_t rows, int64_t cols, const float* x, float* y) {
  std::vector<float> x_even((cols + 1) / 2), x_odd((cols + 1) / 2);
  for (int64_t c = 0; c < cols; ++c) (c % 2 ? x_odd : x_even)[c / 2] = x[c];
  // At least ~256 Ki weights per task: waking a second thread costs tens of µs, so the small
  // matrices of a step (x_proj, dt_proj) stay on the calling thread.
  const int64_t grain = std::max<int64_t>(4, (int64_t{1} << 18) / std::max<int64_t>(1, cols));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    GemvRows(weight, begin, end, cols, x, x_even.data(), x_odd.data(), y);
  });
}

}  // namespace attnserve::kernels
