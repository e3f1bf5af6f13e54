// kernels/common/huge_page_buffer.h: large CPU buffers in their own huge-page-aligned mapping,
// small ones plain; either is a contiguous tensor of the sizes asked that can be written and
// read back in full, and a KV cache that grows into one keeps its valid entries.
#include "kernels/common/huge_page_buffer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/standard/kv_cache.h"

namespace attnserve::kernels {
namespace {

TEST(HugePageBufferTest, LargeBuffersAreAlignedToHugePagesAndHoldWhatIsWritten) {
  // 1 x 4 x 2500 x 128 floats: 5 MB, above the 2 MiB threshold, not a multiple of 2 MiB.
  at::Tensor t = EmptyHugePageBuffer({1, 4, 2500, 128}, at::TensorOptions(at::kFloat));
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 4, 2500, 128}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % (uintptr_t{2} << 20), 0u);
  at::Tensor values = at::arange(t.numel(), at::kFloat).view(t.sizes());
  t.copy_(values);  // every byte, to its last partial huge page
  EXPECT_TRUE(at::equal(t, values));
  at::Tensor shared = t.narrow(2, 0, 10);  // a view keeps the mapping alive
  t = at::Tensor();
  EXPECT_TRUE(at::equal(shared, values.narrow(2, 0, 10)));
}

TEST(HugePageBufferTest, SmallBuffersAndOtherTypesArePlainTensors) {
  at::Tensor small = EmptyHugePageBuffer({1, 4, 16, 64}, at::TensorOptions(at::kFloat));
  EXPECT_EQ(small.sizes(), (std::vector<int64_t>{1, 4, 16, 64}));
  EXPECT_TRUE(small.is_contiguous());
  at::Tensor doubles = EmptyHugePageBuffer({3, 1 << 20}, at::TensorOptions(at::kDouble));
  EXPECT_EQ(doubles.scalar_type(), at::kDouble);
  doubles.fill_(1.5);
  EXPECT_EQ(doubles.sum().item<double>(), 1.5 * 3 * (1 << 20));
}

TEST(HugePageBufferTest, AKvCacheGrowingPastTheThresholdKeepsItsEntries) {
  MixerState state = EmptyKvCache(1, 4, 64, at::kCPU);
  at::Tensor k_all = at::randn({1, 4, 5000, 64}), v_all = at::randn({1, 4, 5000, 64});
  for (int64_t at_ = 0; at_ < 5000; at_ += 1000) {
    auto [k, v] = AppendToKvCache(state, k_all.narrow(2, at_, 1000), v_all.narrow(2, at_, 1000));
    state.tensors = {k, v};
    state.position = at_ + 1000;
  }
  ASSERT_GE(state.tensors[0].size(2), 5000);
  EXPECT_TRUE(at::equal(state.tensors[0].narrow(2, 0, 5000), k_all));
  EXPECT_TRUE(at::equal(state.tensors[1].narrow(2, 0, 5000), v_all));
}

// The pool: a freed buffer's mapping serves the next buffer that fits it (the same address),
// not one far smaller; the pool keeps no more than its bound, and the release empties it.
TEST(HugePageBufferTest, FreedBuffersAreReusedWithinThePoolsBound) {
  const at::TensorOptions f32(at::kFloat);
  SetHugePageBufferPoolBytes(int64_t{16} << 20);
  ReleaseHugePageBufferPool();
  at::Tensor a = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);  // 5 MB
  void* address = a.data_ptr();
  a = at::Tensor();
  EXPECT_EQ(HugePageBufferPool().buffers, 1);
  const int64_t reused = HugePageBufferPool().reused;
  // Smaller by less than a quarter: takes the kept mapping.
  at::Tensor b = EmptyHugePageBuffer({1, 4, 2200, 128}, f32);
  EXPECT_EQ(b.data_ptr(), address);
  EXPECT_EQ(HugePageBufferPool().reused, reused + 1);
  EXPECT_EQ(HugePageBufferPool().buffers, 0);
  at::Tensor values = at::arange(b.numel(), at::kFloat).view(b.sizes());
  b.copy_(values);
  EXPECT_TRUE(at::equal(b, values));
  b = at::Tensor();
  // Far smaller (2.25 MB against 5.1): a fresh mapping; the 5.1 MB one stays kept.
  at::Tensor c = EmptyHugePageBuffer({1, 4, 1100, 128}, f32);
  EXPECT_NE(c.data_ptr(), address);
  EXPECT_EQ(HugePageBufferPool().buffers, 1);
  // Past the bound (16 MiB): the oldest kept mappings are unmapped.
  std::vector<at::Tensor> many;
  for (int i = 0; i < 5; ++i) many.push_back(EmptyHugePageBuffer({1, 4, 4000, 128}, f32));
  many.clear();
  c = at::Tensor();
  EXPECT_LE(HugePageBufferPool().bytes, int64_t{16} << 20);
  EXPECT_GE(HugePageBufferPool().buffers, 1);
  ReleaseHugePageBufferPool();
  EXPECT_EQ(HugePageBufferPool().bytes, 0);
  EXPECT_EQ(HugePageBufferPool().buffers, 0);
  // A bound of 0 keeps nothing.
  SetHugePageBufferPoolBytes(0);
  at::Tensor d = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);
  d = at::Tensor();
  EXPECT_EQ(HugePageBufferPool().buffers, 0);
  SetHugePageBufferPoolBytes(kDefaultHugePageBufferPoolBytes);
}

// A size that found no kept buffer is mapped and faulted in ahead by PrefaultHugePageBuffer
// (the prefix cache's idle-time thread), once per miss, within the bound; the idle trim's
// release forgets the misses.
TEST(HugePageBufferTest, MissesAndBuffersTakenAheadArePagedInOnceEach) {
  const at::TensorOptions f32(at::kFloat);
  const std::atomic<bool> go{true};
  SetHugePageBufferPoolBytes(int64_t{16} << 20);
  ReleaseHugePageBufferPool();
  EXPECT_FALSE(PrefaultHugePageBuffer(go));                    // nothing missed
  at::Tensor a = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);  // a miss: mapped fresh
  const int64_t prefaulted = HugePageBufferPool().prefaulted;
  ASSERT_TRUE(PrefaultHugePageBuffer(go));
  EXPECT_FALSE(PrefaultHugePageBuffer(go));  // one per miss
  EXPECT_EQ(HugePageBufferPool().prefaulted, prefaulted + 1);
  EXPECT_EQ(HugePageBufferPool().buffers, 1);
  const int64_t reused = HugePageBufferPool().reused;
  at::Tensor b = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);  // served by the one paged in
  EXPECT_EQ(HugePageBufferPool().reused, reused + 1);
  EXPECT_EQ(HugePageBufferPool().buffers, 0);
  b.fill_(2.0f);
  EXPECT_EQ(b.sum().item<float>(), 2.0f * static_cast<float>(b.numel()));
  // Taking a buffer paged in ahead asks for its replacement (a growing cache's next prompt).
  ASSERT_TRUE(PrefaultHugePageBuffer(go));
  EXPECT_FALSE(PrefaultHugePageBuffer(go));
  EXPECT_EQ(HugePageBufferPool().buffers, 1);
  // A buffer a tensor gave back is reuse: taken before the one paged in ahead, and taking it
  // asks for nothing.
  b = at::Tensor();
  EXPECT_EQ(HugePageBufferPool().buffers, 2);
  at::Tensor e = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);
  EXPECT_FALSE(PrefaultHugePageBuffer(go));
  EXPECT_EQ(HugePageBufferPool().buffers, 1);  // the one paged in ahead, still there
  // Released: the misses are forgotten.
  at::Tensor c = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);
  ReleaseHugePageBufferPool();
  EXPECT_FALSE(PrefaultHugePageBuffer(go));
  // Past the bound: not paged in.
  SetHugePageBufferPoolBytes(int64_t{1} << 20);
  at::Tensor d = EmptyHugePageBuffer({1, 4, 2500, 128}, f32);
  EXPECT_FALSE(PrefaultHugePageBuffer(go));
  EXPECT_EQ(HugePageBufferPool().buffers, 0);
  a = b = c = d = e = at::Tensor();
  SetHugePageBufferPoolBytes(kDefaultHugePageBufferPoolBytes);
  ReleaseHugePageBufferPool();
}

}  // namespace
}  // namespace attnserve::kernels
