// The prefix state cache's lookups, collisions and eviction (server/prefix_cache/prefix_cache.h),
// on a default model's real states.
#include "server/prefix_cache/prefix_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "server/model/model_repository.h"

namespace attnserve::server {
namespace {

const model::Model& Default(const char* name) {
  static const model::ModelRepository* repository =
      model::ModelRepository::BuildDefault()->release();
  return *repository->Find(name);
}
const model::Model& Mamba() { return Default("mamba"); }

// The state of `model` after `tokens`, computed.
model::ModelState StateAfter(const std::vector<int64_t>& tokens,
                             const model::Model& model = Mamba()) {
  model::ModelState state = *model.NewState(1);
  at::Tensor t = at::tensor(tokens, at::kLong).unsqueeze(0);
  EXPECT_TRUE(model.Forward(t, &state, model::OutputKind::kLastLogits).ok());
  return state;
}

// Every prefix hashes alike: only the token comparison tells entries apart.
uint64_t Colliding(uint64_t, int64_t) { return 42; }

TEST(PrefixCacheUnitTest, TheLongestExactPrefixHitsAndCollisionsNeverServeAWrongState) {
  for (auto step : {static_cast<uint64_t (*)(uint64_t, int64_t)>(nullptr), &Colliding}) {
    PrefixCache cache(PrefixCacheOptions{int64_t{1} << 30, 256, step});
    const std::vector<int64_t> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 9, 9};
    cache.Insert("", Mamba(), a.data(), 3, StateAfter({1, 2, 3}));
    cache.Insert("", Mamba(), a.data(), 5, StateAfter({1, 2, 3, 4, 5}));
    cache.Insert("", Mamba(), b.data(), 4, StateAfter(b));
    EXPECT_EQ(cache.entries(), 3);
    auto hit = cache.Lookup("", Mamba(), a.data(), 6, 5);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tokens, 5);
    EXPECT_EQ(hit->state.position, 5);
    // The longest allowed, not longer.
    EXPECT_EQ(cache.Lookup("", Mamba(), a.data(), 6, 4)->tokens, 3);
    // {1, 2, 9, 7}: shares 2 tokens with everything, but nothing of length 2 is cached.
    const std::vector<int64_t> c = {1, 2, 9, 7};
    EXPECT_FALSE(cache.Lookup("", Mamba(), c.data(), 4, 3).has_value());
    // Another scope sees nothing.
    EXPECT_FALSE(cache.Lookup("alice", Mamba(), a.data(), 6, 5).has_value());
    // The hit is a copy: computing on it leaves the entry as it was.
    at::Tensor next = at::tensor(std::vector<int64_t>{6}, at::kLong).unsqueeze(0);
    ASSERT_TRUE(Mamba().Forward(next, &hit->state, model::OutputKind::kLastLogits).ok());
    EXPECT_EQ(cache.Lookup("", Mamba(), a.data(), 6, 5)->state.position, 5);
    EXPECT_EQ(cache.hits(), 3);
    EXPECT_EQ(cache.hit_tokens(), 5 + 3 + 5);
  }
}

TEST(PrefixCacheUnitTest, EvictionKeepsWithinTheBoundAndPrefersWhatSavesMostPerByte) {
  // A recurrent state: the same bytes at any length.
  const int64_t one = PrefixCache(PrefixCacheOptions{}).EntryBytes(StateAfter({1}));
  PrefixCache cache(PrefixCacheOptions{3 * one, 256, nullptr});
  std::vector<int64_t> long_prefix(200, 7);
  cache.Insert("", Mamba(), long_prefix.data(), 200, StateAfter(long_prefix));
  for (int64_t t = 1; t <= 6; ++t) {
    const std::vector<int64_t> p = {t, t};
    cache.Insert("", Mamba(), p.data(), 2, StateAfter(p));
    EXPECT_LE(cache.bytes(), 3 * one);
  }
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.evictions(), 4);
  // The 200-token entry saves 100 times more per byte than the 2-token ones: it stayed.
  EXPECT_EQ(cache.Lookup("", Mamba(), long_prefix.data(), 200, 200)->tokens, 200);
  // Off: nothing is kept.
  PrefixCache off(PrefixCacheOptions{0, 256, nullptr});
  off.Insert("", Mamba(), long_prefix.data(), 200, StateAfter(long_prefix));
  EXPECT_EQ(off.entries(), 0);
  EXPECT_FALSE(off.Lookup("", Mamba(), long_prefix.data(), 200, 200).has_value());
}

// The entries of one prompt share its KV buffers (the session's, CloneSharingCaches): the cache
// counts each buffer once, while any entry holds it, and the bound holds what they keep alive.
TEST(PrefixCacheUnitTest, EntriesSharingAKvBufferCountItOnce) {
  const model::Model& hybrid = Default("hybrid");
  std::vector<int64_t> prompt(64);
  for (int64_t i = 0; i < 64; ++i) prompt[i] = 1 + i % 40;
  model::ModelState state = StateAfter(prompt, hybrid);
  const int64_t whole = PrefixCache(PrefixCacheOptions{}).EntryBytes(state);
  int64_t kv = 0;  // the buffers an entry shares with the session: the attention layers'
  for (const kernels::MixerState& layer : state.layers) {
    if (layer.tensors.size() == 2 && layer.tensors[0].dim() == 4) {
      for (const at::Tensor& t : layer.tensors) kv += t.storage().nbytes();
    }
  }
  ASSERT_GT(kv, 0);
  // Four entries after prefixes of the one live state, as the scheduler inserts a prompt's.
  auto insert_all = [&](PrefixCache& cache) {
    for (int64_t n : {16, 32, 48, 64}) cache.Insert("", hybrid, prompt.data(), n, state);
  };
  PrefixCache roomy(PrefixCacheOptions{int64_t{1} << 30, 256, nullptr});
  insert_all(roomy);
  EXPECT_EQ(roomy.entries(), 4);
  EXPECT_EQ(roomy.bytes(), whole + 3 * (whole - kv));
  // Bound to what three of them keep alive: one is evicted, and the rest stay within it.
  PrefixCache tight(PrefixCacheOptions{whole + 2 * (whole - kv), 256, nullptr});
  insert_all(tight);
  EXPECT_EQ(tight.entries(), 3);
  EXPECT_EQ(tight.evictions(), 1);
  EXPECT_EQ(tight.bytes(), whole + 2 * (whole - kv));
  // Evicting the last holder of the buffers releases them: a state of another model then fits
  // a bound of just its own bytes.
  PrefixCache one(PrefixCacheOptions{whole, 256, nullptr});
  insert_all(one);
  EXPECT_EQ(one.entries(), 1);
  const std::vector<int64_t> other = {5, 6, 7};
  const model::ModelState mamba_state = StateAfter(other);
  const int64_t mamba_whole = PrefixCache(PrefixCacheOptions{}).EntryBytes(mamba_state);
  ASSERT_LT(mamba_whole, whole);
  one.Insert("", Mamba(), other.data(), 3, mamba_state);
  EXPECT_EQ(one.entries(), 1);
  EXPECT_EQ(one.bytes(), mamba_whole);
}

// Prompts of a shared 300-token prefix and suffixes of their own, an entry every 256 tokens:
// the second prompt's hit at 256 says where it leaves the first (300), and once that state is
// cached the third hits it exactly.
TEST(PrefixCacheUnitTest, AHitReportsWhereThePromptLeavesAnEarlierOne) {
  PrefixCache cache(PrefixCacheOptions{int64_t{1} << 30, 256, nullptr});
  std::vector<int64_t> shared(300);
  for (int64_t i = 0; i < 300; ++i) shared[i] = 1 + i % 50;
  auto prompt = [&](int64_t own) {
    std::vector<int64_t> p = shared;
    for (int64_t i = 0; i < 100; ++i) p.push_back(1000 + own * 100 + i);
    return p;
  };
  const std::vector<int64_t> first = prompt(1), second = prompt(2), third = prompt(3);
  const std::vector<int64_t> at256(first.begin(), first.begin() + 256);
  cache.Insert("", Mamba(), first.data(), 256, StateAfter(at256), 400);
  auto hit = cache.Lookup("", Mamba(), second.data(), 400, 399);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 256);
  EXPECT_EQ(hit->branch, 300);
  // Not past the longest allowed.
  EXPECT_EQ(cache.Lookup("", Mamba(), second.data(), 400, 290)->branch, 290);
  // The scheduler caches the branch point; the third prompt starts there, with no branch left
  // (its suffix agrees with nobody's).
  cache.Insert("", Mamba(), second.data(), 300, StateAfter(shared), 400);
  hit = cache.Lookup("", Mamba(), third.data(), 400, 399);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 300);
  EXPECT_EQ(hit->branch, 0);
  // An agreement shorter than kMinBranch is not a branch.
  std::vector<int64_t> near = first;
  near[256 + PrefixCache::kMinBranch - 1] = 7;
  EXPECT_EQ(cache.Lookup("", Mamba(), near.data(), 400, 399)->branch, 0);
}

}  // namespace
}  // namespace attnserve::server
