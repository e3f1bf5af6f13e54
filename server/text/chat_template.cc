#include "server/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/text/jinja/ast.h"
#include "server/text/jinja/builtins.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/parser.h"
#include "server/text/jinja/value.h"

namespace attnserve::server::text {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source, ChatTemplateLimits limits) {
  if (limits.max_depth < 1) limits.max_depth = 1;
  absl::StatusOr<std::unique_ptr<const jinja::Program>> program =
      jinja::ParseTemplate(source, limits.max_depth);
  if (!program.ok()) return program.status();
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(std::move(source));
  t.program_ = std::shared_ptr<const jinja::Program>(std::move(*program));
  t.limits_ = limits;
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  using jinja::Value;
  Value context = Value::Dict();
  jinja::AddGlobals(inputs.now, &context);
  jinja::ValueDict& d = context.dict();
  d.Set(Value::String("messages"),
        Value::FromJson(inputs.messages.is_null() ? nlohmann::ordered_json::array()
                                                  : inputs.messages));
  d.Set(Value::String("add_generation_prompt"), Value::Bool(inputs.add_generation_prompt));
  d.Set(Value::String("bos_token"), Value::String(inputs.bos_token));
  d.Set(Value::String("eos_token"), Value::String(inputs.eos_token));
  if (inputs.extra.is_object()) {
    for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) {
      d.Set(Value::String(it.key()), Value::FromJson(it.value()));
    }
  } else if (!inputs.extra.is_null()) {
    return absl::InvalidArgumentError("chat template: extra context must be a JSON object");
  }
  jinja::RenderLimits limits{limits_.max_output_bytes, limits_.max_steps, limits_.max_depth,
                             limits_.max_value_bytes};
  jinja::Interpreter interpreter(limits, std::move(context));
  return interpreter.Render(*program_);
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TokenString(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model_dir,
                                                        ChatTemplateLimits limits) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const fs::path jinja_path = dir / "chat_template.jinja";
  const fs::path config_path = dir / "tokenizer_config.json";
  std::error_code ec;
  bool has_jinja = fs::is_regular_file(jinja_path, ec);
  bool has_config = fs::is_regular_file(config_path, ec);
  if (!has_jinja && !has_config) {
    return absl::NotFoundError(
        absl::StrCat(model_dir, " has neither chat_template.jinja nor tokenizer_config.json"));
  }
  ModelChatTemplate out;
  std::optional<std::string> source;
  if (has_config) {
    absl::StatusOr<std::string> text = ReadFile(config_path);
    if (!text.ok()) return text.status();
    nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path.string(), " is not a JSON object"));
    }
    out.bos_token = TokenString(config, "bos_token");
    out.eos_token = TokenString(config, "eos_token");
    auto it = config.find("chat_template");
    if (it != config.end()) {
      if (it->is_string()) {
        source = it->get<std::string>();
      } else if (it->is_array()) {
        for (const auto& entry : *it) {
          if (entry.is_object() && entry.value("name", "") == "default" &&
              entry.contains("template") && entry["template"].is_string()) {
            source = entry["template"].get<std::string>();
          }
        }
      }
    }
  }
  if (has_jinja) {
    absl::StatusOr<std::string> text = ReadFile(jinja_path);
    if (!text.ok()) return text.status();
    source = std::move(*text);
  }
  if (source.has_value()) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(std::move(*source), limits);
    if (!t.ok()) return t.status();
    out.chat_template = std::move(*t);
  }
  return out;
}

}  // namespace attnserve::server::text
