// A model's text side: its tokenizer (tokenizer.json in the model folder, or the built-in
// byte-level one of the default models) and its end-of-text ids. Models without a
// tokenizer.json take and return token ids only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/text/tokenizer.h"

namespace attnserve::model {

struct ModelText {
  std::shared_ptr<const server::text::Tokenizer> tokenizer;  // never null
  std::string tokenizer_json;  // the file's bytes, written next to exported weights
  // Tokens that end generation by default (GenerateSpec.stop_token_ids when none are given).
  std::vector<int64_t> end_of_text_ids;
};

// `dir`/tokenizer.json when it exists (nullopt: none). The end-of-text ids come from
// generation_config.json's or config.json's eos_token_id (a number or a list), else
// tokenizer_config.json's eos_token, else a special token named <|endoftext|>,
// <|end_of_text|>, <|eot_id|>, </s> or <eos>. INVALID_ARGUMENT naming the file for an
// unsupported or malformed tokenizer, or a tokenizer with ids beyond `model_vocab_size`.
absl::StatusOr<std::optional<ModelText>> LoadModelText(const std::string& dir,
                                                       int64_t model_vocab_size);

// Why a model folder without tokenizer.json takes token ids only, for the messages of text
// requests: "no tokenizer.json in its folder", or, where the folder holds only SentencePiece's
// tokenizer.model (Jamba's and Llama 2's carry both), that attnserve does not read that format
// and how to get a tokenizer.json from it.
std::string MissingTokenizerReason(const std::string& dir);

// The default models' tokenizer: every byte is a token (ids 0-255, in GPT-2's byte-level
// alphabet), <|endoftext|> is 256 and ends generation. Ids 257 and above (the default models
// have 4096) have no text.
ModelText ByteLevelModelText();

// tokenizer.json of ByteLevelModelText.
std::string ByteLevelTokenizerJson();

}  // namespace attnserve::model
