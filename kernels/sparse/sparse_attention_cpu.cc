#include "kernels/sparse/sparse_attention_cpu.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

using sparse::SparseGeometry;

// The online softmax of a set of query rows: acc (G, n, d), the sum of exp(s - max) · v;
// max, sum (G, n, 1). A row that has seen nothing yet holds max = lowest, sum = 0, acc = 0.
struct Running {
  at::Tensor acc, max, sum;
};

Running FreshRunning(int64_t groups, int64_t rows, int64_t d, const at::TensorOptions& options) {
  return {at::zeros({groups, rows, d}, options),
          at::full({groups, rows, 1}, std::numeric_limits<float>::lowest(), options),
          at::zeros({groups, rows, 1}, options)};
}

// Folds one tile of scores s (G, nq, nk), hidden ones -inf, into the rows' running state
// (views of nq rows). s is overwritten. The tile max is held at the lowest finite value so that
// a row the tile hides entirely contributes exp(-inf) = 0 and leaves its state as it was.
void AccumulateTile(at::Tensor& s, const at::Tensor& vt, at::Tensor& acc, at::Tensor& row_max,
                    at::Tensor& row_sum) {
  const at::Tensor tile_max =
      at::amax(s, 2, /*keepdim=*/true).clamp_min_(std::numeric_limits<float>::lowest());
  const at::Tensor new_max = at::maximum(row_max, tile_max);
  const at::Tensor correction = (row_max - new_max).exp_();
  s.sub_(new_max).exp_();
  row_sum.mul_(correction).add_(s.sum(2, /*keepdim=*/true));
  acc.mul_(correction).baddbmm_(s, vt);
  row_max.copy_(new_max);
}

// One part of the pattern (sparse_key_tiles.h): q (G, Nq, d) in the part's query layout, k, v
// (G, Nk, d) in its key layout. For each tile of `tq` queries only the planned key range is
// walked, in tiles of `tk`, scores masked by SparseKeyHidden. `classes` > 0: the residue-class
// layout, group g being class g mod classes, whose padding keys are hidden per class.
void AttendPart(const SparseGeometry& g, int32_t part, const at::Tensor& q, const at::Tensor& k,
                const at::Tensor& v, int64_t tq, int64_t tk, double scale, int64_t classes,
                Running& run) {
  const int64_t groups = q.size(0), rows = q.size(1), cols = k.size(1);
  if (rows == 0 || cols == 0) return;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  // One score buffer for every tile pair, zeroed once so the beta = 0 GEMM never meets NaN.
  const at::Tensor buffer =
      at::zeros({groups * std::min(tq, rows) * std::min(tk, cols)}, q.options());
  const int64_t shortest_class = classes > 0 ? g.class_keys(classes - 1) : cols;
  for (int64_t q0 = 0; q0 < rows; q0 += tq) {
    const int64_t nq = std::min(tq, rows - q0);
    const sparse::KeyRange range = sparse::PlanSparseKeys(g, part, q0, q0 + nq - 1);
    const int64_t end = std::min(range.end, cols);
    if (range.begin >= end) continue;
    const at::Tensor qt = q.narrow(1, q0, nq);
    at::Tensor acc = run.acc.narrow(1, q0, nq);
    at::Tensor row_max = run.max.narrow(1, q0, nq);
    at::Tensor row_sum = run.sum.narrow(1, q0, nq);
    for (int64_t k0 = range.begin; k0 < end; k0 += tk) {
      const int64_t nk = std::min(tk, end - k0);
      at::Tensor s = buffer.narrow(0, 0, groups * nq * nk).view({groups, nq, nk});
      at::baddbmm_out(s, s, qt, k.narrow(1, k0, nk).transpose(1, 2), /*beta=*/0.0,
                      /*alpha=*/scale);
      at::Tensor hidden = at::empty({nq, nk}, at::kBool);
      bool* h = hidden.data_ptr<bool>();
      bool any = false;
      for (int64_t i = 0; i < nq; ++i) {
        for (int64_t j = 0; j < nk; ++j) {
          h[i * nk + j] = sparse::SparseKeyHidden(g, part, q0 + i, k0 + j);
          any = any || h[i * nk + j];
        }
      }
      if (any) s.masked_fill_(hidden.to(q.device()), neg_inf);
      if (classes > 0 && k0 + nk > shortest_class) {
        // Keys past the end of their own class (which depends on the group's residue).
        at::Tensor padding = at::zeros({classes, 1, nk}, at::kFloat);
        float* p = padding.data_ptr<float>();
        for (int64_t r = 0; r < classes; ++r) {
          for (int64_t j = 0; j < nk; ++j) {
            if (sparse::ClassKeyHidden(g, r, k0 + j)) p[r * nk + j] = -INFINITY;
          }
        }
        s.view({groups / classes, classes, nq, nk}).add_(padding.to(q.device()));
      }
      AccumulateTile(s, v.narrow(1, k0, nk), acc, row_max, row_sum);
    }
  }
}

// x (G, n, d), natural positions `pad` .. pad + n - 1 of a grid of blocks x l, into the
// residue-class layout (G·l, blocks, d): row g·l + r holds positions r, r + l, ... (zeros where
// the grid has no position of x).
at::Tensor ToClasses(const at::Tensor& x, int64_t l, int64_t pad, int64_t blocks) {
  const int64_t groups = x.size(0), d = x.size(2);
  at::Tensor grid = at::zeros({groups, blocks * l, d}, x.options());
  grid.narrow(1, pad, x.size(1)).copy_(x);
  return grid.view({groups, blocks, l, d})
      .transpose(1, 2)
      .contiguous()
      .view({groups * l, blocks, d});
}

// The inverse: (G·l, blocks, e) back to the n natural rows from `pad`, (G, n, e) contiguous.
at::Tensor FromClasses(const at::Tensor& x, int64_t l, int64_t pad, int64_t n) {
  const int64_t groups = x.size(0) / l, blocks = x.size(1), e = x.size(2);
  return x.view({groups, l, blocks, e})
      .transpose(1, 2)
      .reshape({groups, blocks * l, e})
      .narrow(1, pad, n)
      .contiguous();
}

// Square tiles of at most 512 that keep a groups x tile x tile score tile near 4 MiB.
int64_t LongTile(int64_t groups) {
  const auto side = static_cast<int64_t>(
      std::sqrt(static_cast<double>(int64_t{1} << 20) / static_cast<double>(groups)));
  return std::clamp<int64_t>(side, 16, 512);
}

at::Tensor SparseAttentionImpl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, const SparsePatternConfig& pattern,
                               SparseAttentionTiles tiles) {
  const int64_t b = q.size(0), h = q.size(1), lq = q.size(2), d = q.size(3);
  const int64_t lk = k.size(2), bh = b * h, l = pattern.stride;
  if (lq == 0) return at::empty({b, h, 0, d}, q.options());
  SparseGeometry g;
  g.pattern = pattern.pattern;
  g.stride = l;
  g.summary = pattern.summary;
  g.causal = causal;
  g.seqlen_q = lq;
  g.seqlen_k = lk;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const at::Tensor qf = q.reshape({bh, lq, d});
  const at::Tensor kf = k.reshape({bh, lk, d});
  const at::Tensor vf = v.reshape({bh, lk, d});

  Running run;
  if (pattern.pattern == sparse::kStrided && g.key_blocks() > 1) {
    const int64_t pad = g.query_pad(), blocks_q = g.query_blocks(), blocks_k = g.key_blocks();
    const int64_t groups = bh * l;
    const int64_t tq = tiles.long_query > 0 ? tiles.long_query : LongTile(groups);
    const int64_t tk = tiles.long_key > 0 ? tiles.long_key : LongTile(groups);
    Running classes = FreshRunning(groups, blocks_q, d, q.options());
    AttendPart(g, sparse::kLong, ToClasses(qf, l, pad, blocks_q), ToClasses(kf, l, 0, blocks_k),
               ToClasses(vf, l, 0, blocks_k), tq, tk, scale, /*classes=*/l, classes);
    run = {FromClasses(classes.acc, l, pad, lq), FromClasses(classes.max, l, pad, lq),
           FromClasses(classes.sum, l, pad, lq)};
  } else {
    run = FreshRunning(bh, lq, d, q.options());
    if (pattern.pattern == sparse::kFixed && lk > l && g.summary_keys() > 0) {
      std::vector<int64_t> positions(g.summary_keys());
      for (int64_t s = 0; s < g.summary_keys(); ++s) positions[s] = g.summary_position(s);
      const at::Tensor index = at::tensor(positions, at::kLong).to(q.device());
      const int64_t tq = tiles.long_query > 0 ? tiles.long_query : LongTile(bh);
      const int64_t tk = tiles.long_key > 0 ? tiles.long_key : LongTile(bh);
      AttendPart(g, sparse::kLong, qf, kf.index_select(1, index), vf.index_select(1, index), tq, tk,
                 scale, /*classes=*/0, run);
    }
  }
  // The local band (or block), l x l tiles by default, at least 32 and at most standard's.
  const int64_t tq = tiles.query > 0 ? tiles.query : std::clamp<int64_t>(l, 32, 256);
  const int64_t tk = tiles.key > 0 ? tiles.key : std::clamp<int64_t>(l, 32, 512);
  AttendPart(g, sparse::kLocal, qf, kf, vf, tq, tk, scale, /*classes=*/0, run);
  // Every query sees itself in the local part, so every sum is positive.
  return run.acc.div_(run.sum).view({b, h, lq, d});
}

}  // namespace

absl::StatusOr<at::Tensor> SparseAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, bool causal,
                                              const SparsePatternConfig& pattern,
                                              SparseAttentionTiles tiles) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1, -1}, q.device()));
  const int64_t b = q.size(0), h = q.size(1), lq = q.size(2), d = q.size(3);
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {b, h, -1, d}, q.device()));
  const int64_t lk = k.size(2);
  RETURN_IF_ERROR(CheckFloatTensor(v, "v", {b, h, lk, d}, q.device()));
  if (d == 0) return absl::InvalidArgumentError("q: head dimension must be > 0, got 0");
  if (pattern.stride < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse attention: stride must be >= 1, got ", pattern.stride));
  }
  if (pattern.pattern == sparse::kFixed &&
      (pattern.summary < 1 || pattern.summary > pattern.stride)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse attention: the fixed pattern's summary columns c must be in [1, l = ",
                     pattern.stride, "], got ", pattern.summary));
  }
  if (pattern.pattern != sparse::kStrided && pattern.pattern != sparse::kFixed) {
    return absl::InvalidArgumentError("sparse attention: unknown pattern");
  }
  for (int64_t t : {tiles.query, tiles.key, tiles.long_query, tiles.long_key}) {
    if (t < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse attention tiles must be >= 0 (0: the default), got ", t));
    }
  }
  if (causal ? lk < lq : lk != lq) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse attention needs ",
                     causal ? "Lk >= Lq (causal: the queries are the last Lq "
                              "positions)"
                            : "Lk = Lq (bidirectional)",
                     ", got Lq = ", lq, ", Lk = ", lk));
  }
  if (lq > 0 && lk == 0) {
    return absl::InvalidArgumentError("attention over no keys is undefined");
  }
  return GuardTorch("sparse attention", [&]() -> absl::StatusOr<at::Tensor> {
    return SparseAttentionImpl(q, k, v, causal, pattern, tiles);
  });
}

}  // namespace attnserve::kernels
