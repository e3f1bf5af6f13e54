#include "server/text/merge_queue.h"

#include <algorithm>

namespace attnserve::server::text {
namespace {

bool Later(const MergeQueue::Entry& a, const MergeQueue::Entry& b) { return a.key > b.key; }

}  // namespace

void MergeQueue::Clear() {
  for (uint64_t bits = nonempty_; bits != 0; bits &= bits - 1) {
    buckets_[__builtin_ctzll(bits)].clear();
  }
  buckets_[64].clear();
  nonempty_ = 0;
  last_ = 0;
  late_.clear();
  size_ = 0;
}

void MergeQueue::Push(uint64_t key, int32_t id) {
  ++size_;
  if (key < last_) {
    late_.push_back(Entry{key, id});
    std::push_heap(late_.begin(), late_.end(), Later);
    return;
  }
  const int b = BucketOf(key, last_);
  buckets_[b].push_back(Entry{key, id});
  if (b < 64) nonempty_ |= uint64_t{1} << b;
}

MergeQueue::Entry MergeQueue::Pop() {
  --size_;
  if (!late_.empty()) {  // below last_, so below everything in the buckets
    std::pop_heap(late_.begin(), late_.end(), Later);
    const Entry e = late_.back();
    late_.pop_back();
    return e;
  }
  if ((nonempty_ & 1) == 0) {
    // The lowest non-empty bucket holds the minimum: it becomes last_, and the bucket's
    // entries move to lower buckets (all below it: they agree with the new last_ above bit b).
    const int b = (nonempty_ & ~uint64_t{1}) != 0 ? __builtin_ctzll(nonempty_) : 64;
    std::vector<Entry>& from = buckets_[b];
    uint64_t lowest = from.front().key;
    for (const Entry& e : from) lowest = std::min(lowest, e.key);
    last_ = lowest;
    for (const Entry& e : from) {
      const int to = BucketOf(e.key, last_);
      buckets_[to].push_back(e);
      nonempty_ |= uint64_t{1} << to;
    }
    from.clear();
    if (b < 64) nonempty_ &= ~(uint64_t{1} << b);
  }
  std::vector<Entry>& zero = buckets_[0];
  const Entry e = zero.back();
  zero.pop_back();
  if (zero.empty()) nonempty_ &= ~uint64_t{1};
  return e;
}

}  // namespace attnserve::server::text
