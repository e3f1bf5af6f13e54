// A Hugging Face tokenizer (tokenizer.json): text to token ids and back, exactly as the
// `tokenizers` library does it for the components it supports (tokenizer_json.h lists them;
// others are refused at load, naming the component).
//
// Encode: added tokens matched in the raw text; the rest normalized; added tokens matched in
// the normalized text; the rest pre-tokenized into pieces; each piece through BPE; then the
// post-processor's special tokens (TemplateProcessing) when asked for.
//
// Cost: Encode is linear in the text's bytes except for BPE, which is O(n log n) in a piece of
// n bytes; memory is O(text bytes) (a few dozen bytes per input byte at most, all freed on
// return). Callers bound the text (--max_text_bytes) and the tokens (`max_tokens`).
// Immutable after loading: every method may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/text/added_tokens.h"
#include "server/text/bpe_model.h"
#include "server/text/normalizer.h"
#include "server/text/pre_tokenizer.h"

namespace attnserve::server::text {

// What tokenizer_json.cc builds a Tokenizer from.
struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;
  // TemplateProcessing's "single" template: ids before and after the text (empty: none).
  std::vector<int32_t> template_prefix, template_suffix;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerParts parts);

  // The ids of `text`. INVALID_ARGUMENT "<what> is not valid UTF-8 at byte N" for invalid
  // UTF-8; RESOURCE_EXHAUSTED as soon as there are more than `max_tokens` ids (negative: no
  // limit), so that an over-long text costs no more than the limit's worth of work.
  // `add_special_tokens`: the post-processor's template (e.g. a BOS token) around the ids.
  absl::StatusOr<std::vector<int64_t>> Encode(absl::string_view text, bool add_special_tokens,
                                              int64_t max_tokens = -1,
                                              absl::string_view what = "text") const;

  // The text of `ids`, valid UTF-8: each id's bytes concatenated (added tokens as their
  // content), invalid sequences as U+FFFD. Ids without text (outside the vocabulary) give
  // none; with `skip_special_tokens` special tokens give none.
  std::string Decode(absl::Span<const int64_t> ids, bool skip_special_tokens) const;

  // The raw bytes of one id (may be part of a UTF-8 sequence; empty outside the vocabulary).
  absl::string_view TokenBytes(int64_t id) const;
  bool IsSpecial(int64_t id) const;
  // One more than the largest id the tokenizer has (the model's vocabulary must hold it).
  int64_t vocab_size() const { return static_cast<int64_t>(bytes_.size()); }
  // The id of a special token with exactly this content, or -1.
  int64_t SpecialTokenId(absl::string_view content) const;
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  // Bytes of memory the tokenizer's tables hold (an estimate).
  int64_t MemoryBytes() const;

 private:
  // Encodes one stretch of raw text without added tokens of the raw-text kind.
  absl::Status EncodeSection(absl::string_view section, std::vector<int32_t>* ids,
                             size_t max_ids) const;
  absl::Status EncodeNormalized(absl::string_view text, std::vector<int32_t>* ids,
                                size_t max_ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_tokens_;
  AddedTokenMatcher raw_matcher_;         // tokens matched before normalization
  AddedTokenMatcher normalized_matcher_;  // tokens matched after it (contents normalized)
  std::vector<int32_t> template_prefix_, template_suffix_;
  std::vector<std::string> bytes_;  // by id
  std::vector<bool> special_;       // by id
};

}  // namespace attnserve::server::text
