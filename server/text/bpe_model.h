// The BPE model of tokenizer.json: a vocabulary of byte strings with ids and a ranked list of
// merges. A piece is split into characters (bytes for a byte-level vocabulary, else code
// points), then the adjacent pair of lowest rank is merged, leftmost first, until no pair has
// a merge: the same greedy order as Hugging Face's tokenizers (Rust and JavaScript), in
// O(n log n) for a piece of n characters (a queue of candidate merges, merge_queue.h, each
// checked when popped).
// Immutable after Build: Encode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::server::text {

struct BpeOptions {
  // The vocabulary is in GPT-2's byte-level alphabet (byte_level.h): keys are read back to
  // bytes and a piece splits into bytes.
  bool byte_level = false;
  // A character missing from the vocabulary becomes its bytes' <0xXX> tokens (when all are
  // there), else the unknown token.
  bool byte_fallback = false;
  // A piece that is itself in the vocabulary is that token, merges or not (Llama-3).
  bool ignore_merges = false;
  // Consecutive unknown tokens become one.
  bool fuse_unk = false;
  std::optional<std::string> unk_token;  // none: unknown characters are dropped
};

class BpeModel {
 public:
  // `vocab`: (token, id) pairs as tokenizer.json has them; `merges`: (left, right) pairs in
  // rank order. INVALID_ARGUMENT for a merge whose tokens (or their concatenation) are not in
  // the vocabulary, a duplicate id, or an unknown token that is not in it.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Build(
      const std::vector<std::pair<std::string, int32_t>>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options);

  // Appends the ids of `piece` (bytes) to `ids`.
  void Encode(absl::string_view piece, std::vector<int32_t>* ids) const;

  // The id of a token given as bytes (byte-level: the bytes it stands for), if any.
  std::optional<int32_t> Find(absl::string_view bytes) const;

  // The bytes each id stands for, indexed by id (ids the vocabulary skips are empty); a vocab
  // string outside the byte-level alphabet stands for its own UTF-8.
  const std::vector<std::string>& id_bytes() const { return id_bytes_; }
  size_t merge_count() const { return merges_.size(); }
  // Bytes of memory the model's tables hold (an estimate: strings, hash tables).
  int64_t MemoryBytes() const;

 private:
  BpeModel() = default;
  // The merge of the pair (left, right): its rank and the merged token's id.
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }
  void EmitUnknown(absl::string_view bytes, std::vector<int32_t>* ids, bool* last_unk) const;
  void MergePiece(absl::string_view piece, std::vector<int32_t>* ids) const;

  BpeOptions options_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::vector<std::string> id_bytes_;
  int32_t byte_ids_[256];      // byte-level: the id of each single byte (-1: none)
  int32_t fallback_ids_[256];  // byte_fallback: the id of <0xXX> (-1: none)
  int32_t unk_id_ = -1;
  // Tells the per-thread caches of pieces apart (never reused, unlike an address).
  uint64_t serial_ = 0;
};

// Pieces up to kCachedPieceBytes long are cached per thread and model, at most
// kCachedPieces of them (the cache is emptied when full): words repeat, merges do not need
// to run again. Memory: about kCachedPieces x 64 bytes per thread that encodes.
inline constexpr size_t kCachedPieceBytes = 64;
inline constexpr size_t kCachedPieces = 32768;

}  // namespace attnserve::server::text
