// The prefix cache's prefaulted entry memory (server/prefix_cache/prefaulted_blocks.h): blocks
// made ready by the idle-priority thread, their bound, and their reuse; and entries copied into
// them equal to plain clones.
#include "server/prefix_cache/prefaulted_blocks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "server/model/model_repository.h"
#include "server/prefix_cache/prefix_cache.h"

namespace attnserve::server {
namespace {

constexpr int64_t kBlock = 100000;  // 25 pages rounded up: 102400 bytes kept per block
constexpr int64_t kRounded = 102400;

// Waits (up to 60 s: the filler runs only on idle cores, and ctest runs tests side by side)
// until `done` holds.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 6000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(PrefaultedBlocksTest, BlocksOfTheSizeLastTakenAreMadeReadyWithinTheReserve) {
  PrefaultedBlocks blocks(4 * kRounded);
  at::Tensor first = blocks.Take(kBlock);  // nothing was ready: allocated here
  EXPECT_EQ(first.numel(), kBlock);
  EXPECT_EQ(first.scalar_type(), at::kByte);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first.data_ptr()) % 64, 0u);
  first.fill_(7);  // the whole block is ours
  EXPECT_EQ(blocks.stats().served_fresh, 1);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 4; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(blocks.stats().ready_bytes, 4 * kRounded);  // not past the reserve
  at::Tensor second = blocks.Take(kBlock);
  EXPECT_EQ(blocks.stats().served_ready, 1);
  second.fill_(1);
  EXPECT_EQ(first.sum().item<int64_t>(), 7 * kBlock);  // distinct memory
  // Refilled to the reserve; a freed block beyond it is freed, not kept.
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 4; }));
  first = at::Tensor();
  second = at::Tensor();
  EXPECT_EQ(blocks.stats().ready_bytes, 4 * kRounded);
}

TEST(PrefaultedBlocksTest, TheRoomBoundsWhatIsReadyAndFreedBlocksRefillIt) {
  PrefaultedBlocks blocks(8 * kRounded);
  std::vector<at::Tensor> held;
  for (int i = 0; i < 3; ++i) held.push_back(blocks.Take(kBlock));
  blocks.SetRoom(2 * kRounded);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(blocks.stats().ready_blocks, 2);
  blocks.SetRoom(0);  // frees the ready ones at once
  EXPECT_EQ(blocks.stats().ready_bytes, 0);
  held.clear();  // no room: freed, not kept
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(blocks.stats().ready_bytes, 0);
  // Room again: the filler makes blocks ready without another Take.
  blocks.SetRoom(8 * kRounded);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 8; }));
}

TEST(PrefaultedBlocksTest, NothingIsPagedInWhileBusyOrAfterARelease) {
  PrefaultedBlocks blocks(4 * kRounded);
  blocks.SetIdle(false);
  at::Tensor first = blocks.Take(kBlock);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(blocks.stats().ready_bytes, 0);  // the user is busy
  blocks.SetIdle(true);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 4; }));
  blocks.Release();  // the idle trim: freed, and not made ready again until the next Take
  EXPECT_EQ(blocks.stats().ready_bytes, 0);
  first = at::Tensor();  // a block freed after the release is not kept either
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(blocks.stats().ready_bytes, 0);
  at::Tensor again = blocks.Take(kBlock);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 4; }));
}

// A second size takes half the reserve from the first: the first size's ready blocks beyond its
// new share go, and the second's are made ready (a server serving a second model).
TEST(PrefaultedBlocksTest, ANewSizeGetsItsShareOfTheReserve) {
  PrefaultedBlocks blocks(8 * kRounded);
  at::Tensor a = blocks.Take(kBlock);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 8; }));
  at::Tensor b = blocks.Take(2 * kRounded);  // the share is now 4 blocks of a, 2 of b
  EXPECT_LE(blocks.stats().ready_bytes, 4 * kRounded);
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_blocks == 6; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(blocks.stats().ready_bytes, 8 * kRounded);
  at::Tensor b2 = blocks.Take(2 * kRounded);
  EXPECT_EQ(blocks.stats().served_ready, 1);
}

TEST(PrefaultedBlocksTest, OnlyTheSizesLastTakenAreKeptAndNoReserveMeansNoneReady) {
  const int64_t reserve = int64_t{2} << 20;
  PrefaultedBlocks blocks(reserve);
  for (int64_t size = 1; size <= PrefaultedBlocks::kSizes + 1; ++size) {
    blocks.Take(size * kRounded);
    ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_bytes > 0; }));
  }
  // Each of the last kSizes sizes (2-5 blocks of kRounded) gets an equal share of the reserve,
  // filled to less than one of its blocks short of it; the first size's blocks were dropped.
  const int64_t shortfall = (2 + 3 + 4 + 5) * kRounded;
  ASSERT_TRUE(Eventually([&] { return blocks.stats().ready_bytes > reserve - shortfall; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(blocks.stats().ready_bytes, reserve);
  // A block outlives the object that made it.
  at::Tensor kept;
  {
    PrefaultedBlocks none(0);
    kept = none.Take(kBlock);
    none.Take(kBlock);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(none.stats().ready_bytes, 0);
    EXPECT_EQ(none.stats().served_fresh, 2);
  }
  kept.fill_(3);
  kept = at::Tensor();
}

const model::Model& Model(const char* name) {
  static const model::ModelRepository* repository =
      model::ModelRepository::BuildDefault()->release();
  return *repository->Find(name);
}

// Every default streaming model, hybrid included (its KV caches stay shared, its recurrent
// tensors go into the block): a copy into one block equals a clone, bit for bit, and does not
// move when the source goes on computing.
TEST(PrefaultedBlocksTest, AStateCopiedIntoOneBlockEqualsAClone) {
  PrefaultedBlocks blocks(int64_t{16} << 20);
  for (const char* name : {"mamba", "rwkv", "hybrid", "linear", "sliding_window", "standard"}) {
    SCOPED_TRACE(name);
    const model::Model& m = Model(name);
    model::ModelState state = *m.NewState(1);
    at::Tensor prompt = at::randint(1, 200, {1, 37}, at::kLong);
    ASSERT_TRUE(m.Forward(prompt, &state, model::OutputKind::kLastLogits).ok());
    const model::ModelState clone = m.CloneSharingCaches(state);
    const model::ModelState packed =
        m.CloneSharingCaches(state, [&](int64_t bytes) { return blocks.Take(bytes); });
    ASSERT_TRUE(
        m.Forward(at::randint(1, 200, {1, 5}, at::kLong), &state, model::OutputKind::kLastLogits)
            .ok());
    ASSERT_EQ(clone.layers.size(), packed.layers.size());
    EXPECT_EQ(clone.Bytes(), packed.Bytes());
    for (size_t i = 0; i < clone.layers.size(); ++i) {
      for (size_t k = 0; k < clone.layers[i].tensors.size(); ++k) {
        const at::Tensor &a = clone.layers[i].tensors[k], &b = packed.layers[i].tensors[k];
        ASSERT_EQ(a.defined(), b.defined());
        if (!a.defined()) continue;
        // A growing cache is shared, not copied: the same memory, whose positions past the valid
        // ones are uninitialised (at::equal of such memory with itself fails on a NaN pattern).
        if (a.data_ptr() == b.data_ptr()) continue;
        EXPECT_EQ(a.sizes(), b.sizes());
        EXPECT_EQ(a.scalar_type(), b.scalar_type());
        EXPECT_TRUE(at::equal(a, b)) << i << "," << k;
      }
    }
    // Both continue alike: the next chunk's logits from each copy are equal.
    model::ModelState from_clone = m.CompactClone(clone), from_packed = m.CompactClone(packed);
    at::Tensor next = at::randint(1, 200, {1, 9}, at::kLong);
    auto a = m.Forward(next, &from_clone, model::OutputKind::kLastLogits);
    auto b = m.Forward(next, &from_packed, model::OutputKind::kLastLogits);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(at::equal(*a, *b));
  }
}

// Entries and the memory made ready for the next ones stay within the cache's bound, also
// while it evicts; its hits are those of a cache without prefaulting.
TEST(PrefaultedBlocksTest, TheCacheKeepsEntriesAndReadyMemoryWithinItsBound) {
  const model::Model& m = Model("mamba");
  auto state_after = [&](const std::vector<int64_t>& tokens) {
    model::ModelState state = *m.NewState(1);
    EXPECT_TRUE(m.Forward(at::tensor(tokens, at::kLong).unsqueeze(0), &state,
                          model::OutputKind::kLastLogits)
                    .ok());
    return state;
  };
  const int64_t one = PrefixCache(PrefixCacheOptions{}).EntryBytes(state_after({1}));
  PrefixCacheOptions options{10 * one, 256, nullptr};
  options.prefault_bytes = 4 * one;
  PrefixCache cache(options);
  PrefixCache plain(PrefixCacheOptions{10 * one, 256, nullptr});
  for (int64_t t = 1; t <= 30; ++t) {
    const std::vector<int64_t> p = {t, t + 1, t + 2};
    const model::ModelState s = state_after(p);
    cache.Insert("", m, p.data(), 3, s);
    plain.Insert("", m, p.data(), 3, s);
    EXPECT_LE(cache.bytes() + cache.prefaulted().ready_bytes, 10 * one);
    if (t == 5) {  // idle time, room left: the filler makes the next entries' memory ready
      ASSERT_TRUE(Eventually([&] { return cache.prefaulted().ready_bytes > 0; }));
    }
    EXPECT_LE(cache.bytes() + cache.prefaulted().ready_bytes, 10 * one);
  }
  EXPECT_EQ(cache.entries(), plain.entries());
  EXPECT_GT(cache.evictions(), 0);
  EXPECT_GT(cache.prefaulted().served_ready, 0);
  const std::vector<int64_t> last = {30, 31, 32, 99};
  auto a = cache.Lookup("", m, last.data(), 4, 4);
  auto b = plain.Lookup("", m, last.data(), 4, 4);
  ASSERT_TRUE(a.has_value() && b.has_value());
  at::Tensor next = at::tensor(std::vector<int64_t>{99}, at::kLong).unsqueeze(0);
  auto la = m.Forward(next, &a->state, model::OutputKind::kLastLogits);
  auto lb = m.Forward(next, &b->state, model::OutputKind::kLastLogits);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_TRUE(at::equal(*la, *lb));
}

}  // namespace
}  // namespace attnserve::server
