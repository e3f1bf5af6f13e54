// kernels/common/huge_page_buffer.h: large CPU buffers in their own huge-page-aligned mapping,
// small ones plain; either is a contiguous tensor of the sizes asked that can be written and
// read back in full, and a KV cache that grows into one keeps its valid entries.
#include "kernels/common/huge_page_buffer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace attnserve::kernels
