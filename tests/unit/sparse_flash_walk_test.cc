// The CUDA sparse attention kernel's plan (kernels/sparse/sparse_flash_walk.h), run on the CPU
// as the kernel runs it (blocks, their query rows, the tiles they visit, each tile's key rows
// and masks, the two passes), since no GPU runs the kernel here: together the two passes must
// score exactly the pattern's (query, key) pairs, each once, every real query row must be
// written once per pass, and a tile left unmasked (TileHides false) must hide no score.
#include "kernels/sparse/sparse_flash_walk.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>
#include <vector>

namespace attnserve::kernels::sparse {
namespace {

struct WalkCounts {
  std::map<std::pair<int64_t, int64_t>, int> pairs;  // (query row, key position) -> times scored
  int64_t tiles = 0;                                 // tiles visited, both passes
};

// Runs one pass as the kernel does; checks rows and unmasked tiles on the way.
void RunPass(const SparseFlashWalk& walk, WalkCounts* counts) {
  const SparseGeometry& g = walk.g;
  std::vector<int> written(g.seqlen_q, 0);
  for (int64_t block = 0; block < walk.blocks(); ++block) {
    const SparseFlashWalk::Block b = walk.PlanBlock(block);
    std::vector<int64_t> rows;  // the block's real rows: (r, q row)
    for (int64_t r = 0; r < walk.rows; ++r) {
      const int64_t row = walk.QueryRow(b, r);
      if (row < 0) continue;
      ASSERT_LT(row, g.seqlen_q) << "block " << block << " r " << r;
      ++written[row];
      rows.push_back(r);
    }
    for (int64_t t = walk.FirstTile(b); t < walk.EndTile(b); t = walk.NextTile(b, t)) {
      ++counts->tiles;
      const int64_t k0 = t * walk.tile;
      const bool hides = walk.TileHides(b, k0);
      for (int64_t col = k0; col < k0 + walk.tile; ++col) {
        const int64_t key = walk.KeyRow(b, col);
        for (int64_t r : rows) {
          if (walk.Hidden(b, r, col)) continue;
          ASSERT_GE(key, 0) << "a visible column past the keys: block " << block << " col " << col;
          ASSERT_LT(key, g.seqlen_k);
          ++counts->pairs[{walk.QueryRow(b, r), key}];
        }
        if (!hides) {
          for (int64_t r : rows) {
            EXPECT_FALSE(walk.Hidden(b, r, col))
                << "tile at " << k0 << " left unmasked hides col " << col << " from r " << r
                << " (part " << walk.part << ", block " << block << ")";
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < g.seqlen_q; ++i) {
    EXPECT_EQ(written[i], 1) << "query row " << i << " (part " << walk.part << ")";
  }
}

WalkCounts RunWalk(const SparseGeometry& g, int64_t rows, int64_t tile) {
  WalkCounts counts;
  SparseFlashWalk walk;
  walk.g = g;
  walk.rows = rows;
  walk.tile = tile;
  if (SparseHasLongPart(g)) {
    walk.part = kLong;
    RunPass(walk, &counts);
  }
  walk.part = kLocal;
  RunPass(walk, &counts);
  return counts;
}

TEST(SparseFlashWalkTest, TheTwoPassesScoreExactlyThePatternsPairs) {
  std::mt19937_64 rng(28);
  for (int c = 0; c < 240; ++c) {
    SparseGeometry g;
    g.pattern = c % 2 ? kFixed : kStrided;
    g.causal = c % 3 != 0;
    g.stride = 1 + static_cast<int64_t>(rng() % (c % 4 == 0 ? 150 : 24));
    g.summary = 1 + static_cast<int64_t>(rng() % g.stride);
    g.seqlen_k = 1 + static_cast<int64_t>(rng() % 300);
    g.seqlen_q = g.causal ? 1 + static_cast<int64_t>(rng() % g.seqlen_k) : g.seqlen_k;
    // The kernel's 64 x 64, and small odd sizes that cross strides and tiles more often.
    const int64_t rows = c % 5 == 0 ? 64 : 1 + static_cast<int64_t>(rng() % 20);
    const int64_t tile = c % 5 == 0 ? 64 : 1 + static_cast<int64_t>(rng() % 20);
    SCOPED_TRACE(::testing::Message()
                 << "pattern " << g.pattern << " causal " << g.causal << " l " << g.stride << " c "
                 << g.summary << " Lq " << g.seqlen_q << " Lk " << g.seqlen_k << " rows " << rows
                 << " tile " << tile);
    const WalkCounts counts = RunWalk(g, rows, tile);
    int64_t want = 0;
    for (int64_t i = 0; i < g.seqlen_q; ++i) {
      for (int64_t j = 0; j < g.seqlen_k; ++j) {
        if (!SparseSees(g.pattern, g.stride, g.summary, g.causal, g.offset() + i, j)) continue;
        ++want;
        const auto it = counts.pairs.find({i, j});
        EXPECT_TRUE(it != counts.pairs.end() && it->second == 1)
            << "query " << i << " key " << j << " scored "
            << (it == counts.pairs.end() ? 0 : it->second) << " times";
      }
    }
    EXPECT_EQ(static_cast<int64_t>(counts.pairs.size()), want) << "pairs outside the pattern";
    if (HasFailure()) return;
  }
}

TEST(SparseFlashWalkTest, TheLaunchGeometry) {
  SparseGeometry g;
  g.stride = 128;
  g.seqlen_q = g.seqlen_k = 16384;
  SparseFlashWalk walk;
  walk.g = g;
  // Local: one block per 64 queries. Strided long: 128 classes of 128 rows, 2 blocks each.
  walk.part = kLocal;
  EXPECT_EQ(walk.blocks(), 256);
  walk.part = kLong;
  EXPECT_EQ(walk.blocks(), 128 * 2);
  EXPECT_EQ(walk.PlanBlock(3).cls, 1);
  EXPECT_EQ(walk.PlanBlock(3).first, 64);
  EXPECT_EQ(walk.QueryRow(walk.PlanBlock(3), 5), (64 + 5) * 128 + 1);
  EXPECT_EQ(walk.KeyRow(walk.PlanBlock(3), 7), 7 * 128 + 1);
  // A chunk of 100 queries after 1000 cached keys (causal): class rows start at block 7, the
  // first query's, and rows before position 1000 are padding.
  g.seqlen_k = 1100;
  g.seqlen_q = 100;
  walk.g = g;
  EXPECT_EQ(walk.blocks(), 128 * 1);
  const SparseFlashWalk::Block b = walk.PlanBlock(0);  // class 0: positions 896, 1024
  EXPECT_EQ(walk.QueryRow(b, 0), -1);
  EXPECT_EQ(walk.QueryRow(b, 1), 1024 - 1000);
  EXPECT_EQ(walk.QueryRow(b, 2), -1);
  // l >= Lk: no long pass (standard attention).
  g.stride = 2048;
  EXPECT_FALSE(SparseHasLongPart(g));
}

TEST(SparseFlashWalkTest, ItVisitsOLTimesRootLTiles) {
  // 4096 queries, l = 64, the kernel's 64 x 64 tiles: causal standard attention visits 2080
  // tiles; strided about 2 band tiles a block (128) plus 64 classes x 1 block x 1-2 tiles,
  // fixed its block and the summary columns (c = 4: 256 columns, 4 tiles at most).
  for (int32_t pattern : {kStrided, kFixed}) {
    SparseGeometry g;
    g.pattern = pattern;
    g.stride = 64;
    g.summary = 4;
    g.seqlen_q = g.seqlen_k = 4096;
    const WalkCounts counts = RunWalk(g, 64, 64);
    EXPECT_LE(counts.tiles, pattern == kStrided ? 128 + 64 * 2 : 64 + 64 * 4) << pattern;
  }
}

}  // namespace
}  // namespace attnserve::kernels::sparse
