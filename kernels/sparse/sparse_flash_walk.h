// The Sparse Transformer's plan for the shared FlashAttention kernel
// (kernels/standard/flash_attention_kernel.cuh): which queries a block of the CUDA kernel holds,
// which key rows a tile's columns are, which tiles it visits and which scores it hides, as
// host-and-device functions on sparse_key_tiles.h's two parts. The CUDA kernel
// (sparse_attention_cuda.h) runs the walk in two passes; tests/unit/sparse_key_tiles_test.cc
// runs the same plan on the CPU and checks that the two passes, together, visit exactly the
// pattern's (query, key) pairs, each once, and that every tile left unmasked hides no key.
//
// Pass 1, the long part (kLong), writes every query's partial softmax state; pass 2, the local
// part (kLocal), starts from it and writes the output. A block holds `rows` query rows of the
// part's query layout, a tile `tile` columns of its key layout:
//   kLocal: natural rows (row i: query i) and key positions; the tiles PlanSparseKeys gives.
//   kLong, strided: the residue-class layout of both: blocks() = l classes x row_tiles(), block
//     (class r, row tile t) holds class rows t·rows .. (row m: position (m + query_block0)·l + r,
//     padding when before the first query or past the last key), column c is position c·l + r.
//     A block of one class then shares its keys: O(L/l) columns for `rows` queries.
//   kLong, fixed: natural rows; column s is the summary column at summary_position(s).
// Tiles are visited once each, in increasing order, from the one holding the part's first
// visible column to the one holding its last.
#pragma once

#include <cstdint>

#include "kernels/sparse/sparse_key_tiles.h"

namespace attnserve::kernels::sparse {

// Whether some query row in first .. last of `part` may not see some column in [c0, c1) of
// the part's layout (a column past the part's keys included; `keys`: the part's column count,
// for strided kLong the class's). Conservative: true for some tiles whose scores are all
// visible, never false for one that hides a score from a row in the range.
ATTNSERVE_SPARSE_HD inline bool SparseTileHidesKeys(const SparseGeometry& g, int32_t part,
                                                    int64_t first, int64_t last, int64_t c0,
                                                    int64_t c1, int64_t keys) {
  const int64_t l = g.stride;
  if (c1 > keys) return true;
  if (part == kLocal) {
    const int64_t p0 = g.offset() + first, p1 = g.offset() + last;
    if (g.causal && c1 - 1 > p0) return true;
    if (g.pattern == kStrided) return p1 - c0 >= l || (!g.causal && c1 - 1 - p0 >= l);
    return c0 / l != p0 / l || (c1 - 1) / l != p0 / l || p1 / l != p0 / l;
  }
  if (g.pattern == kStrided) {
    const int64_t m0 = first + g.query_block0(), m1 = last + g.query_block0();
    if (g.causal) return c1 - 1 >= m0;
    return !(c1 - 1 < m0 || c0 > m1);
  }
  const int64_t p0 = g.offset() + first, p1 = g.offset() + last;
  const int64_t j0 = g.summary_position(c0), j1 = g.summary_position(c1 - 1);
  if (j1 / l < p0 / l) return false;  // every column in an earlier block than every query
  return g.causal || j0 / l <= p1 / l;
}

struct SparseFlashWalk {
  struct Block {
    int64_t cls = 0;    // strided kLong: the residue class; otherwise 0
    int64_t first = 0;  // the block's first row of the part's query layout
    int64_t last = 0;   // its last row (clipped to the layout's rows; may be < first: empty)
    int64_t keys = 0;   // columns of the part's key layout (strided kLong: of the class)
    int64_t tile_begin = 0, tile_end = 0;
  };

  SparseGeometry g;
  int32_t part = kLocal;
  int64_t rows = 64;  // query rows per block (the kernel's kBr)
  int64_t tile = 64;  // columns per key tile (the kernel's kBc)
  const float* in = nullptr;
  float* out = nullptr;

  // Rows of the part's query layout per class (strided kLong) or in all.
  ATTNSERVE_SPARSE_HD int64_t layout_rows() const {
    return part == kLong && g.pattern == kStrided ? g.query_blocks() : g.seqlen_q;
  }
  ATTNSERVE_SPARSE_HD int64_t row_tiles() const { return (layout_rows() + rows - 1) / rows; }
  // The grid's x: blocks per (batch, head).
  ATTNSERVE_SPARSE_HD int64_t blocks() const {
    return part == kLong && g.pattern == kStrided ? g.stride * row_tiles() : row_tiles();
  }
  ATTNSERVE_SPARSE_HD bool class_layout() const { return part == kLong && g.pattern == kStrided; }

  ATTNSERVE_SPARSE_HD Block PlanBlock(int64_t block) const {
    Block b;
    const int64_t per_class = row_tiles();
    b.cls = class_layout() ? block / per_class : 0;
    b.first = (class_layout() ? block % per_class : block) * rows;
    const int64_t last = b.first + rows - 1, end = layout_rows() - 1;
    b.last = last < end ? last : end;
    b.keys = class_layout() ? g.class_keys(b.cls) : part == kLong ? g.summary_keys() : g.seqlen_k;
    if (b.last < b.first) return b;  // no rows: no tiles
    const KeyRange range = PlanSparseKeys(g, part, b.first, b.last);
    const int64_t end_col = range.end < b.keys ? range.end : b.keys;
    if (end_col > range.begin) {
      b.tile_begin = range.begin / tile;
      b.tile_end = (end_col + tile - 1) / tile;
    }
    return b;
  }
  // The q / out row of the block's row r (0 .. rows - 1), or -1 for padding.
  ATTNSERVE_SPARSE_HD int64_t QueryRow(const Block& b, int64_t r) const {
    const int64_t row = b.first + r;
    if (row > b.last) return -1;
    if (!class_layout()) return row;
    const int64_t position = (row + g.query_block0()) * g.stride + b.cls;
    return position >= g.offset() && position < g.seqlen_k ? position - g.offset() : -1;
  }
  ATTNSERVE_SPARSE_HD int64_t FirstTile(const Block& b) const { return b.tile_begin; }
  ATTNSERVE_SPARSE_HD int64_t EndTile(const Block& b) const { return b.tile_end; }
  ATTNSERVE_SPARSE_HD int64_t NextTile(const Block&, int64_t t) const { return t + 1; }
  // The key position (k / v row) of column col, or -1 past the part's keys.
  ATTNSERVE_SPARSE_HD int64_t KeyRow(const Block& b, int64_t col) const {
    if (col < 0 || col >= b.keys) return -1;
    if (part == kLocal) return col;
    return class_layout() ? col * g.stride + b.cls : g.summary_position(col);
  }
  ATTNSERVE_SPARSE_HD bool TileHides(const Block& b, int64_t k0) const {
    return SparseTileHidesKeys(g, part, b.first, b.last, k0, k0 + tile, b.keys);
  }
  ATTNSERVE_SPARSE_HD bool Hidden(const Block& b, int64_t r, int64_t col) const {
    return col >= b.keys || SparseKeyHidden(g, part, b.first + r, col);
  }
  ATTNSERVE_SPARSE_HD const float* partial_in() const { return in; }
  ATTNSERVE_SPARSE_HD float* partial_out() const { return out; }
};

// Whether the long part holds any key for any query (l < seqlen_k); when not, the kernel runs
// the local pass alone (standard attention for l >= seqlen_k).
ATTNSERVE_SPARSE_HD inline bool SparseHasLongPart(const SparseGeometry& g) {
  return g.stride < g.seqlen_k;
}

}  // namespace attnserve::kernels::sparse
