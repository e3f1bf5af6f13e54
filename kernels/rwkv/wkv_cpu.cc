#include "kernels/rwkv/wkv_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "kernels/common/vector_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::rwkv {
namespace {

using vec::Float16;
using vec::kLanes;

ATTNSERVE_VEC_INLINE Float16 Max(Float16 x, Float16 y) { return x > y ? x : y; }

// Channels [c0, c0 + width) of batch b, width <= kLanes, for the whole sequence: the state
// stays in registers; channels in vector lanes.
ATTNSERVE_MULTIVERSION
void WkvChannelBlock(const WkvParams& p, int64_t b, int64_t c0, int width) {
  const bool full = width == kLanes;
  auto load = [&](const float* ptr) {
    return full ? vec::Load(ptr) : vec::LoadPartial(ptr, width);
  };
  auto store = [&](float* ptr, Float16 x) {
    if (full) {
      vec::Store(ptr, x);
    } else {
      vec::StorePartial(ptr, x, width);
    }
  };
  float* state = (p.row_states ? p.row_states[b] : p.state + b * 3 * p.channels) + c0;
  float* a_ptr = state;
  float* b_ptr = state + p.channels;
  float* p_ptr = state + 2 * p.channels;
  Float16 num = load(a_ptr), den = load(b_ptr), pmax = load(p_ptr);
  // Lanes past `width` hold zeros; keep them finite (their results are never stored).
  const Float16 w = load(p.w + c0), u = load(p.u + c0);
  const float* k = p.k + b * p.k_batch_stride + c0;
  const float* v = p.v + b * p.v_batch_stride + c0;
  float* out = p.out + b * p.seqlen * p.channels + c0;
  for (int64_t t = 0; t < p.seqlen; ++t) {
    const Float16 k_t = load(k + t * p.k_seq_stride), v_t = load(v + t * p.v_seq_stride);
    const Float16 uk = u + k_t;
    const Float16 q = Max(pmax, uk);
    const Float16 e1 = vec::Exp(pmax - q), e2 = vec::Exp(uk - q);
    store(out + t * p.channels, (e1 * num + e2 * v_t) / (e1 * den + e2));
    const Float16 pw = pmax + w;
    const Float16 q2 = Max(pw, k_t);
    const Float16 f1 = vec::Exp(pw - q2), f2 = vec::Exp(k_t - q2);
    num = f1 * num + f2 * v_t;
    den = f1 * den + f2;
    pmax = q2;
  }
  store(a_ptr, num);
  store(b_ptr, den);
  store(p_ptr, pmax);
}

}  // namespace

void WkvCpu(const WkvParams& p) {
  const int64_t blocks = (p.channels + kLanes - 1) / kLanes;
  // A decode step's blocks are tiny: enough per task that a step stays on the calling thread.
  const int64_t grain = std::max<int64_t>(1, 256 / std::max<int64_t>(1, p.seqlen));
  at::parallel_for(0, p.batch * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / blocks, c0 = (i % blocks) * kLanes;
      WkvChannelBlock(p, b, c0, static_cast<int>(std::min<int64_t>(kLanes, p.channels - c0)));
    }
  });
}

}  // namespace attnserve::kernels::rwkv
