#include "server/model/model_text.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/model/python_json.h"
#include "server/text/byte_level.h"
#include "server/text/tokenizer_json.h"

namespace attnserve::model {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Struct;
using google::protobuf::Value;

std::optional<std::string> ReadIfExists(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::optional<Struct> ReadJsonObject(const fs::path& path) {
  const std::optional<std::string> text = ReadIfExists(path);
  if (!text) return std::nullopt;
  Struct s;
  if (!google::protobuf::util::JsonStringToMessage(PythonJsonToJson(*text), &s).ok()) {
    return std::nullopt;
  }
  return s;
}

// eos_token_id as a number or a list of numbers.
std::vector<int64_t> EosIds(const Struct& s) {
  std::vector<int64_t> ids;
  const auto it = s.fields().find("eos_token_id");
  if (it == s.fields().end()) return ids;
  const Value& v = it->second;
  if (v.has_number_value()) ids.push_back(static_cast<int64_t>(v.number_value()));
  if (v.has_list_value()) {
    for (const Value& e : v.list_value().values()) {
      if (e.has_number_value()) ids.push_back(static_cast<int64_t>(e.number_value()));
    }
  }
  return ids;
}

std::vector<int64_t> EndOfTextIds(const fs::path& dir, const server::text::Tokenizer& tokenizer) {
  for (const char* file : {"generation_config.json", "config.json"}) {
    if (const std::optional<Struct> s = ReadJsonObject(dir / file)) {
      if (std::vector<int64_t> ids = EosIds(*s); !ids.empty()) return ids;
    }
  }
  if (const std::optional<Struct> s = ReadJsonObject(dir / "tokenizer_config.json")) {
    const auto it = s->fields().find("eos_token");
    if (it != s->fields().end()) {
      std::string content;
      if (it->second.has_string_value()) content = it->second.string_value();
      if (it->second.has_struct_value()) {
        const auto c = it->second.struct_value().fields().find("content");
        if (c != it->second.struct_value().fields().end()) content = c->second.string_value();
      }
      if (const int64_t id = tokenizer.SpecialTokenId(content); id >= 0) return {id};
    }
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "</s>", "<eos>"}) {
    if (const int64_t id = tokenizer.SpecialTokenId(name); id >= 0) return {id};
  }
  return {};
}

}  // namespace

absl::StatusOr<std::optional<ModelText>> LoadModelText(const std::string& dir,
                                                       int64_t model_vocab_size) {
  const fs::path folder(dir);
  std::optional<std::string> json = ReadIfExists(folder / "tokenizer.json");
  if (!json) return std::optional<ModelText>();
  auto tokenizer = server::text::TokenizerFromJson(*json);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/", tokenizer.status().message()));
  }
  if ((*tokenizer)->vocab_size() > model_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/tokenizer.json has ids up to ", (*tokenizer)->vocab_size() - 1,
                     "; the model's vocabulary has ", model_vocab_size));
  }
  ModelText text;
  text.end_of_text_ids = EndOfTextIds(folder, **tokenizer);
  text.tokenizer = std::move(*tokenizer);
  text.tokenizer_json = std::move(*json);
  absl::StatusOr<server::text::ModelChatTemplate> chat = server::text::LoadModelChatTemplate(dir);
  if (chat.ok() && chat->chat_template.has_value()) {
    text.chat_template = std::move(chat->chat_template);
    text.bos_token = std::move(chat->bos_token);
    text.eos_token = std::move(chat->eos_token);
  } else {
    text.chat_template_error =
        chat.ok() || chat.status().code() == absl::StatusCode::kNotFound
            ? "its folder has no chat template (chat_template.jinja or tokenizer_config.json's "
              "chat_template); use /v1/completions with the prompt as text"
            : absl::StrCat("its chat template does not load: ", chat.status().message());
  }
  return std::optional<ModelText>(std::move(text));
}

std::string MissingTokenizerReason(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "tokenizer.model", ec)) {
    return "its folder has only a SentencePiece tokenizer.model, which attnserve does not read; "
           "save the tokenizer as tokenizer.json (transformers' AutoTokenizer.from_pretrained("
           "folder).save_pretrained(folder) writes one)";
  }
  return "no tokenizer.json in its folder";
}

std::string ByteLevelTokenizerJson() {
  Struct root;
  auto& f = *root.mutable_fields();
  f["version"].set_string_value("1.0");
  f["truncation"].set_null_value({});
  f["padding"].set_null_value({});
  Value added;
  Struct& eot = *added.mutable_list_value()->add_values()->mutable_struct_value();
  (*eot.mutable_fields())["id"].set_number_value(256);
  (*eot.mutable_fields())["content"].set_string_value("<|endoftext|>");
  for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) {
    (*eot.mutable_fields())[flag].set_bool_value(false);
  }
  (*eot.mutable_fields())["special"].set_bool_value(true);
  f["added_tokens"] = added;
  f["normalizer"].set_null_value({});
  const auto byte_level = [](bool use_regex) {
    Value v;
    auto& b = *v.mutable_struct_value()->mutable_fields();
    b["type"].set_string_value("ByteLevel");
    b["add_prefix_space"].set_bool_value(false);
    b["trim_offsets"].set_bool_value(true);
    b["use_regex"].set_bool_value(use_regex);
    return v;
  };
  // Every byte is a token, so splitting the text first would change nothing.
  f["pre_tokenizer"] = byte_level(false);
  f["post_processor"] = byte_level(false);
  f["decoder"] = byte_level(false);
  Value model;
  auto& m = *model.mutable_struct_value()->mutable_fields();
  m["type"].set_string_value("BPE");
  m["dropout"].set_null_value({});
  m["unk_token"].set_null_value({});
  m["fuse_unk"].set_bool_value(false);
  m["byte_fallback"].set_bool_value(false);
  auto& vocab = *m["vocab"].mutable_struct_value()->mutable_fields();
  for (int b = 0; b < 256; ++b) {
    vocab[server::text::BytesToByteLevel(std::string(1, static_cast<char>(b)))].set_number_value(b);
  }
  m["merges"].mutable_list_value();
  f["model"] = model;
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(root, &json, options);
  return json;
}

ModelText ByteLevelModelText() {
  static const ModelText* text = [] {
    auto* t = new ModelText();
    t->tokenizer_json = ByteLevelTokenizerJson();
    t->tokenizer = std::move(server::text::TokenizerFromJson(t->tokenizer_json)).value();
    t->end_of_text_ids = {t->tokenizer->SpecialTokenId("<|endoftext|>")};
    t->chat_template = server::text::ChatTemplate::Parse(kDefaultChatTemplate).value();
    t->eos_token = "<|endoftext|>";
    return t;
  }();
  return *text;
}

}  // namespace attnserve::model
