#include "server/text/tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/text/utf8.h"

namespace attnserve::server::text {
namespace {

std::vector<AddedToken> RawTokens(const std::vector<AddedToken>& all, bool have_normalizer) {
  std::vector<AddedToken> out;
  for (const AddedToken& t : all) {
    if (!t.normalized || !have_normalizer) out.push_back(t);
  }
  return out;
}

std::vector<AddedToken> NormalizedTokens(const std::vector<AddedToken>& all,
                                         const Normalizer* normalizer) {
  std::vector<AddedToken> out;
  if (normalizer == nullptr) return out;
  for (const AddedToken& t : all) {
    if (!t.normalized) continue;
    AddedToken n = t;
    n.content = normalizer->Normalize(t.content);
    out.push_back(std::move(n));
  }
  return out;
}

absl::Status TooMany(size_t max_ids) {
  return absl::ResourceExhaustedError(absl::StrCat("the text is more than ", max_ids, " tokens"));
}

}  // namespace

Tokenizer::Tokenizer(TokenizerParts parts)
    : normalizer_(std::move(parts.normalizer)),
      pre_tokenizer_(std::move(parts.pre_tokenizer)),
      model_(std::move(parts.model)),
      added_tokens_(std::move(parts.added_tokens)),
      raw_matcher_(RawTokens(added_tokens_, normalizer_ != nullptr)),
      normalized_matcher_(NormalizedTokens(added_tokens_, normalizer_.get())),
      template_prefix_(std::move(parts.template_prefix)),
      template_suffix_(std::move(parts.template_suffix)) {
  bytes_ = model_->id_bytes();
  for (const AddedToken& t : added_tokens_) {
    if (static_cast<size_t>(t.id) >= bytes_.size()) bytes_.resize(t.id + 1);
  }
  special_.assign(bytes_.size(), false);
  for (const AddedToken& t : added_tokens_) {
    bytes_[t.id] = t.content;
    special_[t.id] = t.special;
  }
}

absl::StatusOr<std::vector<int64_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_special_tokens, int64_t max_tokens,
                                                       absl::string_view what) const {
  if (absl::Status s = CheckUtf8(text, what); !s.ok()) return s;
  const size_t max_ids = max_tokens < 0 ? SIZE_MAX : static_cast<size_t>(max_tokens);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 4);
  if (add_special_tokens) ids.insert(ids.end(), template_prefix_.begin(), template_prefix_.end());
  size_t at = 0;
  for (const AddedTokenMatcher::Match& m : raw_matcher_.Find(text)) {
    if (m.begin > at) {
      if (absl::Status s = EncodeSection(text.substr(at, m.begin - at), &ids, max_ids); !s.ok()) {
        return s;
      }
    }
    ids.push_back(m.id);
    if (ids.size() > max_ids) return TooMany(max_ids);
    at = m.end;
  }
  if (at < text.size()) {
    if (absl::Status s = EncodeSection(text.substr(at), &ids, max_ids); !s.ok()) return s;
  }
  if (add_special_tokens) ids.insert(ids.end(), template_suffix_.begin(), template_suffix_.end());
  if (ids.size() > max_ids) return TooMany(max_ids);
  return std::vector<int64_t>(ids.begin(), ids.end());
}

absl::Status Tokenizer::EncodeSection(absl::string_view section, std::vector<int32_t>* ids,
                                      size_t max_ids) const {
  if (normalizer_ == nullptr) return EncodeNormalized(section, ids, max_ids);
  const std::string normalized = normalizer_->Normalize(section);
  const absl::string_view text(normalized);
  size_t at = 0;
  for (const AddedTokenMatcher::Match& m : normalized_matcher_.Find(text)) {
    if (m.begin > at) {
      if (absl::Status s = EncodeNormalized(text.substr(at, m.begin - at), ids, max_ids); !s.ok()) {
        return s;
      }
    }
    ids->push_back(m.id);
    if (ids->size() > max_ids) return TooMany(max_ids);
    at = m.end;
  }
  if (at < text.size()) return EncodeNormalized(text.substr(at), ids, max_ids);
  return absl::OkStatus();
}

absl::Status Tokenizer::EncodeNormalized(absl::string_view text, std::vector<int32_t>* ids,
                                         size_t max_ids) const {
  std::vector<std::string> pieces{std::string(text)};
  if (pre_tokenizer_ != nullptr) {
    if (absl::Status s = pre_tokenizer_->Split(&pieces); !s.ok()) return s;
  }
  for (const std::string& piece : pieces) {
    model_->Encode(piece, ids);
    if (ids->size() > max_ids) return TooMany(max_ids);
  }
  return absl::OkStatus();
}

std::string Tokenizer::Decode(absl::Span<const int64_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int64_t id : ids) {
    if (skip_special_tokens && IsSpecial(id)) continue;
    const absl::string_view b = TokenBytes(id);
    bytes.append(b.data(), b.size());
  }
  return Utf8Repair(bytes);
}

absl::string_view Tokenizer::TokenBytes(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return bytes_[id];
}

bool Tokenizer::IsSpecial(int64_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

int64_t Tokenizer::SpecialTokenId(absl::string_view content) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.special && t.content == content) return t.id;
  }
  return -1;
}

int64_t Tokenizer::MemoryBytes() const {
  int64_t bytes = model_->MemoryBytes();
  for (const std::string& s : bytes_)
    bytes += sizeof(std::string) + (s.size() > 15 ? s.size() + 1 : 0);
  bytes += static_cast<int64_t>(special_.size() / 8);
  return bytes;
}

}  // namespace attnserve::server::text
