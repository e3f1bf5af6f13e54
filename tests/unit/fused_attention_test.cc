// The fused CPU attention kernel (kernels/standard/fused_attention_cpu.h) against float64
// formulas on random shapes: whole sequences and chunks after a KV prefix, causal or not,
// windows with and without sinks, strided views of a cache, blocks of 16 and 32 queries with
// padding, tiles of keys that are whole, ragged, masked and skipped; and its checks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/fused_attention_cpu.h"
#include "kernels/standard/kv_cache.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using ::attnserve::testing::MaxRelativeError;
using ::attnserve::testing::RandomTensor;

// softmax(q kᵀ / √d + mask) v in float64; the queries are the last Lq of Lk positions when
// causal; window > 0: only the last `window` keys up to the query, plus keys 0 .. sinks - 1.
at::Tensor Reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     int64_t window, int64_t sinks) {
  const int64_t lq = q.size(2), lk = k.size(2);
  at::Tensor s = at::matmul(q.to(at::kDouble), k.to(at::kDouble).transpose(-1, -2)) /
                 std::sqrt(static_cast<double>(q.size(3)));
  if (causal) {
    const at::Tensor pos = at::arange(lq, at::kLong).unsqueeze(1) + (lk - lq);
    const at::Tensor key = at::arange(lk, at::kLong);
    at::Tensor hidden = key > pos;
    if (window > 0) {
      hidden = hidden.logical_or((key <= pos - window).logical_and(key >= sinks));
    }
    s = s.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  }
  return at::matmul(at::softmax(s, -1), v.to(at::kDouble));
}

TEST(FusedAttentionTest, MatchesTheFloat64FormulaOnRandomShapes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t b = 1 + rng() % 2, h = 1 + rng() % 3, d = 16 * (1 + rng() % 5);
    // Chunks of 1 to 80 queries (one or more blocks of 16 or 32, most with padding) after a
    // prefix of up to 400 keys (several tiles of 128, a ragged last one).
    const int64_t lq = 1 + rng() % 80;
    const bool causal = trial % 5 != 0;
    const int64_t lk = causal ? lq + rng() % 400 : 1 + rng() % 300;
    int64_t window = 0, sinks = 0;
    if (causal && trial % 3 == 0) {
      window = 1 + rng() % 200;
      sinks = trial % 2 ? static_cast<int64_t>(rng() % 40) : 0;
    }
    // k and v as the valid part of a cache with spare capacity (strided views).
    const int64_t spare = rng() % 20;
    const at::Tensor q = RandomTensor({b, h, lq, d}, 3 * trial);
    const at::Tensor k = RandomTensor({b, h, lk + spare, d}, 3 * trial + 1).narrow(2, 0, lk);
    const at::Tensor v = RandomTensor({b, h, lk + spare, d}, 3 * trial + 2).narrow(2, 0, lk);
    ASSERT_TRUE(FusedAttentionSupports(q, k, v));
    auto got = FusedAttentionCpu(q, k, v, causal, window, sinks);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->sizes(), q.sizes());
    EXPECT_TRUE(got->is_contiguous());
    EXPECT_LE(MaxRelativeError(*got, Reference(q, k, v, causal, window, sinks)), 1e-5)
        << "B " << b << " H " << h << " Lq " << lq << " Lk " << lk << " d " << d << " causal "
        << causal << " window " << window << " sinks " << sinks;
  }
}

// A hit's shape: a chunk of 96 queries over 4096 keys (many whole tiles, one masked).
TEST(FusedAttentionTest, AShortChunkOverALongCacheMatchesTheFormula) {
  const at::Tensor q = RandomTensor({1, 4, 96, 64}, 1);
  const at::Tensor k = RandomTensor({1, 4, 4096, 64}, 2);
  const at::Tensor v = RandomTensor({1, 4, 4096, 64}, 3);
  auto got = FusedAttentionCpu(q, k, v, /*causal=*/true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(MaxRelativeError(*got, Reference(q, k, v, true, 0, 0)), 1e-5);
  // A window covering every key is the same computation as none, bit for bit.
  auto windowed = FusedAttentionCpu(q, k, v, /*causal=*/true, /*window=*/4096, /*sinks=*/4);
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_TRUE(at::equal(*got, *windowed));
}

// Large scores: the online softmax's rescaling keeps it finite and exact where a naive exp
// would overflow.
TEST(FusedAttentionTest, LargeScoresStayFinite) {
  const at::Tensor q = RandomTensor({1, 2, 40, 32}, 4, /*std=*/30.0);
  const at::Tensor k = RandomTensor({1, 2, 300, 32}, 5, /*std=*/30.0);
  const at::Tensor v = RandomTensor({1, 2, 300, 32}, 6);
  auto got = FusedAttentionCpu(q, k, v, /*causal=*/true, /*window=*/50, /*sinks=*/2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(at::isfinite(*got).all().item<bool>());
  EXPECT_LE(MaxRelativeError(*got, Reference(q, k, v, true, 50, 2)), 1e-5);
}

// A query block's result does not depend on the other blocks: the last 16 queries of a chunk
// alone give the same bits as within the chunk when they form a block there too.
TEST(FusedAttentionTest, ABlockDoesNotDependOnTheOthers) {
  const at::Tensor q = RandomTensor({1, 2, 64, 64}, 7);
  const at::Tensor k = RandomTensor({1, 2, 500, 64}, 8);
  const at::Tensor v = RandomTensor({1, 2, 500, 64}, 9);
  auto whole = FusedAttentionCpu(q, k, v, true);
  auto first =
      FusedAttentionCpu(q.narrow(2, 0, 32), k.narrow(2, 0, 468), v.narrow(2, 0, 468), true);
  ASSERT_TRUE(whole.ok() && first.ok());
  EXPECT_TRUE(at::equal(whole->narrow(2, 0, 32), *first));
}

// Keys and values in pieces (shared segments of caches with spare room, then the own part,
// possibly empty), split at random positions inside and at the edges of key tiles: the same bits
// as the same keys in one tensor, and the formula's result.
TEST(FusedAttentionTest, KeysInPiecesGiveTheSameBitsAsInOne) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t h = 1 + rng() % 3, d = 16 * (1 + rng() % 4);
    const int64_t lq = 1 + rng() % 40, lk = lq + 1 + rng() % 600;
    const at::Tensor q = RandomTensor({1, h, lq, d}, 7 * trial);
    const at::Tensor k = RandomTensor({1, h, lk, d}, 7 * trial + 1);
    const at::Tensor v = RandomTensor({1, h, lk, d}, 7 * trial + 2);
    // Cut points: some random, some on tile edges (multiples of 128), all before the queries.
    std::vector<int64_t> cuts;
    const int pieces = 1 + rng() % static_cast<int>(kMaxKvSegments);
    for (int i = 0; i < pieces; ++i) {
      const int64_t at = i % 2 ? 128 * (1 + rng() % 4) : 1 + rng() % (lk - 1);
      if (at < lk) cuts.push_back(at);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<KvSegment> shared;
    int64_t start = 0;
    for (const int64_t at : cuts) {
      const int64_t n = at - start, spare = rng() % 9;
      at::Tensor ks = at::zeros({1, h, n + spare, d}), vs = at::zeros({1, h, n + spare, d});
      ks.narrow(2, 0, n).copy_(k.narrow(2, start, n));
      vs.narrow(2, 0, n).copy_(v.narrow(2, start, n));
      shared.push_back({ks, vs, n});
      start = at;
    }
    const at::Tensor own_k = k.narrow(2, start, lk - start), own_v = v.narrow(2, start, lk - start);
    auto whole = FusedAttentionCpu(q, k, v, /*causal=*/true);
    auto split = FusedAttentionCpu(q, shared, own_k, own_v, /*causal=*/true);
    ASSERT_TRUE(whole.ok() && split.ok()) << split.status();
    EXPECT_TRUE(at::equal(*whole, *split))
        << "Lq " << lq << " Lk " << lk << " pieces " << shared.size() + 1;
    EXPECT_LE(MaxRelativeError(*split, Reference(q, k, v, true, 0, 0)), 1e-5);
  }
  // All keys in segments, none of its own.
  const at::Tensor q = RandomTensor({1, 2, 3, 32}, 1), k = RandomTensor({1, 2, 50, 32}, 2);
  const std::vector<KvSegment> all = {{k, k, 50}};
  auto split = FusedAttentionCpu(q, all, k.narrow(2, 0, 0), k.narrow(2, 0, 0), true);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_TRUE(at::equal(*split, *FusedAttentionCpu(q, k, k, true)));
  // Bad segments are refused: a length past the buffer, too many segments.
  EXPECT_FALSE(FusedAttentionCpu(q, {{k, k, 51}}, k.narrow(2, 0, 0), k.narrow(2, 0, 0), true).ok());
  EXPECT_FALSE(FusedAttentionCpu(q, std::vector<KvSegment>(kMaxKvSegments + 1, {k, k, 1}),
                                 k.narrow(2, 0, 0), k.narrow(2, 0, 0), true)
                   .ok());
}

TEST(FusedAttentionTest, RejectsWhatItDoesNotTake) {
  const at::Tensor q = RandomTensor({1, 2, 8, 24}, 1);
  EXPECT_FALSE(FusedAttentionSupports(q, q, q)) << "d = 24 is not a multiple of 16";
  auto odd = FusedAttentionCpu(q, q, q, true);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  const at::Tensor x = RandomTensor({1, 2, 8, 32}, 2);
  EXPECT_FALSE(FusedAttentionSupports(x.to(at::kDouble), x, x));
  EXPECT_FALSE(FusedAttentionSupports(x.transpose(2, 3).contiguous().transpose(2, 3), x, x));
  // FlashAttentionCpu's argument checks.
  EXPECT_FALSE(FusedAttentionCpu(x, x.narrow(2, 0, 4), x.narrow(2, 0, 4), true).ok());
  EXPECT_FALSE(FusedAttentionCpu(x, x, x, /*causal=*/false, /*window=*/2).ok());
  EXPECT_FALSE(FusedAttentionCpu(x, x, x, true, /*window=*/0, /*sinks=*/2).ok());
}

}  // namespace
}  // namespace attnserve::kernels
