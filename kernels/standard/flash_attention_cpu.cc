#include "kernels/standard/flash_attention_cpu.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

// The kernel proper, on validated inputs. Every ATen call works on all B·H heads at once
// (bmm / baddbmm over a (B·H, tile, tile) batch), so the number of ATen calls is about
// 12 per (query tile, key tile) pair and does not grow with B·H.
at::Tensor FlashAttentionImpl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              bool causal, FlashAttentionTiles tiles, int64_t window,
                              int64_t sinks) {
  const int64_t b = q.size(0), h = q.size(1), lq = q.size(2), d = q.size(3);
  const int64_t lk = k.size(2);
  const int64_t bh = b * h;
  at::Tensor out = at::empty({b, h, lq, d}, q.options());
  if (lq == 0) return out;

  // The scale rides on the score GEMM's alpha: no scaled copy of q, no extra pass per tile.
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const at::Tensor qf = q.reshape({bh, lq, d});
  // reshape keeps a view when it can: merging B and H of a narrowed KV cache needs no copy.
  const at::Tensor kf = k.reshape({bh, lk, d});
  const at::Tensor vf = v.reshape({bh, lk, d});
  const at::Tensor of = out.view({bh, lq, d});
  // Causal: query i of the chunk is at absolute position offset + i.
  const int64_t offset = lk - lq;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  // One score buffer for every tile pair: a fresh multi-megabyte allocation per pair would
  // page-fault its memory in again each time. A ragged tile uses a contiguous prefix of it.
  // Zeroed once so that the beta = 0 GEMM below never meets NaN garbage, whatever the BLAS.
  const at::Tensor score_buffer =
      at::zeros({bh * std::min(tiles.query, lq) * std::min(tiles.key, lk)}, q.options());

  for (int64_t q0 = 0; q0 < lq; q0 += tiles.query) {
    const int64_t nq = std::min(tiles.query, lq - q0);
    const at::Tensor qt = qf.narrow(1, q0, nq);
    // The output rows of this tile serve as the accumulator: no extra (nq, d) buffer.
    at::Tensor acc = of.narrow(1, q0, nq);
    // Key tiles at or beyond the last query's horizon are skipped whole; with a window, so are
    // those before the first query's window, except the sinks (keys 0 .. sinks - 1), which
    // are visited first as a range of their own.
    const int64_t key_end = causal ? offset + q0 + nq : lk;
    const int64_t window_begin = window > 0 ? std::max<int64_t>(0, offset + q0 - window + 1) : 0;
    const int64_t sink_end = window > 0 ? std::min({sinks, window_begin, key_end}) : 0;
    at::Tensor row_max, row_sum;  // (B·H, nq, 1): running max and sum of exp(s - max)
    bool first_tile = true;
    for (const auto& [range_begin, range_end] :
         {std::pair<int64_t, int64_t>{0, sink_end}, {std::max(window_begin, sink_end), key_end}}) {
      for (int64_t k0 = range_begin; k0 < range_end; k0 += tiles.key) {
        const int64_t nk = std::min(tiles.key, range_end - k0);
        const at::Tensor vt = vf.narrow(1, k0, nk);
        at::Tensor s = score_buffer.narrow(0, 0, bh * nq * nk).view({bh, nq, nk});
        // s = scale · q kᵀ (beta = 0: the buffer's old content is not used).
        at::baddbmm_out(s, s, qt, kf.narrow(1, k0, nk).transpose(1, 2), /*beta=*/0.0,
                        /*alpha=*/scale);
        // Only a tile crossing the diagonal is masked: key k0 + j is hidden from query q0 + i
        // when k0 + j > offset + q0 + i. Tiles wholly below it need no mask.
        if (causal && k0 + nk - 1 > offset + q0) {
          const at::Tensor hidden =
              at::ones({nq, nk}, q.options().dtype(at::kBool)).triu_(offset + q0 - k0 + 1);
          s.masked_fill_(hidden, neg_inf);
        }
        // The window's lower edge: key k0 + j is hidden from query q0 + i when
        // k0 + j <= offset + q0 + i - window, unless it is a sink (k0 + j < sinks: the sink range
        // holds only sinks, the other range none).
        if (window > 0 && k0 >= sink_end && k0 <= offset + q0 + nq - 1 - window) {
          at::Tensor hidden =
              at::ones({nq, nk}, q.options().dtype(at::kBool)).tril_(offset + q0 - k0 - window);
          if (k0 < sinks) hidden.narrow(1, 0, std::min(nk, sinks - k0)).fill_(false);
          s.masked_fill_(hidden, neg_inf);
        }
        at::Tensor tile_max = at::amax(s, 2, /*keepdim=*/true);
        // Without a window, key 0 is in the first tile and visible to every query, so every row
        // max is finite from the first tile on, and exp(-inf - max) = 0 handles rows a later tile
        // hides. With one, a row may see nothing of the first tile: its max is held at the
        // lowest finite value, so it contributes exp(-inf) = 0 and a later tile's max replaces it.
        if (window > 0) tile_max.clamp_min_(std::numeric_limits<float>::lowest());
        if (first_tile) {
          first_tile = false;
          row_max = tile_max;
          s.sub_(row_max).exp_();
          row_sum = s.sum(2, /*keepdim=*/true);
          at::bmm_out(acc, s, vt);
        } else {
          at::Tensor new_max = at::maximum(row_max, tile_max);
          // Rescales what was accumulated under the old max to the new one.
          const at::Tensor correction = row_max.sub_(new_max).exp_();
          s.sub_(new_max).exp_();
          row_sum.mul_(correction).add_(s.sum(2, /*keepdim=*/true));
          acc.mul_(correction).baddbmm_(s, vt);
          row_max = std::move(new_max);
        }
      }
    }
    acc.div_(row_sum);
  }
  return out;
}

}  // namespace

absl::Status CheckAttentionLengths(int64_t lq, int64_t lk, bool causal, int64_t window,
                                   int64_t sinks) {
  if (causal && lk < lq) {
    return absl::InvalidArgumentError(
        absl::StrCat("causal attention needs at least as many keys as queries (the queries are "
                     "the last Lq of the Lk positions), got Lq = ",
                     lq, ", Lk = ", lk));
  }
  if (lq > 0 && lk == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention over no keys is undefined, got Lq = ", lq, ", Lk = 0"));
  }
  if (window < 0 || (window > 0 && !causal)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sliding window (", window, ") needs causal attention and must be >= 0 (0: none)"));
  }
  if (sinks < 0 || (sinks > 0 && window == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention sinks (", sinks, ") go with a sliding window and must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckFlashAttentionArguments(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, bool causal, int64_t window,
                                          int64_t sinks) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1, -1}));
  const int64_t b = q.size(0), h = q.size(1), d = q.size(3);
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {b, h, -1, d}));
  RETURN_IF_ERROR(CheckFloatTensor(v, "v", {b, h, k.size(2), d}));
  if (d == 0) return absl::InvalidArgumentError("q: head dimension must be > 0, got 0");
  return CheckAttentionLengths(q.size(2), k.size(2), causal, window, sinks);
}

absl::StatusOr<at::Tensor> FlashAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, bool causal,
                                             FlashAttentionTiles tiles, int64_t window,
                                             int64_t sinks) {
  RETURN_IF_ERROR(CheckFlashAttentionArguments(q, k, v, causal, window, sinks));
  if (tiles.query <= 0 || tiles.key <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("flash attention tiles must be > 0, got query ",
                                                   tiles.query, ", key ", tiles.key));
  }
  // A window that covers every key is no window: the same computation as without one.
  if (window >= k.size(2)) window = 0;
  if (window == 0) sinks = 0;
  return GuardTorch("flash attention", [&]() -> absl::StatusOr<at::Tensor> {
    return FlashAttentionImpl(q, k, v, causal, tiles, window, sinks);
  });
}

}  // namespace attnserve::kernels
