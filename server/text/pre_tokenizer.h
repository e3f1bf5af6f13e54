// Pre-tokenizers of tokenizer.json: what splits a normalized text into the pieces that the
// model (BPE) encodes one by one. Pieces stay raw UTF-8 bytes: the ByteLevel alphabet is a
// property of the vocabulary (bpe_model.h reads it back to bytes), not applied to the text.
// Immutable after construction; Split may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/text/regex.h"

namespace attnserve::server::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits, in order; empty pieces are dropped. Errors only from a
  // regex that gives up (RESOURCE_EXHAUSTED).
  virtual absl::Status Split(std::vector<std::string>* pieces) const = 0;
  // Whether this is (or ends in) ByteLevel: the model then reads its vocabulary as bytes.
  virtual bool byte_level() const { return false; }
};

// What Split does with the pattern's matches (Rust's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// `Split`: the matches of `regex` (with `invert`, the text between them) are the delimiters.
std::unique_ptr<PreTokenizer> MakeSplit(std::unique_ptr<Regex> regex, SplitBehavior behavior,
                                        bool invert);

// `ByteLevel`: with `add_prefix_space`, a space before each piece that does not start with
// one; with `use_regex`, GPT-2's split into words, numbers, punctuation runs and spaces.
std::unique_ptr<PreTokenizer> MakeByteLevel(bool add_prefix_space, bool use_regex);

// `Sequence`: each in turn.
std::unique_ptr<PreTokenizer> MakeSequence(std::vector<std::unique_ptr<PreTokenizer>> steps);

// GPT-2's pattern, as the ByteLevel pre-tokenizer of Hugging Face's tokenizers has it.
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace attnserve::server::text
