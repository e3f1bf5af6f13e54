// The queue of a piece's candidate merges (bpe_model.cc): pops the candidate of lowest key, a
// key being (rank << 32 | position), so the lowest rank first and then the leftmost, as Hugging
// Face's heap does.
//
// A radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990): 65 buckets by the highest bit in which
// a key differs from the last one popped. It needs keys pushed to be at least the last popped,
// which BPE gives: a merge is learnt after the merges that made its two tokens, so a candidate
// made by applying a merge ranks after it. Pushing and popping then cost O(1) amortized plus
// the few moves of each entry down the buckets, on vectors read in order, against a binary
// heap's O(log n) scattered reads: a 1 MiB piece (random letters, no space: one BPE piece) has
// about a million candidates. A key below the last popped (a tokenizer.json whose merges break
// that order) goes to a small binary heap that pops first, so the order stays exact for any file.
//
// Not thread-safe; bpe_model.cc keeps one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attnserve::server::text {

class MergeQueue {
 public:
  struct Entry {
    uint64_t key;
    int32_t id;  // the merged token's id
  };

  static uint64_t Key(int32_t rank, int32_t position) {
    return static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32 |
           static_cast<uint32_t>(position);
  }
  static int32_t Position(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

  // Empties the queue (keeps the buckets' memory).
  void Clear();
  bool Empty() const { return size_ == 0; }
  void Push(uint64_t key, int32_t id);
  // The entry of lowest key (ties: any one of them). Not Empty().
  Entry Pop();

 private:
  static int BucketOf(uint64_t key, uint64_t last) {
    return key == last ? 0 : 64 - __builtin_clzll(key ^ last);
  }

  std::vector<Entry> buckets_[65];
  uint64_t nonempty_ = 0;    // bit b: bucket b holds entries (b < 64; bucket 64 is checked apart)
  uint64_t last_ = 0;        // the last key popped from the buckets
  std::vector<Entry> late_;  // keys below last_: a binary min-heap, popped first
  size_t size_ = 0;
};

}  // namespace attnserve::server::text
