// Model's copies of a state (server/model/model_state_copies.cc): compact, sharing caches,
// sharing a KV prefix, with room reserved; each computes like the original.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/standard/kv_cache.h"
#include "server/model/model.h"
#include "server/model/model_repository.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

// The hybrid's state after `n` tokens and one step (its KV cache grown by doubling).
ModelState HybridStateAfter(const Model& m, int64_t n) {
  ModelState state = *m.NewState(1);
  at::Tensor tokens = at::randint(1, 100, {1, n}, at::kLong);
  EXPECT_TRUE(m.Forward(tokens, &state, OutputKind::kLastLogits).ok());
  EXPECT_TRUE(m.Forward(at::full({1, 1}, 7, at::kLong), &state, OutputKind::kLastLogits).ok());
  return state;
}

// CompactClone: the KV cache (the hybrid's last layer) keeps its valid entries plus `reserve`,
// the recurrent layers are copied, and computing on the copy equals computing on the original;
// CloneSharingCaches: the KV buffers are the original's, the recurrent tensors copies, and the
// original appending past the shared prefix leaves the copy's results unchanged.
TEST(ModelTest, CompactAndSharingClonesComputeLikeTheOriginal) {
  auto repo = ModelRepository::BuildDefault();
  const Model& m = *(*repo)->Find("hybrid");
  const std::vector<std::vector<bool>>& growing = m.growing_caches();
  ASSERT_EQ(growing.size(), 4u);
  EXPECT_FALSE(growing[0][0]);
  EXPECT_TRUE(growing[3][0]);
  at::manual_seed(3);
  ModelState state = HybridStateAfter(m, 100);
  ASSERT_GT(state.layers[3].tensors[0].size(2), 106) << "the cache grew by doubling";
  const at::Tensor next = at::randint(1, 100, {1, 5}, at::kLong);

  ModelState compact = m.CompactClone(state, 5);
  EXPECT_EQ(compact.layers[3].tensors[0].size(2), 101 + 5);
  ModelState shared = m.CloneSharingCaches(state);
  EXPECT_EQ(shared.layers[3].tensors[0].data_ptr(), state.layers[3].tensors[0].data_ptr());
  EXPECT_NE(shared.layers[0].tensors[0].data_ptr(), state.layers[0].tensors[0].data_ptr());

  ModelState plain = state.Clone();
  const at::Tensor want = *m.Forward(next, &plain, OutputKind::kLastLogits);
  // The original goes on (writing past position 101 of the shared buffer) ...
  ASSERT_TRUE(m.Forward(at::full({1, 3}, 9, at::kLong), &state, OutputKind::kLastLogits).ok());
  // ... and neither copy sees it.
  ModelState from_shared = m.CompactClone(shared, 5);
  EXPECT_TRUE(at::equal(*m.Forward(next, &compact, OutputKind::kLastLogits), want));
  EXPECT_TRUE(at::equal(*m.Forward(next, &from_shared, OutputKind::kLastLogits), want));
}

// ReserveCaches: a cache with less room gets one buffer of position + tokens holding its valid
// entries (a buffer shared with a copy is left to the copy), one with room is left as it is,
// and computing on the reserved state equals computing on the original, without regrowing.
TEST(ModelTest, ReservedCachesComputeLikeTheOriginalWithoutRegrowing) {
  auto repo = ModelRepository::BuildDefault();
  const Model& m = *(*repo)->Find("hybrid");
  at::manual_seed(4);
  ModelState state = HybridStateAfter(m, 100);
  const at::Tensor next = at::randint(1, 100, {1, 300}, at::kLong);
  ModelState plain = state.Clone();
  const at::Tensor want = *m.Forward(next, &plain, OutputKind::kLastLogits);

  const ModelState shared = m.CloneSharingCaches(state);
  const void* before = state.layers[3].tensors[0].data_ptr();
  ASSERT_TRUE(m.ReserveCaches(state, 300).ok());
  EXPECT_EQ(state.layers[3].tensors[0].size(2), 101 + 300);
  EXPECT_EQ(state.layers[3].tensors[1].size(2), 101 + 300);
  EXPECT_NE(state.layers[3].tensors[0].data_ptr(), before);
  EXPECT_EQ(shared.layers[3].tensors[0].data_ptr(), before);
  const void* reserved = state.layers[3].tensors[0].data_ptr();
  ASSERT_TRUE(m.ReserveCaches(state, 200).ok());  // room already: untouched
  EXPECT_EQ(state.layers[3].tensors[0].data_ptr(), reserved);
  EXPECT_TRUE(at::equal(*m.Forward(next, &state, OutputKind::kLastLogits), want));
  EXPECT_EQ(state.layers[3].tensors[0].data_ptr(), reserved) << "no regrowth";
}

// CloneSharingPrefix: the KV cache (the hybrid's last layer) reads the original's entries in
// place (a shared segment, no copy) with own room for `reserve`, the recurrent layers are copied;
// the original appending past the shared entries leaves the copy's results unchanged, and they
// equal the original's bit for bit (the attention adds the same keys in the same order). A copy
// of a copy shares both pieces; past kMaxKvSegments the copy is flat. CompactClone and
// ReserveCaches of a sharing state keep its results.
TEST(ModelTest, ClonesSharingTheirPrefixComputeLikeTheOriginal) {
  auto repo = ModelRepository::BuildDefault();
  const Model& m = *(*repo)->Find("hybrid");
  at::manual_seed(5);
  ModelState state = HybridStateAfter(m, 100);
  const at::Tensor next = at::randint(1, 100, {1, 5}, at::kLong);
  ModelState plain = state.Clone();
  const at::Tensor want = *m.Forward(next, &plain, OutputKind::kLastLogits);

  absl::StatusOr<ModelState> shared = m.CloneSharingPrefix(state, 5);
  ASSERT_TRUE(shared.ok()) << shared.status();
  const kernels::MixerState& kv = shared->layers[3];
  ASSERT_EQ(kv.shared.size(), 1u);
  EXPECT_EQ(kv.shared[0].k.data_ptr(), state.layers[3].tensors[0].data_ptr()) << "not copied";
  EXPECT_EQ(kv.shared[0].length, 101);
  EXPECT_EQ(kv.tensors[0].size(2), 5) << "own room for the reserve only";
  EXPECT_EQ(kv.position, 101);
  EXPECT_NE(shared->layers[0].tensors[0].data_ptr(), state.layers[0].tensors[0].data_ptr());
  EXPECT_GE(shared->Bytes(), m.StateBytesPerSequence(101)) << "shared entries are counted";
  // The original goes on, writing past position 101 of the buffer the copy reads.
  ASSERT_TRUE(m.Forward(at::full({1, 3}, 9, at::kLong), &state, OutputKind::kLastLogits).ok());

  ModelState flat = m.CompactClone(*shared, 0);
  EXPECT_TRUE(flat.layers[3].shared.empty());
  absl::StatusOr<ModelState> chained = m.CloneSharingPrefix(*shared, 0);
  ASSERT_TRUE(chained.ok());
  EXPECT_EQ(chained->layers[3].shared.size(), 1u) << "nothing of its own yet: one segment";
  ModelState reserved = m.CloneSharingCaches(*shared);
  ASSERT_TRUE(m.ReserveCaches(reserved, 40).ok());
  EXPECT_EQ(reserved.layers[3].tensors[0].size(2), 40) << "room past the own entries";
  for (ModelState* s : {&*shared, &flat, &*chained, &reserved}) {
    EXPECT_TRUE(at::equal(*m.Forward(next, s, OutputKind::kLastLogits), want));
  }
  // Steps on a sharing state (the decode kernel reads the segment) equal the plain state's.
  absl::StatusOr<ModelState> stepping = m.CloneSharingPrefix(*shared, 0);
  ASSERT_TRUE(stepping.ok());
  EXPECT_EQ(stepping->layers[3].shared.size(), 2u);
  for (int i = 0; i < 3; ++i) {
    const at::Tensor token = at::full({1, 1}, 11 + i, at::kLong);
    EXPECT_TRUE(at::equal(*m.Forward(token, &*stepping, OutputKind::kLastLogits),
                          *m.Forward(token, &plain, OutputKind::kLastLogits)));
  }
  // Copies of copies: each adds a segment until kMaxKvSegments, then the copy is flat.
  ModelState chain = std::move(*stepping);
  bool flattened = false;
  for (int i = 0; i < 12 && !flattened; ++i) {
    ASSERT_TRUE(
        m.Forward(at::full({1, 2}, 20 + i, at::kLong), &chain, OutputKind::kLastLogits).ok());
    ASSERT_TRUE(
        m.Forward(at::full({1, 2}, 20 + i, at::kLong), &plain, OutputKind::kLastLogits).ok());
    absl::StatusOr<ModelState> next_copy = m.CloneSharingPrefix(chain, 2);
    ASSERT_TRUE(next_copy.ok());
    EXPECT_LE(next_copy->layers[3].shared.size(), kernels::kMaxKvSegments);
    flattened = next_copy->layers[3].shared.empty();
    chain = *std::move(next_copy);
  }
  EXPECT_TRUE(flattened) << "a chain of copies is flattened past kMaxKvSegments";
  EXPECT_TRUE(at::equal(*m.Forward(next, &chain, OutputKind::kLastLogits),
                        *m.Forward(next, &plain, OutputKind::kLastLogits)));
}

// A mixer that does not read shared segments (sparse attention) gets its state flattened on
// first use and computes as on the original.
TEST(ModelTest, MixersThatDoNotReadSharedSegmentsGetAFlatCache) {
  auto repo = ModelRepository::BuildDefault();
  const Model& m = *(*repo)->Find("sparse");
  ModelState state = *m.NewState(1);
  ASSERT_TRUE(
      m.Forward(at::randint(1, 100, {1, 300}, at::kLong), &state, OutputKind::kLastLogits).ok());
  ModelState plain = state.Clone();
  absl::StatusOr<ModelState> shared = m.CloneSharingPrefix(state, 4);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->layers[0].shared.size(), 1u);
  const at::Tensor next = at::randint(1, 100, {1, 4}, at::kLong);
  EXPECT_TRUE(at::equal(*m.Forward(next, &*shared, OutputKind::kLastLogits),
                        *m.Forward(next, &plain, OutputKind::kLastLogits)));
  EXPECT_TRUE(shared->layers[0].shared.empty()) << "flattened";
}

}  // namespace
}  // namespace attnserve::model
