#include "kernels/mamba/causal_conv1d_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "kernels/common/vector_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::mamba {
namespace {

using vec::Float16;
using vec::kLanes;

// Input at time j (may be negative: read from the state) for channels [c, c + n).
inline const float* InputRow(const CausalConv1dParams& p, int64_t b, int64_t j,
                             const float* history) {
  return j >= 0 ? p.in + b * p.in_batch_stride + j * p.in_seq_stride
                : history + (p.width + j) * p.dim;
}

// Output rows [t0, t1) of batch b. `history` is the state transposed to (width, dim).
ATTNSERVE_MULTIVERSION
void ConvRows(const CausalConv1dParams& p, int64_t b, int64_t t0, int64_t t1,
              const float* history) {
  const int64_t k_width = p.width;
  for (int64_t t = t0; t < t1; ++t) {
    float* out = p.out + (b * p.seqlen + t) * p.dim;
    int64_t c = 0;
    for (; c + kLanes <= p.dim; c += kLanes) {
      Float16 acc = p.bias ? vec::Load(p.bias + c) : Float16{};
      for (int64_t k = 0; k < k_width; ++k) {
        const float* row = InputRow(p, b, t - (k_width - 1) + k, history);
        acc += vec::Load(p.weight_t + k * p.dim + c) * vec::Load(row + c);
      }
      vec::Store(out + c, p.silu ? vec::Silu(acc) : acc);
    }
    if (c < p.dim) {
      const int n = static_cast<int>(p.dim - c);
      Float16 acc = p.bias ? vec::LoadPartial(p.bias + c, n) : Float16{};
      for (int64_t k = 0; k < k_width; ++k) {
        const float* row = InputRow(p, b, t - (k_width - 1) + k, history);
        acc += vec::LoadPartial(p.weight_t + k * p.dim + c, n) * vec::LoadPartial(row + c, n);
      }
      vec::StorePartial(out + c, p.silu ? vec::Silu(acc) : acc, n);
    }
  }
}

// y[0 .. n) = silu(y), n a multiple of kLanes: Silu's bits, 4 vectors at a time interleaved
// (vec::SiluN). Inside StepWidth4's loop, each block's silu was a chain of ~25 dependent
// operations (a division among them) after its transposes, and the blocks did not overlap.
ATTNSERVE_VEC_INLINE void SiluInPlace(float* y, int64_t n) {
  constexpr int kGroup = 4;
  int64_t c = 0;
  for (; c + kGroup * kLanes <= n; c += kGroup * kLanes) {
    Float16 x[kGroup];
    for (int k = 0; k < kGroup; ++k) x[k] = vec::Load(y + c + k * kLanes);
    vec::SiluN(x);
    for (int k = 0; k < kGroup; ++k) vec::Store(y + c + k * kLanes, x[k]);
  }
  for (; c < n; c += kLanes) vec::Store(y + c, vec::Silu(vec::Load(y + c)));
}

// One decode step (seqlen 1) of row b for the usual width 4, straight from the state's
// (dim, 4) layout: each block of 16 channels' taps is a 4x4 transpose of 4-float groups in
// registers, in and out, instead of the two scalar transposes through `history`. The same
// arithmetic as ConvRows at t = 0 (bias, then taps 1..3 of the state and the input, in order).
ATTNSERVE_MULTIVERSION
void StepWidth4(const CausalConv1dParams& p, int64_t b, float* state) {
  const float* x = p.in + b * p.in_batch_stride;
  float* out = p.out + b * p.dim;
  const float* wt = p.weight_t;
  int64_t c = 0;
  for (; c + kLanes <= p.dim; c += kLanes) {
    float* s = state + c * 4;
    const Float16 v0 = vec::Load(s), v1 = vec::Load(s + 16), v2 = vec::Load(s + 32),
                  v3 = vec::Load(s + 48);
    // Taps (0, 1) and (2, 3) of channels 0-7 and 8-15, then each tap of all 16.
    const Float16 a01 =
        __builtin_shufflevector(v0, v1, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const Float16 b01 =
        __builtin_shufflevector(v0, v1, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    const Float16 a23 =
        __builtin_shufflevector(v2, v3, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const Float16 b23 =
        __builtin_shufflevector(v2, v3, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    const Float16 t1 = __builtin_shufflevector(a01, a23, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23,
                                               25, 27, 29, 31);
    const Float16 t2 = __builtin_shufflevector(b01, b23, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                               24, 26, 28, 30);
    const Float16 t3 = __builtin_shufflevector(b01, b23, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23,
                                               25, 27, 29, 31);
    const Float16 xc = vec::Load(x + c);
    Float16 acc = p.bias ? vec::Load(p.bias + c) : Float16{};
    acc += vec::Load(wt + c) * t1;
    acc += vec::Load(wt + p.dim + c) * t2;
    acc += vec::Load(wt + 2 * p.dim + c) * t3;
    acc += vec::Load(wt + 3 * p.dim + c) * xc;
    vec::Store(out + c, acc);  // silu after the loop (SiluInPlace)
    // The new taps (t1, t2, t3, x), interleaved back into (channel, tap) order.
    const Float16 n01 =
        __builtin_shufflevector(t1, t2, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const Float16 m01 =
        __builtin_shufflevector(t3, xc, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const Float16 n23 = __builtin_shufflevector(t1, t2, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13,
                                                29, 14, 30, 15, 31);
    const Float16 m23 = __builtin_shufflevector(t3, xc, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13,
                                                29, 14, 30, 15, 31);
    vec::Store(s, __builtin_shufflevector(n01, m01, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7,
                                          22, 23));
    vec::Store(s + 16, __builtin_shufflevector(n01, m01, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28,
                                               29, 14, 15, 30, 31));
    vec::Store(s + 32, __builtin_shufflevector(n23, m23, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21,
                                               6, 7, 22, 23));
    vec::Store(s + 48, __builtin_shufflevector(n23, m23, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28,
                                               29, 14, 15, 30, 31));
  }
  if (p.silu) SiluInPlace(out, c);
  if (c < p.dim) {  // the last channels, through arrays
    const int n = static_cast<int>(p.dim - c);
    float taps[3][kLanes] = {};
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 3; ++k) taps[k][i] = state[(c + i) * 4 + k + 1];
    }
    const Float16 xc = vec::LoadPartial(x + c, n);
    Float16 acc = p.bias ? vec::LoadPartial(p.bias + c, n) : Float16{};
    for (int k = 0; k < 3; ++k) {
      acc += vec::LoadPartial(wt + k * p.dim + c, n) * vec::LoadPartial(taps[k], n);
    }
    acc += vec::LoadPartial(wt + 3 * p.dim + c, n) * xc;
    vec::StorePartial(out + c, p.silu ? vec::Silu(acc) : acc, n);
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 3; ++k) state[(c + i) * 4 + k] = taps[k][i];
      state[(c + i) * 4 + 3] = x[c + i];
    }
  }
}

}  // namespace

void CausalConv1dCpu(const CausalConv1dParams& p) {
  const int64_t w = p.width, dim = p.dim;
  auto state_of = [&](int64_t b) { return p.row_states ? p.row_states[b] : p.state + b * dim * w; };
  // Row b's state as (width, dim), so that history reads are contiguous in channels.
  auto read_history = [&](int64_t b, float* hist) {
    const float* state = state_of(b);
    for (int64_t c = 0; c < dim; ++c) {
      for (int64_t k = 0; k < w; ++k) hist[k * dim + c] = state[c * w + k];
    }
  };
  // New state: the last `w` inputs, from the chunk or, for short chunks, the old state.
  auto write_state = [&](int64_t b, const float* hist) {
    float* state = state_of(b);
    for (int64_t k = 0; k < w; ++k) {
      const float* row = InputRow(p, b, p.seqlen - w + k, hist);
      for (int64_t c = 0; c < dim; ++c) state[c * w + k] = row[c];
    }
  };
  if (p.seqlen == 1 && w == 4) {
    at::parallel_for(0, p.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) StepWidth4(p, b, state_of(b));
    });
    return;
  }
  constexpr int64_t kRowsPerTask = 64;
  const int64_t row_blocks = (p.seqlen + kRowsPerTask - 1) / kRowsPerTask;
  if (row_blocks == 1) {
    // Decode steps and short chunks: one task per row does its own transposes, which are most
    // of the work here (run on one thread, they kept the other spinning).
    at::parallel_for(0, p.batch, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> hist(w * dim);
      for (int64_t b = begin; b < end; ++b) {
        read_history(b, hist.data());
        ConvRows(p, b, 0, p.seqlen, hist.data());
        write_state(b, hist.data());
      }
    });
    return;
  }
  std::vector<float> history(p.batch * w * dim);
  for (int64_t b = 0; b < p.batch; ++b) read_history(b, history.data() + b * w * dim);
  at::parallel_for(0, p.batch * row_blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / row_blocks, t0 = (i % row_blocks) * kRowsPerTask;
      ConvRows(p, b, t0, std::min(p.seqlen, t0 + kRowsPerTask), history.data() + b * w * dim);
    }
  });
  for (int64_t b = 0; b < p.batch; ++b) write_state(b, history.data() + b * w * dim);
}

}  // namespace attnserve::kernels::mamba
