// Loading tokenizer.json (the Hugging Face `tokenizers` file format). Supported, as the
// GPT-NeoX (Mamba, RWKV-4 Pile) and Llama-3 / Qwen2 style tokenizers need them:
//   model          BPE (vocab; merges as "a b" or ["a", "b"]; byte_fallback, ignore_merges,
//                  fuse_unk, unk_token; no dropout, continuing_subword_prefix or
//                  end_of_word_suffix)
//   normalizer     null, NFC, NFD, NFKC, NFKD, Sequence
//   pre_tokenizer  ByteLevel (add_prefix_space, use_regex), Split (Regex or String pattern,
//                  every behavior, invert), Sequence; it must end in ByteLevel
//   post_processor null, ByteLevel, TemplateProcessing (its "single" template)
//   decoder        ByteLevel
//   added_tokens   special or not, lstrip, rstrip, normalized, single_word
// `truncation` and `padding` are ignored (the server's own limits apply). Anything else is
// INVALID_ARGUMENT naming the component, e.g. "tokenizer.json: pre_tokenizer Metaspace is not
// supported (supported: ByteLevel, Split, Sequence)".
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/text/tokenizer.h"

namespace attnserve::server::text {

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromJson(absl::string_view json);

// Reads and parses `path`. NOT_FOUND when it does not exist.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path);

}  // namespace attnserve::server::text
