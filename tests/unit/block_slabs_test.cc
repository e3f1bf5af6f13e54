// The prefix cache's entry memory (server/prefix_cache/block_slabs.h): blocks carved from slabs
// of huge pages, reused once given back, slabs unmapped only when none of their blocks is out.
#include "server/prefix_cache/block_slabs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace attnserve::server {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * kKiB;

// Every block is its own memory: filled with its index, then each still holds its own.
void ExpectDistinctAndWritable(const std::vector<void*>& blocks, size_t size) {
  for (size_t i = 0; i < blocks.size(); ++i) std::memset(blocks[i], static_cast<int>(i), size);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto* b = static_cast<const unsigned char*>(blocks[i]);
    EXPECT_EQ(b[0], static_cast<unsigned char>(i));
    EXPECT_EQ(b[size - 1], static_cast<unsigned char>(i));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[i]) % (4 * kKiB), 0u);
  }
  std::vector<uintptr_t> starts;
  for (void* b : blocks) starts.push_back(reinterpret_cast<uintptr_t>(b));
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) EXPECT_GE(starts[i] - starts[i - 1], size);
}

TEST(BlockSlabsTest, BlocksAreCarvedFromHugePageSlabsAndReusedOnceGivenBack) {
  BlockSlabs slabs;
  const size_t size = 160 * kKiB;  // a default mamba state's block: 12 to a 2 MiB slab
  std::vector<void*> blocks;
  for (int i = 0; i < 30; ++i) blocks.push_back(slabs.Take(size));
  ExpectDistinctAndWritable(blocks, size);
  EXPECT_EQ(slabs.taken_bytes(), static_cast<int64_t>(30 * size));
  EXPECT_EQ(slabs.mapped_bytes(), static_cast<int64_t>(3 * 2 * kMiB));  // ceil(30 / 12) slabs
  // A block given back is the next one of its size, and only of its size.
  slabs.Give(blocks[7], size);
  void* other = slabs.Take(8 * kKiB);
  EXPECT_NE(other, blocks[7]);
  EXPECT_EQ(slabs.Take(size), blocks[7]);
  EXPECT_EQ(slabs.taken_bytes(), static_cast<int64_t>(30 * size + 8 * kKiB));
  slabs.Give(other, 8 * kKiB);
}

TEST(BlockSlabsTest, LargeBlocksGetSlabsOfEightWithAtMostAnEighthLeftOver) {
  BlockSlabs slabs;
  const size_t size = 2400 * kKiB;  // mamba-130m's state
  std::vector<void*> blocks;
  for (int i = 0; i < 9; ++i) blocks.push_back(slabs.Take(size));
  ExpectDistinctAndWritable(blocks, size);
  const size_t slab = (8 * size + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
  EXPECT_EQ(slabs.mapped_bytes(), static_cast<int64_t>(2 * slab));
  EXPECT_LE(slab - 8 * size, slab / 8);
  for (void* b : blocks) slabs.Give(b, size);
}

TEST(BlockSlabsTest, ReleaseFreeUnmapsOnlySlabsWithNoBlockOut) {
  BlockSlabs slabs;
  const size_t size = 256 * kKiB;  // 8 to a 2 MiB slab
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(slabs.Take(size));
  EXPECT_EQ(slabs.mapped_bytes(), static_cast<int64_t>(2 * 2 * kMiB));
  // All of the first slab's blocks back, one of the second's.
  for (int i = 0; i < 9; ++i) slabs.Give(blocks[i], size);
  slabs.ReleaseFree();
  EXPECT_EQ(slabs.mapped_bytes(), static_cast<int64_t>(2 * kMiB));
  // The blocks still out are intact and writable, and the second slab's free block is reused.
  const std::vector<void*> out(blocks.begin() + 9, blocks.end());
  ExpectDistinctAndWritable(out, size);
  EXPECT_EQ(slabs.Take(size), blocks[8]);
  // Nothing left free there: the next block maps a new slab, not one that was unmapped.
  std::vector<void*> all = out;
  all.push_back(blocks[8]);
  all.push_back(slabs.Take(size));
  ExpectDistinctAndWritable(all, size);
  EXPECT_EQ(slabs.mapped_bytes(), static_cast<int64_t>(2 * 2 * kMiB));
  for (void* b : all) slabs.Give(b, size);
  slabs.ReleaseFree();
  EXPECT_EQ(slabs.mapped_bytes(), 0);
  EXPECT_EQ(slabs.taken_bytes(), 0);
}

}  // namespace
}  // namespace attnserve::server
