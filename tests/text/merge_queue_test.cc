// The merge queue (server/text/merge_queue.h) against a plain binary heap on random keys:
// monotone pushes (as BPE's merges give) and keys below the last popped (a file that breaks
// the order) interleaved with pops, including equal keys.
#include "server/text/merge_queue.h"

#include <gtest/gtest.h>

#include <queue>
#include <random>
#include <vector>

namespace attnserve::server::text {
namespace {

TEST(MergeQueueTest, PopsInKeyOrderAsABinaryHeapDoes) {
  std::mt19937_64 rng(54);
  MergeQueue queue;
  for (int round = 0; round < 200; ++round) {
    queue.Clear();
    std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> reference;
    const bool monotone = round % 2 == 0;
    const int n = 1 + static_cast<int>(rng() % (round < 100 ? 40 : 5000));
    uint64_t last = 0;
    int budget = 2 * n;  // new candidates, as a piece's merges make at most two each
    for (int i = 0; i < n; ++i) {
      const uint64_t key = MergeQueue::Key(static_cast<int32_t>(rng() % 50000),
                                           static_cast<int32_t>(rng() % 1000000));
      queue.Push(key, static_cast<int32_t>(key % 997));
      reference.push(key);
    }
    while (!reference.empty()) {
      ASSERT_FALSE(queue.Empty());
      const MergeQueue::Entry e = queue.Pop();
      ASSERT_EQ(e.key, reference.top()) << "round " << round;
      EXPECT_EQ(e.id, static_cast<int32_t>(e.key % 997));
      reference.pop();
      last = e.key;
      // New candidates, as a merge makes them: after the popped key (monotone), or anywhere.
      for (int k = static_cast<int>(rng() % 3); k > 0 && budget > 0; --k, --budget) {
        uint64_t key = monotone ? last + rng() % (uint64_t{1} << (rng() % 48))
                                : MergeQueue::Key(static_cast<int32_t>(rng() % 50000),
                                                  static_cast<int32_t>(rng() % 1000000));
        if (rng() % 7 == 0) key = last;  // an equal key
        queue.Push(key, static_cast<int32_t>(key % 997));
        reference.push(key);
      }
    }
    EXPECT_TRUE(queue.Empty());
  }
  EXPECT_EQ(MergeQueue::Position(MergeQueue::Key(7, 123456)), 123456);
}

}  // namespace
}  // namespace attnserve::server::text
