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
      Float16 acc = vec::Load(p.bias + c);
      for (int64_t k = 0; k < k_width; ++k) {
        const float* row = InputRow(p, b, t - (k_width - 1) + k, history);
        acc += vec::Load(p.weight_t + k * p.dim + c) * vec::Load(row + c);
      }
      vec::Store(out + c, vec::Silu(acc));
    }
    if (c < p.dim) {
      const int n = static_cast<int>(p.dim - c);
      Float16 acc = vec::LoadPartial(p.bias + c, n);
      for (int64_t k = 0; k < k_width; ++k) {
        const float* row = InputRow(p, b, t - (k_width - 1) + k, history);
        acc += vec::LoadPartial(p.weight_t + k * p.dim + c, n) * vec::LoadPartial(row + c, n);
      }
      vec::StorePartial(out + c, vec::Silu(acc), n);
    }
  }
}

}  // namespace

void CausalConv1dSiluCpu(const CausalConv1dParams& p) {
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
