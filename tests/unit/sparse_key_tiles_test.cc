// The sparse patterns' tile plan and per-score masks (kernels/sparse/sparse_key_tiles.h), which
// the CPU kernel uses and a CUDA kernel would, checked on the CPU against the patterns'
// definition: the two parts are disjoint, their union is the pattern, and no planned range
// leaves out a key some query of the block sees. Also the decode step's key list.
#include "kernels/sparse/sparse_key_tiles.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "kernels/sparse/sparse_step_cpu.h"

namespace attnserve::kernels::sparse {
namespace {

// The position that column `col` of `part` holds for query row `row` (-1: none).
int64_t KeyPosition(const SparseGeometry& g, int32_t part, int64_t row, int64_t col) {
  if (part == kLocal) return col;
  if (g.pattern == kFixed) return g.summary_position(col);
  // Class layout: query row `row` of class r = position mod l.
  const int64_t p = g.offset() + row;
  return col * g.stride + p % g.stride;
}

// Class rows of the strided long part: position p is row (p / l - query_block0) of class p % l.
int64_t LongRow(const SparseGeometry& g, int64_t p) {
  return g.pattern == kStrided ? p / g.stride - g.query_block0() : p - g.offset();
}

// Case c of a sweep: both patterns, causal (chunks after a prefix) and not, strides below
// max_stride, up to max_keys keys.
SparseGeometry RandomGeometry(int c, std::mt19937_64& rng, int64_t max_stride, int64_t max_keys) {
  SparseGeometry g;
  g.pattern = c % 2 ? kFixed : kStrided;
  g.causal = c % 3 != 0;
  g.stride = 1 + static_cast<int64_t>(rng() % max_stride);
  g.summary = 1 + static_cast<int64_t>(rng() % g.stride);
  g.seqlen_k = 1 + static_cast<int64_t>(rng() % max_keys);
  g.seqlen_q = g.causal ? 1 + static_cast<int64_t>(rng() % g.seqlen_k) : g.seqlen_k;
  return g;
}

TEST(SparseKeyTilesTest, ThePartsAreDisjointAndTheirUnionIsThePattern) {
  std::mt19937_64 rng(3);
  for (int c = 0; c < 300; ++c) {
    const SparseGeometry g = RandomGeometry(c, rng, 20, 90);
    SCOPED_TRACE(::testing::Message()
                 << "pattern " << g.pattern << " causal " << g.causal << " l " << g.stride << " c "
                 << g.summary << " Lq " << g.seqlen_q << " Lk " << g.seqlen_k);
    for (int64_t i = 0; i < g.seqlen_q; ++i) {
      const int64_t p = g.offset() + i;
      // Every position the query sees through each part.
      std::multiset<int64_t> seen;
      const int64_t local_cols = g.seqlen_k;
      for (int64_t col = 0; col < local_cols + 3; ++col) {
        if (!SparseKeyHidden(g, kLocal, i, col)) seen.insert(col);
      }
      const int64_t long_cols = g.pattern == kStrided ? g.key_blocks() : g.summary_keys();
      const int64_t row = LongRow(g, p);
      for (int64_t col = 0; col < long_cols + 3; ++col) {
        if (SparseKeyHidden(g, kLong, row, col)) continue;
        const int64_t j = KeyPosition(g, kLong, i, col);
        if (g.pattern == kStrided && ClassKeyHidden(g, p % g.stride, col)) {
          EXPECT_GE(j, g.seqlen_k);
          continue;
        }
        seen.insert(j);
      }
      for (int64_t j = 0; j < g.seqlen_k; ++j) {
        EXPECT_EQ(seen.count(j),
                  SparseSees(g.pattern, g.stride, g.summary, g.causal, p, j) ? 1u : 0u)
            << "query " << p << " key " << j;
      }
      for (int64_t j : seen) EXPECT_LT(j, g.seqlen_k) << "query " << p;
    }
  }
}

TEST(SparseKeyTilesTest, EveryBlockPlanHoldsEveryKeyItsQueriesSee) {
  std::mt19937_64 rng(11);
  for (int c = 0; c < 300; ++c) {
    const SparseGeometry g = RandomGeometry(c, rng, 24, 200);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 17);
    SCOPED_TRACE(::testing::Message()
                 << "pattern " << g.pattern << " causal " << g.causal << " l " << g.stride << " Lq "
                 << g.seqlen_q << " Lk " << g.seqlen_k << " rows " << rows);
    for (int32_t part : {kLocal, kLong}) {
      const int64_t query_rows =
          part == kLong && g.pattern == kStrided ? g.query_blocks() : g.seqlen_q;
      const int64_t cols = part == kLocal          ? g.seqlen_k
                           : g.pattern == kStrided ? g.key_blocks()
                                                   : g.summary_keys();
      for (int64_t q0 = 0; q0 < query_rows; q0 += rows) {
        const int64_t last = std::min(q0 + rows, query_rows) - 1;
        const KeyRange range = PlanSparseKeys(g, part, q0, last);
        EXPECT_LE(range.end, cols);
        for (int64_t i = q0; i <= last; ++i) {
          for (int64_t col = 0; col < cols; ++col) {
            if (!SparseKeyHidden(g, part, i, col)) {
              EXPECT_TRUE(col >= range.begin && col < range.end)
                  << "part " << part << " row " << i << " col " << col << " outside ["
                  << range.begin << ", " << range.end << ")";
            }
          }
        }
      }
    }
  }
}

TEST(SparseKeyTilesTest, ThePlanSkipsWhatNoQuerySees) {
  // l = 128 over 16K keys: a block of 128 queries plans ~2l local keys, and the long part
  // L/l classes' keys or c·L/l summary columns, not L.
  for (int32_t pattern : {kStrided, kFixed}) {
    SparseGeometry g;
    g.pattern = pattern;
    g.stride = 128;
    g.summary = 8;
    g.seqlen_q = g.seqlen_k = 16384;
    const KeyRange local = PlanSparseKeys(g, kLocal, 8192, 8192 + 127);
    EXPECT_LE(local.end - local.begin, 2 * 128);
    // The strided long part's rows are class rows: positions 8192 .. of every class are row 64.
    const KeyRange far = pattern == kStrided ? PlanSparseKeys(g, kLong, 64, 64 + 15)
                                             : PlanSparseKeys(g, kLong, 8192, 8192 + 127);
    EXPECT_LE(far.end - far.begin, pattern == kStrided ? 16384 / 128 : 8 * 16384 / 128);
    EXPECT_GT(far.end - far.begin, 0);
  }
}

TEST(SparseStepPositionsTest, AStepReadsExactlyThePatternsKeys) {
  for (sparse::SparsePatternKind pattern : {kStrided, kFixed}) {
    for (int64_t l : {1, 3, 8}) {
      const SparsePatternConfig config{pattern, l, std::min<int64_t>(2, l)};
      for (int64_t p = 0; p < 60; ++p) {
        const std::vector<int64_t> got = SparseStepPositions(config, p);
        std::vector<int64_t> want;
        for (int64_t j = 0; j <= p; ++j) {
          if (SparseSees(pattern, l, config.summary, /*causal=*/true, p, j)) want.push_back(j);
        }
        EXPECT_EQ(got, want) << "pattern " << pattern << " l " << l << " p " << p;
      }
    }
  }
  // O(l + L/l) keys at 32K: 128 + 256 for strided, where standard reads 32768.
  EXPECT_EQ(SparseStepPositions({kStrided, 128, 8}, 32767).size(), 128u + 255u);
}

}  // namespace
}  // namespace attnserve::kernels::sparse
