// The CUDA prefill kernel's walk over key tiles (flash_key_tiles.h), checked on the CPU against
// the definition of which keys a query sees: no GPU is needed to find a tile it would skip.
#include "kernels/standard/flash_key_tiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace attnserve::kernels::standard {
namespace {

// Whether query i (of seqlen_q, the last of seqlen_k positions when causal) sees key j.
bool Sees(int64_t i, int64_t j, int64_t seqlen_q, int64_t seqlen_k, bool causal, int64_t window,
          int64_t sinks) {
  if (!causal) return true;
  const int64_t position = seqlen_k - seqlen_q + i;
  if (j > position) return false;
  return window <= 0 || j < sinks || position - j < window;
}

TEST(FlashKeyTilesTest, EveryBlockVisitsExactlyTheTilesItsQueriesSee) {
  std::mt19937_64 rng(17);
  constexpr int64_t kRows = 64, kTile = 64;
  for (int c = 0; c < 400; ++c) {
    const bool causal = c % 5 != 0;
    const int64_t seqlen_q = 1 + static_cast<int64_t>(rng() % 700);
    const int64_t seqlen_k = causal ? seqlen_q + static_cast<int64_t>(rng() % 1500)
                                    : 1 + static_cast<int64_t>(rng() % 900);
    const int64_t window = causal && c % 2 ? 1 + static_cast<int64_t>(rng() % 600) : 0;
    const int64_t sinks = window > 0 && c % 3 ? static_cast<int64_t>(rng() % 150) : 0;
    SCOPED_TRACE(::testing::Message() << "Lq " << seqlen_q << ", Lk " << seqlen_k << ", causal "
                                      << causal << ", window " << window << ", sinks " << sinks);
    for (int64_t q0 = 0; q0 < seqlen_q; q0 += kRows) {
      const KeyTiles plan =
          PlanKeyTiles(seqlen_q, seqlen_k, causal, window, sinks, q0, kRows, kTile);
      std::set<int64_t> visited;
      int64_t last = -1;
      for (int64_t t = plan.first; t < plan.end; t = plan.next(t)) {
        ASSERT_GT(t, last) << "tiles out of order or twice, block " << q0;
        last = t;
        visited.insert(t);
      }
      // The tiles the block's real queries need, from the definition.
      std::set<int64_t> needed;
      for (int64_t i = q0; i < std::min(q0 + kRows, seqlen_q); ++i) {
        for (int64_t j = 0; j < seqlen_k; ++j) {
          if (Sees(i, j, seqlen_q, seqlen_k, causal, window, sinks)) needed.insert(j / kTile);
        }
      }
      EXPECT_EQ(visited, needed) << "block " << q0;
      // The kernel's per-score mask is the definition, for every real query and key.
      for (int64_t i = q0; i < std::min(q0 + kRows, seqlen_q); ++i) {
        for (int64_t j = 0; j < seqlen_k + kTile; ++j) {
          ASSERT_EQ(KeyHidden(seqlen_q, seqlen_k, causal, window, sinks, i, j),
                    j >= seqlen_k || !Sees(i, j, seqlen_q, seqlen_k, causal, window, sinks))
              << "query " << i << ", key " << j;
        }
      }
      // A tile that hides a key from a real query must be masked.
      for (int64_t t : visited) {
        bool hides = false;
        for (int64_t i = q0; i < std::min(q0 + kRows, seqlen_q) && !hides; ++i) {
          for (int64_t j = t * kTile; j < (t + 1) * kTile && !hides; ++j) {
            hides = j >= seqlen_k || !Sees(i, j, seqlen_q, seqlen_k, causal, window, sinks);
          }
        }
        if (hides) {
          EXPECT_TRUE(
              TileHidesKeys(seqlen_q, seqlen_k, causal, window, sinks, q0, kRows, t * kTile, kTile))
              << "block " << q0 << ", tile " << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace attnserve::kernels::standard
