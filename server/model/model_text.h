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
#include "server/text/chat_template.h"
#include "server/text/tokenizer.h"

namespace attnserve::model {

struct ModelText {
  std::shared_ptr<const server::text::Tokenizer> tokenizer;  // never null
  std::string tokenizer_json;  // the file's bytes, written next to exported weights
  // Tokens that end generation by default (GenerateSpec.stop_token_ids when none are given).
  std::vector<int64_t> end_of_text_ids;
  // The chat template (server/text/chat_template.h: chat_template.jinja, else
  // tokenizer_config.json's chat_template) and the bos/eos strings it is rendered with. None:
  // chat requests are refused, with chat_template_error saying why (no template, or the
  // template's parse error: a model with a broken template still serves text and ids).
  std::optional<server::text::ChatTemplate> chat_template;
  std::string bos_token, eos_token;
  std::string chat_template_error;
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
// have 4096) have no text. Their chat template is kDefaultChatTemplate.
ModelText ByteLevelModelText();

// tokenizer.json of ByteLevelModelText.
std::string ByteLevelTokenizerJson();

// The default models' chat template: each message as "<|role|>\n" + its text + "\n", then
// "<|assistant|>\n" for the generation prompt.
inline constexpr char kDefaultChatTemplate[] =
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string "
    "else (message['content'] or []) | map(attribute='text') | join('') -%}"
    "{{- '<|' ~ message['role'] ~ '|>\n' ~ content ~ '\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}";

}  // namespace attnserve::model
