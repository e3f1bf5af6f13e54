// Chat templates of Hugging Face models: parses a Jinja chat template once and renders
// conversations with it the way transformers' apply_chat_template does (jinja2 sandbox with
// trim_blocks, lstrip_blocks and loopcontrols; tojson as json.dumps(ensure_ascii=False);
// raise_exception and strftime_now globals).
//
// Ownership: a ChatTemplate holds its source and its parsed tree in shared_ptrs to const, so
// copies are cheap and share one tree.
// Threads: Parse and LoadModelChatTemplate are pure; Render is const and thread-safe (many
// threads may render one template at once; each render has its own state).
// Units: limits are bytes, evaluation steps, and nesting levels.
#ifndef ATTNSERVE_SERVER_TEXT_CHAT_TEMPLATE_H_
#define ATTNSERVE_SERVER_TEXT_CHAT_TEMPLATE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attnserve::server::text {

namespace jinja {
struct Program;
}

struct ChatTemplateLimits {
  int64_t max_output_bytes = 1 << 20;  // rendered text
  int64_t max_steps = 1'000'000;       // evaluation steps (loop iterations, nodes evaluated, ...)
  int max_depth = 64;                  // nested calls / macro recursion / parse nesting
  int64_t max_value_bytes = 1 << 20;   // any single string/list built during rendering
};

struct ChatTemplateInputs {
  // OpenAI-style array: {role, content (string or parts), ...}. Ordered JSON: Jinja sees dict keys
  // in the order the request had them (tojson of tools and arguments keeps that order, as in HF).
  nlohmann::ordered_json messages;
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables, merged in
  std::chrono::system_clock::time_point now;  // what strftime_now formats (UTC)
};

class ChatTemplate {
 public:
  // Parses a template; INVALID_ARGUMENT with line/column on syntax errors; RESOURCE_EXHAUSTED
  // past limits (nesting deeper than max_depth).
  static absl::StatusOr<ChatTemplate> Parse(std::string source, ChatTemplateLimits limits = {});

  // Renders. INVALID_ARGUMENT for template runtime errors, including raise_exception("msg")
  // (the message contains msg); RESOURCE_EXHAUSTED when a limit is hit. Thread-safe.
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return *source_; }

 private:
  ChatTemplate() = default;
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const jinja::Program> program_;
  ChatTemplateLimits limits_;
};

// The template of a Hugging Face model folder: `chat_template.jinja` if present, else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template}: the one named
// "default"). chat_template is nullopt when the folder has none. bos/eos token strings come from
// tokenizer_config.json ("bos_token"/"eos_token": a string or {"content": ...}); empty if absent.
// NOT_FOUND when the folder has neither file; INVALID_ARGUMENT for unreadable JSON or templates.
struct ModelChatTemplate {
  std::optional<ChatTemplate> chat_template;
  std::string bos_token, eos_token;
};
absl::StatusOr<ModelChatTemplate> LoadModelChatTemplate(const std::string& model_dir,
                                                        ChatTemplateLimits limits = {});

}  // namespace attnserve::server::text

#endif  // ATTNSERVE_SERVER_TEXT_CHAT_TEMPLATE_H_
