#include "kernels/mamba/selective_scan_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "kernels/common/parallel_tiles.h"
#include "kernels/common/vector_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::mamba {
namespace {

using vec::Float16;
using vec::kLanes;

// Scans channels [c0, c0 + width) of batch b, width <= kLanes (their state rows from `state`,
// channel c0's). The state slice lives in
// `h` as (dstate, kLanes) floats for the whole sequence: channels in vector lanes, so the sum
// over the state dimension needs no horizontal reduction. `a` holds A the same way.
ATTNSERVE_MULTIVERSION
void ScanChannelBlock(const SelectiveScanParams& p, int64_t b, int64_t c0, int width, float* state,
                      float* h, float* a) {
  const int64_t n_state = p.dstate;
  const bool full = width == kLanes;
  auto load = [&](const float* ptr) {
    return full ? vec::Load(ptr) : vec::LoadPartial(ptr, width);
  };
  for (int64_t n = 0; n < n_state; ++n) {
    for (int i = 0; i < kLanes; ++i) h[n * kLanes + i] = i < width ? state[i * n_state + n] : 0.0f;
    vec::Store(a + n * kLanes, load(p.A_t + n * p.dim + c0));
  }
  const Float16 d_skip = load(p.D + c0);
  const Float16 dt_bias = p.delta_bias ? load(p.delta_bias + c0) : Float16{};
  const float* u = p.u + b * p.u_batch_stride + c0;
  const float* delta = p.delta + b * p.delta_batch_stride + c0;
  const float* z = p.z + b * p.z_batch_stride + c0;
  const float* bc = p.B + b * p.bc_batch_stride;
  const float* cc = p.C + b * p.bc_batch_stride;
  float* out = p.out + b * p.seqlen * p.dim + c0;

  for (int64_t t = 0; t < p.seqlen; ++t) {
    const Float16 u_t = load(u + t * p.u_seq_stride);
    Float16 dt = load(delta + t * p.delta_seq_stride) + dt_bias;
    if (p.delta_softplus) dt = vec::Softplus(dt);
    const Float16 dt_u = dt * u_t;
    const float* b_t = bc + t * p.bc_seq_stride;
    const float* c_t = cc + t * p.bc_seq_stride;
    Float16 y = d_skip * u_t;
    for (int64_t n = 0; n < n_state; ++n) {
      const Float16 h_n =
          vec::Exp(dt * vec::Load(a + n * kLanes)) * vec::Load(h + n * kLanes) + dt_u * b_t[n];
      vec::Store(h + n * kLanes, h_n);
      y += h_n * c_t[n];
    }
    y *= vec::Silu(load(z + t * p.z_seq_stride));
    if (full) {
      vec::Store(out + t * p.dim, y);
    } else {
      vec::StorePartial(out + t * p.dim, y, width);
    }
  }
  for (int64_t n = 0; n < n_state; ++n) {
    for (int i = 0; i < width; ++i) state[i * n_state + n] = h[n * kLanes + i];
  }
}

// One decode step (seqlen 1) of channels [c0, c0 + width) of batch b, for dstate a multiple of
// kLanes and A given as (dim, dstate): each channel's state row is contiguous, so it is read,
// updated and written in place as dstate / kLanes vectors (no transposition in and out, which
// costs more than the step's arithmetic), and its read-out is one horizontal sum. state: the
// block's first channel's state row; dt: the channels' step sizes after bias and softplus;
// gate: silu(z) (StepItems computes all three).
ATTNSERVE_MULTIVERSION
void StepChannelBlock(const SelectiveScanParams& p, int64_t b, int64_t c0, int width, float* state,
                      Float16 dt, Float16 gate) {
  const int64_t n_state = p.dstate;
  const bool full = width == kLanes;
  auto load = [&](const float* ptr) {
    return full ? vec::Load(ptr) : vec::LoadPartial(ptr, width);
  };
  const Float16 u = load(p.u + b * p.u_batch_stride + c0);
  const Float16 dt_u = dt * u;
  const float* bt = p.B + b * p.bc_batch_stride;
  const float* ct = p.C + b * p.bc_batch_stride;
  // Channel i's read-out terms in acc[i]; Sum16 then sums all 16 side by side, the same bits
  // as Sum of each (a horizontal sum a channel cost about a third of the step's arithmetic).
  Float16 acc[kLanes];
  if (n_state == kLanes) {  // mamba's usual d_state: one vector a channel, B and C loaded once
    const Float16 b_v = vec::Load(bt), c_v = vec::Load(ct);
    const float* a = p.A + c0 * n_state;
    // 4 channels' exponentials at a time (vec::ExpN): 24 layers x 64 rows of the step on two
    // threads, alternated runs: 7.6-9.5 ms one at a time, 7.1-8.0 ms four at a time.
    constexpr int kGroup = 4;
    for (int i = 0; i < width; i += kGroup) {
      const int n = std::min(kGroup, width - i);
      Float16 decay[kGroup];
      for (int k = 0; k < kGroup; ++k) {
        decay[k] = k < n ? dt[i + k] * vec::Load(a + (i + k) * kLanes) : Float16{};
      }
      vec::ExpN(decay);
      for (int k = 0; k < n; ++k) {
        float* h = state + (i + k) * n_state;
        const Float16 h_n = decay[k] * vec::Load(h) + dt_u[i + k] * b_v;
        vec::Store(h, h_n);
        acc[i + k] = h_n * c_v;
      }
    }
    for (int i = width; i < kLanes; ++i) acc[i] = Float16{};
  } else {
    for (Float16& v : acc) v = Float16{};
    for (int i = 0; i < width; ++i) {
      const float* a = p.A + (c0 + i) * n_state;
      float* h = state + i * n_state;
      for (int64_t n = 0; n < n_state; n += kLanes) {
        const Float16 h_n =
            vec::Exp(dt[i] * vec::Load(a + n)) * vec::Load(h + n) + dt_u[i] * vec::Load(bt + n);
        vec::Store(h + n, h_n);
        acc[i] += h_n * vec::Load(ct + n);
      }
    }
  }
  const Float16 read_out = vec::Sum16(acc);
  const Float16 y = (read_out + load(p.D + c0) * u) * gate;
  float* out = p.out + b * p.dim + c0;
  if (full) {
    vec::Store(out, y);
  } else {
    vec::StorePartial(out, y, width);
  }
}

// Item i of a scan over `blocks` blocks of 16 channels a batch row: its row, first channel,
// channel count and state (channel c0's row).
struct ScanItem {
  int64_t b, c0;
  int width;
  float* state;
};
ScanItem ItemAt(const SelectiveScanParams& p, int64_t blocks, int64_t i) {
  const int64_t b = i / blocks, c0 = (i % blocks) * kLanes;
  float* row = p.row_states ? p.row_states[b] : p.state + b * p.dim * p.dstate;
  return {b, c0, static_cast<int>(std::min<int64_t>(kLanes, p.dim - c0)), row + c0 * p.dstate};
}

// Decode-step items [begin, end) (item i: batch row i / blocks, channels from (i % blocks) * 16),
// in groups of 16. Each group's step sizes (softplus) and gates (silu) are computed first, 4 at
// a time interleaved, then its states are updated: inside the state loop, those two (a chain of
// ~100 dependent operations an item, two divisions among them) kept the state arithmetic
// waiting, 0.14 ns of the 0.44 ns an element took on one thread. While an item's states are
// updated, those of the item kAhead after it are prefetched for writing: each row's state is its
// own allocation, and the hardware prefetcher restarted at every row and page. mamba-130m's 24
// layers x 64 rows of cold states on two threads, alternated runs: 10.1-10.2 ms -> 8.3-8.4 ms
// (the grouping) -> 7.6-7.7 ms (the prefetch) -> 7.1-7.5 (4 exponentials at a time in the
// states) -> 7.1-7.2 (and in softplus and silu).
ATTNSERVE_MULTIVERSION
void StepItems(const SelectiveScanParams& p, int64_t blocks, int64_t begin, int64_t end) {
  constexpr int kGroup = 16, kInterleave = 4, kAhead = 4;
  for (int64_t g = begin; g < end; g += kGroup) {
    const int n = static_cast<int>(std::min<int64_t>(kGroup, end - g));
    ScanItem item[kGroup];
    Float16 dt[kGroup / kInterleave][kInterleave] = {},
                        gate[kGroup / kInterleave][kInterleave] = {};
    for (int k = 0; k < n; ++k) {
      item[k] = ItemAt(p, blocks, g + k);
      const ScanItem& it = item[k];
      Float16& d = dt[k / kInterleave][k % kInterleave];
      d = vec::LoadPartial(p.delta + it.b * p.delta_batch_stride + it.c0, it.width);
      if (p.delta_bias != nullptr) d += vec::LoadPartial(p.delta_bias + it.c0, it.width);
      gate[k / kInterleave][k % kInterleave] =
          vec::LoadPartial(p.z + it.b * p.z_batch_stride + it.c0, it.width);
    }
    for (int q = 0; q * kInterleave < n; ++q) {  // the same bits as one vector at a time
      if (p.delta_softplus) vec::SoftplusN(dt[q]);
      vec::SiluN(gate[q]);
    }
    for (int k = 0; k < n; ++k) {
      if (g + k + kAhead < end) {
        const ScanItem next = ItemAt(p, blocks, g + k + kAhead);
        const char* bytes = reinterpret_cast<const char*>(next.state);
        const int64_t size = static_cast<int64_t>(sizeof(float)) * next.width * p.dstate;
        for (int64_t line = 0; line < size; line += 64) __builtin_prefetch(bytes + line, 1, 3);
      }
      const ScanItem& it = item[k];
      StepChannelBlock(p, it.b, it.c0, it.width, it.state, dt[k / kInterleave][k % kInterleave],
                       gate[k / kInterleave][k % kInterleave]);
    }
  }
}

}  // namespace

void SelectiveScanCpu(const SelectiveScanParams& p) {
  const int64_t blocks = (p.dim + kLanes - 1) / kLanes;
  const bool in_place_step = p.seqlen == 1 && p.A != nullptr && p.dstate % kLanes == 0;
  // A decode step's blocks are small (one token each): at least 48 blocks (768 channels at
  // d_state 16) per task, so that the default models' one-row step (32 blocks) runs on the
  // calling thread instead of paying a parallel region, while mamba-130m's (96 blocks, ~6% of
  // its step on one thread) is split.
  // The threads claim chunks as they go (ParallelTiles), not a static half each: with
  // halves, a 16-row mamba-130m step's second thread spent twice the first's CPU time in the
  // scan while the first waited in libgomp (perf: 8.9% against 4.5% of samples).
  const int64_t grain = std::max<int64_t>(1, 768 / std::max<int64_t>(1, p.seqlen * p.dstate));
  ParallelTiles(p.batch * blocks, grain, [&](int64_t begin, int64_t end) {
    if (in_place_step) {
      StepItems(p, blocks, begin, end);
      return;
    }
    std::vector<float> h(p.dstate * kLanes), a(p.dstate * kLanes);  // ScanChannelBlock's slices
    for (int64_t i = begin; i < end; ++i) {
      const ScanItem it = ItemAt(p, blocks, i);
      ScanChannelBlock(p, it.b, it.c0, it.width, it.state, h.data(), a.data());
    }
  });
}

}  // namespace attnserve::kernels::mamba
