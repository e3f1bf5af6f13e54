#include "server/text/bpe_model.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/text/byte_level.h"
#include "server/text/merge_queue.h"
#include "server/text/utf8.h"

namespace attnserve::server::text {

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Build(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options) {
  static std::atomic<uint64_t> next_serial{1};
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->serial_ = next_serial.fetch_add(1);
  m->options_ = options;
  m->ids_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("BPE vocab: negative id ", id));
    max_id = std::max(max_id, id);
  }
  m->id_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  std::vector<bool> seen(m->id_bytes_.size(), false);
  for (const auto& [token, id] : vocab) {
    if (seen[id]) return absl::InvalidArgumentError(absl::StrCat("BPE vocab: id ", id, " twice"));
    seen[id] = true;
    std::optional<std::string> key = options.byte_level ? ByteLevelToBytes(token) : token;
    if (!key) {
      m->id_bytes_[id] = token;  // cannot come out of the byte-level model; decodes as itself
      continue;
    }
    m->id_bytes_[id] = *key;
    m->ids_.emplace(std::move(*key), id);
  }
  for (int b = 0; b < 256; ++b) {
    m->byte_ids_[b] = m->Find(std::string(1, static_cast<char>(b))).value_or(-1);
    // Byte-fallback tokens are plain ASCII, the same in the byte-level alphabet.
    m->fallback_ids_[b] =
        options.byte_fallback ? m->Find(absl::StrFormat("<0x%02X>", b)).value_or(-1) : -1;
  }
  if (options.unk_token) {
    for (const auto& [token, id] : vocab) {
      if (token == *options.unk_token) m->unk_id_ = id;
    }
    if (m->unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("BPE unk_token '", *options.unk_token, "' is not in the vocab"));
    }
  }
  m->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto key = [&](const std::string& s) {
      return options.byte_level ? ByteLevelToBytes(s) : std::optional<std::string>(s);
    };
    const std::optional<std::string> l = key(left), r = key(right);
    std::optional<int32_t> li, ri, mi;
    if (l && r) {
      li = m->Find(*l);
      ri = m->Find(*r);
      mi = m->Find(*l + *r);
    }
    if (!li || !ri || !mi) {
      return absl::InvalidArgumentError(absl::StrCat("BPE merge ", rank, " ('", left, "' '", right,
                                                     "') names a token not in the vocab"));
    }
    m->merges_.try_emplace(PairKey(*li, *ri), Merge{static_cast<int32_t>(rank), *mi});
  }
  return m;
}

std::optional<int32_t> BpeModel::Find(absl::string_view bytes) const {
  const auto it = ids_.find(bytes);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

int64_t BpeModel::MemoryBytes() const {
  int64_t bytes = 0;
  for (const std::string& s : id_bytes_)
    bytes += sizeof(std::string) + (s.size() > 15 ? s.size() + 1 : 0);
  // flat_hash_map: a control byte and a slot per capacity entry, plus the keys' heap strings.
  bytes += static_cast<int64_t>(ids_.capacity()) * (sizeof(std::pair<std::string, int32_t>) + 1);
  for (const auto& [k, v] : ids_) bytes += k.size() > 15 ? k.size() + 1 : 0;
  bytes += static_cast<int64_t>(merges_.capacity()) * (sizeof(std::pair<uint64_t, Merge>) + 1);
  return bytes;
}

void BpeModel::EmitUnknown(absl::string_view bytes, std::vector<int32_t>* ids,
                           bool* last_unk) const {
  if (options_.byte_fallback) {
    bool all = true;
    for (const char c : bytes) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (const char c : bytes) ids->push_back(fallback_ids_[static_cast<uint8_t>(c)]);
      *last_unk = false;
      return;
    }
  }
  if (unk_id_ < 0) return;  // no unknown token: the character is dropped
  if (options_.fuse_unk && *last_unk) return;
  ids->push_back(unk_id_);
  *last_unk = true;
}

void BpeModel::Encode(absl::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (const auto it = ids_.find(piece); it != ids_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (piece.size() > kCachedPieceBytes) {
    MergePiece(piece, ids);
    return;
  }
  struct Cache {
    uint64_t serial = 0;
    absl::flat_hash_map<std::string, std::vector<int32_t>> pieces;
  };
  thread_local Cache cache;
  if (cache.serial != serial_) {
    cache.pieces.clear();
    cache.serial = serial_;
  }
  if (const auto it = cache.pieces.find(piece); it != cache.pieces.end()) {
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = ids->size();
  MergePiece(piece, ids);
  if (cache.pieces.size() >= kCachedPieces) cache.pieces.clear();
  cache.pieces.emplace(std::string(piece), std::vector<int32_t>(ids->begin() + before, ids->end()));
}

void BpeModel::MergePiece(absl::string_view piece, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;      // -1: a character not in the vocabulary
    int32_t prev;    // index of the previous live symbol, -1 at the start
    int32_t next;    // index of the next live symbol, -1 at the end
    uint32_t begin;  // its bytes in `piece`
    uint32_t size;   // 0: merged into its left neighbour
  };
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  size_t pos = 0;
  while (pos < piece.size()) {
    const size_t begin = pos;
    int32_t id;
    if (options_.byte_level) {
      id = byte_ids_[static_cast<uint8_t>(piece[pos])];
      ++pos;
    } else {
      pos += Utf8SequenceLength(static_cast<uint8_t>(piece[pos]));
      if (pos > piece.size()) pos = piece.size();
      id = Find(piece.substr(begin, pos - begin)).value_or(-1);
    }
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back(
        Symbol{id, n - 1, -1, static_cast<uint32_t>(begin), static_cast<uint32_t>(pos - begin)});
    if (n > 0) symbols[n - 1].next = n;
  }

  // The merge of a pair, through a small per-thread cache in front of the table: a long piece
  // asks for the same few thousand pairs again and again (random letters: a million lookups
  // of a table of up to 280K merges, most of them misses in the CPU's caches otherwise).
  struct PairCache {
    struct Slot {
      uint64_t key = ~uint64_t{0};  // PairKey of ids >= 0 is never all ones
      Merge merge;                  // rank -1: no merge
    };
    uint64_t serial = 0;
    Slot slots[4096];
  };
  thread_local PairCache pairs;
  if (pairs.serial != serial_) {
    for (PairCache::Slot& slot : pairs.slots) slot.key = ~uint64_t{0};
    pairs.serial = serial_;
  }
  const auto merge_of = [&](int32_t left_id, int32_t right_id) -> Merge {
    const uint64_t key = PairKey(left_id, right_id);
    PairCache::Slot& slot = pairs.slots[(key * 0x9E3779B97F4A7C15ull) >> 52];
    if (slot.key != key) {
      const auto it = merges_.find(key);
      slot.key = key;
      slot.merge = it == merges_.end() ? Merge{-1, -1} : it->second;
    }
    return slot.merge;
  };
  // Candidate merges, lowest rank first, then leftmost (merge_queue.h).
  thread_local MergeQueue queue;
  queue.Clear();
  const auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const Merge m = merge_of(symbols[left].id, symbols[right].id);
    if (m.rank < 0) return;
    queue.Push(MergeQueue::Key(m.rank, left), m.id);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.Empty()) {
    const MergeQueue::Entry c = queue.Pop();
    const int32_t pos = MergeQueue::Position(c.key);
    Symbol& left = symbols[pos];
    if (left.size == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Stale when a neighbour changed and the pair there now merges into another token (or
    // none): Hugging Face's check, exactly.
    if (merge_of(left.id, right.id).id != c.id) continue;
    left.id = c.id;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = pos;
    consider(left.prev);
    consider(pos);
  }

  bool last_unk = false;
  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(symbols.size()); i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      ids->push_back(s.id);
      last_unk = false;
    } else {
      EmitUnknown(piece.substr(s.begin, s.size), ids, &last_unk);
    }
  }
}

}  // namespace attnserve::server::text
