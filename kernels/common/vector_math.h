// Fixed-width float vectors (GCC/Clang vector extensions) and the few transcendental
// functions the fused CPU kernels need, written so that one source compiles to AVX-512, AVX2
// or SSE depending on the target of the function it is inlined into (see
// ATTNSERVE_MULTIVERSION). exp has a relative error below 2e-7 on [-87, 88].
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::vec {

constexpr int kLanes = 16;
typedef float Float16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t Int16 __attribute__((vector_size(kLanes * sizeof(int32_t))));

#define ATTNSERVE_VEC_INLINE inline __attribute__((always_inline))

// x in every lane, as one vbroadcastss (from memory where x is there). `Float16{} + x` would
// also add +0 to every lane, which the compiler must keep (it turns -0 into +0).
ATTNSERVE_VEC_INLINE Float16 Broadcast(float x) {
  const Float16 v = {x};
  return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

ATTNSERVE_VEC_INLINE Float16 Load(const float* p) {
  Float16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

ATTNSERVE_VEC_INLINE void Store(float* p, Float16 v) { std::memcpy(p, &v, sizeof(v)); }

// Loads `n` < kLanes floats and zero-fills the rest; stores only `n`.
ATTNSERVE_VEC_INLINE Float16 LoadPartial(const float* p, int n) {
  Float16 v = Float16{};
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
ATTNSERVE_VEC_INLINE void StorePartial(float* p, Float16 v, int n) {
  for (int i = 0; i < n; ++i) p[i] = v[i];
}

typedef float Float8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Float4 __attribute__((vector_size(4 * sizeof(float))));

// The sum of v's lanes as a fixed tree of halvings (three vector adds and two scalar ones):
// the same rounding wherever it is used.
ATTNSERVE_VEC_INLINE float Sum(Float16 v) {
  const Float8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Float4 b =
      __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// Sum(v[k]) for 16 vectors at once, lane k of the result: the same additions in the same order
// as Sum (lanes i + i+8, then i + i+4, then (0 + 2) + (1 + 3)), so the same bits, done on 16
// sums side by side: 45 vector operations where 16 calls of Sum take ~170.
ATTNSERVE_VEC_INLINE Float16 Sum16(const Float16* v) {
  Float16 h[8], g[4], e[2];
  for (int k = 0; k < 8; ++k) {  // lanes 0-7: v[2k]'s i + i+8; lanes 8-15: v[2k + 1]'s
    h[k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(v[2 * k], v[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  }
  for (int k = 0; k < 4; ++k) {  // four lanes each of v[4k .. 4k+3]: i + i+4
    g[k] = __builtin_shufflevector(h[2 * k], h[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(h[2 * k], h[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  }
  for (int k = 0; k < 2; ++k) {  // two lanes each of v[8k .. 8k+7]: 0 + 2 and 1 + 3
    e[k] = __builtin_shufflevector(g[2 * k], g[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(g[2 * k], g[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  }
  return __builtin_shufflevector(e[0], e[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(e[0], e[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}

// exp(x) of N vectors in place, Cephes' single-precision polynomial after a Cody-Waite range
// reduction. Each step is applied to all N before the next: a vector's bits do not depend on N,
// and N > 1 keeps N independent chains in flight (one exp is a chain of ~20 dependent
// operations, and the out-of-order window holds few of them). Exp is N = 1.
template <int N>
ATTNSERVE_VEC_INLINE void ExpN(Float16 (&x)[N]) {
  const Float16 lo = Broadcast(-87.3f), hi = Broadcast(88.3f);
  const Float16 shifter = Broadcast(12582912.0f);
  Float16 n[N], r[N], p[N];
  for (int k = 0; k < N; ++k) x[k] = x[k] < lo ? lo : x[k];
  for (int k = 0; k < N; ++k) x[k] = x[k] > hi ? hi : x[k];
  // n = round(x / ln 2) with the 1.5 * 2^23 trick (exact for |n| < 2^22).
  for (int k = 0; k < N; ++k) n[k] = (x[k] * 1.44269504088896341f + shifter) - shifter;
  for (int k = 0; k < N; ++k) r[k] = x[k] - n[k] * 0.693359375f;
  for (int k = 0; k < N; ++k) r[k] = r[k] - n[k] * -2.12194440e-4f;
  for (int k = 0; k < N; ++k) p[k] = Broadcast(1.9875691500e-4f) * r[k] + 1.3981999507e-3f;
  for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + 8.3334519073e-3f;
  for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + 4.1665795894e-2f;
  for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + 1.6666665459e-1f;
  for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + 5.0000001201e-1f;
  for (int k = 0; k < N; ++k) p[k] = p[k] * (r[k] * r[k]) + r[k] + 1.0f;
  for (int k = 0; k < N; ++k) {
    Int16 e = (__builtin_convertvector(n[k], Int16) + 127) << 23;
    Float16 scale;
    std::memcpy(&scale, &e, sizeof(scale));
    x[k] = p[k] * scale;
  }
}

ATTNSERVE_VEC_INLINE Float16 Exp(Float16 x) {
  Float16 v[1] = {x};
  ExpN(v);
  return v[0];
}

// log(x) for x > 0 (normal floats), Cephes' single-precision polynomial; softplus and silu
// below. The N-vector forms are interleaved as ExpN (a vector's bits do not depend on N); the
// one-vector ones are N = 1.
template <int N>
ATTNSERVE_VEC_INLINE void LogN(Float16 (&x)[N]) {
  const Float16 sqrt_half = Broadcast(0.707106781186547524f);
  const Float16 one = Broadcast(1.0f);
  Float16 e[N], m[N], z[N], y[N];
  for (int k = 0; k < N; ++k) {
    Int16 bits;
    std::memcpy(&bits, &x[k], sizeof(bits));
    e[k] = __builtin_convertvector(((bits >> 23) & 0xff) - 126, Float16);
    bits = (bits & 0x807fffff) | 0x3f000000;  // mantissa in [0.5, 1)
    std::memcpy(&m[k], &bits, sizeof(m[k]));
  }
  for (int k = 0; k < N; ++k) {
    const Float16 small = m[k] < sqrt_half ? one : Float16{};
    e[k] -= small;
    m[k] = m[k] + m[k] * small - 1.0f;
  }
  for (int k = 0; k < N; ++k) z[k] = m[k] * m[k];
  for (int k = 0; k < N; ++k) y[k] = Broadcast(7.0376836292e-2f) * m[k] - 1.1514610310e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] + 1.1676998740e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] - 1.2420140846e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] + 1.4249322787e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] - 1.6668057665e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] + 2.0000714765e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] - 2.4999993993e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] + 3.3333331174e-1f;
  for (int k = 0; k < N; ++k) y[k] = y[k] * m[k] * z[k];
  for (int k = 0; k < N; ++k) y[k] += e[k] * -2.12194440e-4f;
  for (int k = 0; k < N; ++k) y[k] -= 0.5f * z[k];
  for (int k = 0; k < N; ++k) x[k] = m[k] + y[k] + e[k] * 0.693359375f;
}

// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), with log1p(t) = log(u)·t/(u - 1) for
// u = 1 + t (exact where u rounds to 1), so small results keep their relative accuracy.
template <int N>
ATTNSERVE_VEC_INLINE void SoftplusN(Float16 (&x)[N]) {
  const Float16 zero = Float16{};
  Float16 t[N], u[N], d[N];
  for (int k = 0; k < N; ++k) t[k] = x[k] < zero ? x[k] : -x[k];
  ExpN(t);
  for (int k = 0; k < N; ++k) {
    u[k] = 1.0f + t[k];
    d[k] = u[k] - 1.0f;
  }
  Float16 log_u[N];
  for (int k = 0; k < N; ++k) log_u[k] = u[k];
  LogN(log_u);
  for (int k = 0; k < N; ++k) {
    const Float16 log1p =
        d[k] == zero ? t[k] : log_u[k] * (t[k] / (d[k] == zero ? Broadcast(1.0f) : d[k]));
    x[k] = (x[k] > zero ? x[k] : zero) + log1p;
  }
}

// x * sigmoid(x), as x / (1 + exp(-x)).
template <int N>
ATTNSERVE_VEC_INLINE void SiluN(Float16 (&x)[N]) {
  Float16 e[N];
  for (int k = 0; k < N; ++k) e[k] = -x[k];
  ExpN(e);
  for (int k = 0; k < N; ++k) x[k] = x[k] / (1.0f + e[k]);
}

ATTNSERVE_VEC_INLINE Float16 Log(Float16 x) {
  Float16 v[1] = {x};
  LogN(v);
  return v[0];
}

ATTNSERVE_VEC_INLINE Float16 Softplus(Float16 x) {
  Float16 v[1] = {x};
  SoftplusN(v);
  return v[0];
}

ATTNSERVE_VEC_INLINE Float16 Silu(Float16 x) {
  Float16 v[1] = {x};
  SiluN(v);
  return v[0];
}

}  // namespace attnserve::kernels::vec

// Compiles a function for AVX-512, AVX2+FMA and baseline x86-64, chosen at load time by the
// CPU that runs it; elsewhere a plain function.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define ATTNSERVE_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTNSERVE_MULTIVERSION
#endif

#pragma GCC diagnostic pop
