// The Sparse Transformer's two patterns (Child et al. 2019) as host-and-device functions: which
// keys a query sees, split into two disjoint parts that the tiled kernels walk tile by tile,
// and the per-score mask inside a tile. The CPU kernel (sparse_attention_cpu.h) uses exactly
// these; tests/unit/sparse_key_tiles_test.cc checks them against the pattern's definition
// (SparseSees), so a CUDA kernel built on them inherits a plan checked where no GPU runs.
//
// Positions: query p sees key j (l = stride, c = summary columns, 0 < c <= l):
//   strided: |p - j| < l (the local part) or (p - j) mod l = 0 (the strided part);
//   fixed:   ⌊j/l⌋ = ⌊p/l⌋ (its block) or j mod l >= l - c (the summary columns);
//   causal:  and j <= p. Every head sees the union of the two parts (the paper's merged head).
//
// The two parts, each walked in a layout where the keys a block of queries sees form one
// contiguous range of tiles:
//   kLocal: the natural layout (key col = position j); strided: the band |p - j| < l; fixed:
//     p's own block.
//   kLong: strided: the residue-class layout. Positions are regrouped by r = position mod l,
//     class r holding positions r, r + l, r + 2l, ...; in it query row m (class position
//     m + query_block0) sees class keys m' != m + query_block0 (causal: m' < m +
//     query_block0), i.e. positions p - k·l, k != 0. fixed: the summary layout, the summary
//     columns in order (col s at position ⌊s/c⌋·l + l - c + s mod c); query p sees those
//     outside its own block (causal: in earlier blocks).
// The two parts are disjoint and their union is the pattern. With l >= seqlen_k the local part
// alone is every key (causal: every earlier one) and the long part is empty: standard attention.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ATTNSERVE_SPARSE_HD __host__ __device__
#else
#define ATTNSERVE_SPARSE_HD
#endif

namespace attnserve::kernels::sparse {

enum SparsePatternKind : int32_t { kStrided = 0, kFixed = 1 };
enum SparsePart : int32_t { kLocal = 0, kLong = 1 };

// A pattern and the shapes of one attention call. causal: the queries are the last seqlen_q of
// seqlen_k positions (query row i at position seqlen_k - seqlen_q + i); otherwise
// seqlen_q = seqlen_k and row i is at position i.
struct SparseGeometry {
  int32_t pattern = kStrided;
  int64_t stride = 1;   // l >= 1
  int64_t summary = 1;  // c, 1 <= c <= l (fixed only)
  bool causal = true;
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;

  ATTNSERVE_SPARSE_HD int64_t offset() const { return seqlen_k - seqlen_q; }
  // The residue-class layout (strided, kLong): blocks of l positions. Keys fill blocks
  // 0 .. key_blocks() - 1; the queries' grid starts at block query_block0() (the block of the
  // first query), with query_pad() padding rows before the first query in every class.
  ATTNSERVE_SPARSE_HD int64_t key_blocks() const { return (seqlen_k + stride - 1) / stride; }
  ATTNSERVE_SPARSE_HD int64_t query_block0() const { return offset() / stride; }
  ATTNSERVE_SPARSE_HD int64_t query_pad() const { return offset() - query_block0() * stride; }
  ATTNSERVE_SPARSE_HD int64_t query_blocks() const { return key_blocks() - query_block0(); }
  // Keys of class r (positions r, r + l, ... below seqlen_k).
  ATTNSERVE_SPARSE_HD int64_t class_keys(int64_t r) const {
    return r < seqlen_k ? (seqlen_k - r + stride - 1) / stride : 0;
  }
  // The summary layout (fixed, kLong): the summary columns below seqlen_k.
  ATTNSERVE_SPARSE_HD int64_t summary_keys() const {
    const int64_t full = seqlen_k / stride, rest = seqlen_k % stride;
    return full * summary + (rest > stride - summary ? rest - (stride - summary) : 0);
  }
  ATTNSERVE_SPARSE_HD int64_t summary_position(int64_t s) const {
    return s / summary * stride + stride - summary + s % summary;
  }
};

// The pattern's definition on positions (the reference and the tests' ground truth).
ATTNSERVE_SPARSE_HD inline bool SparseSees(int32_t pattern, int64_t stride, int64_t summary,
                                           bool causal, int64_t p, int64_t j) {
  if (causal && j > p) return false;
  const int64_t distance = p > j ? p - j : j - p;
  if (pattern == kStrided) return distance < stride || distance % stride == 0;
  return j / stride == p / stride || j % stride >= stride - summary;
}

// Key columns [begin, end) of a part's layout.
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// The columns of `part` that query rows first .. last (a block, last < the part's query rows;
// strided kLong rows are class rows) may see; every column outside is hidden from all of them.
ATTNSERVE_SPARSE_HD inline KeyRange PlanSparseKeys(const SparseGeometry& g, int32_t part,
                                                   int64_t first, int64_t last) {
  const int64_t l = g.stride;
  KeyRange r;
  if (part == kLocal) {
    const int64_t p0 = g.offset() + first, p1 = g.offset() + last;
    int64_t end;
    if (g.pattern == kStrided) {
      r.begin = p0 - l + 1 > 0 ? p0 - l + 1 : 0;
      end = g.causal ? p1 + 1 : p1 + l;
    } else {
      r.begin = p0 / l * l;
      end = g.causal ? p1 + 1 : (p1 / l + 1) * l;
    }
    r.end = end < g.seqlen_k ? end : g.seqlen_k;
  } else if (g.pattern == kStrided) {
    // Class rows first .. last sit at class positions first + query_block0 .. ; causal keys
    // strictly before the last of them.
    r.end = g.causal ? last + g.query_block0() : g.key_blocks();
  } else {
    const int64_t n = g.summary_keys();
    const int64_t end = g.causal ? (g.offset() + last) / l * g.summary : n;
    r.end = end < n ? end : n;
  }
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

// Whether query row `row` must not see column `col` of `part` (a column past the part's keys
// included). For strided kLong the class's own key count is not known here (it depends on the
// batch row's residue, ClassKeyHidden below): only the pattern within the class is.
ATTNSERVE_SPARSE_HD inline bool SparseKeyHidden(const SparseGeometry& g, int32_t part, int64_t row,
                                                int64_t col) {
  const int64_t l = g.stride;
  if (part == kLocal) {
    const int64_t p = g.offset() + row;
    if (col >= g.seqlen_k || (g.causal && col > p)) return true;
    if (g.pattern == kStrided) return (p > col ? p - col : col - p) >= l;
    return col / l != p / l;
  }
  if (g.pattern == kStrided) {
    const int64_t m = row + g.query_block0();
    return g.causal ? col >= m : col == m;
  }
  const int64_t p = g.offset() + row;
  if (col >= g.summary_keys()) return true;
  const int64_t j = g.summary_position(col);
  return j / l == p / l || (g.causal && j > p);
}

// Strided kLong: column `col` of class r is past the keys (padding of the class layout).
ATTNSERVE_SPARSE_HD inline bool ClassKeyHidden(const SparseGeometry& g, int64_t r, int64_t col) {
  return col >= g.class_keys(r);
}

}  // namespace attnserve::kernels::sparse
