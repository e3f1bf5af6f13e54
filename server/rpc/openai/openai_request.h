// The body of POST /v1/completions and /v1/chat/completions read into what attnserve computes,
// as OpenAI's API defines the fields (vLLM's and llama.cpp's extensions where noted). Fields
// OpenAI's server would ignore are ignored; fields attnserve does not support yet are refused
// by name (response_format other than text, tools, tool_choice other than none, suffix,
// best_of other than n, functions). Torch-free and model-free: checks against a model (its
// vocabulary, its template) come later, in the handler.
//
// Every error is INVALID_ARGUMENT whose message starts with the parameter's name, and carries
// that name as the status payload kParamPayload (the error body's "param").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/scheduler/job.h"

namespace attnserve::server::openai {

inline constexpr char kParamPayload[] = "type.attnserve.dev/openai-param";
// An error's OpenAI "code" (e.g. model_not_found), where the status code does not say it.
inline constexpr char kCodePayload[] = "type.attnserve.dev/openai-code";

// INVALID_ARGUMENT "`param`: `message`" with `param` as kParamPayload.
absl::Status FieldError(const std::string& param, const std::string& message);
// The param of a FieldError ("" for none).
std::string ParamOf(const absl::Status& status);

struct RequestLimits {
  int max_new_tokens = 1024;    // --max_new_tokens: the largest max_tokens
  int max_choices = 16;         // --http_max_choices: the largest n
  int max_stop_strings = 16;    // --max_stop_strings
  int64_t max_prompts = 64;     // prompts in one /v1/completions list
  int64_t max_messages = 1024;  // chat messages
};

// One prompt of /v1/completions: a text, or token ids.
struct Prompt {
  std::string text;
  std::vector<int64_t> ids;
  bool is_ids = false;
};

struct CompletionRequest {
  bool chat = false;
  std::string model;                  // "" or "auto": the policy chooses
  std::vector<Prompt> prompts;        // /v1/completions: at least one
  nlohmann::ordered_json messages;    // /v1/chat/completions: a non-empty array
  bool add_generation_prompt = true;  // chat (vLLM's extension)
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // (vLLM's)
  int max_tokens = 16;  // completions default 16 (OpenAI's); chat: until a stop or the limit
  bool max_tokens_given = false;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt's text before the completion's
  // Completions: `logprobs` N (0-5 there, up to 20 here) reports the N most likely; chat:
  // `logprobs` true with `top_logprobs` 0-20. -1: none.
  int logprobs = -1;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;  // vLLM's extension
  bool ignore_eos = false;              // vLLM's extension
  bool tokens_as_ids = false;           // return_tokens_as_token_ids (vLLM's): "token_id:N" strings
  bool seeded = false;                  // `seed` given (else each request draws its own)
  scheduler::Sampling sampling;
  std::string user;
  // Continue this session (attnserve's extension; also the x-attnserve-session header).
  std::string session_id;
};

// A request body as JSON: INVALID_ARGUMENT saying where it does not parse, that it is not an
// object, or that it nests deeper than kMaxJsonDepth (checked before parsing: nesting costs
// the parser and the destructor stack).
inline constexpr int kMaxJsonDepth = 64;
// Ordered: objects keep the client's key order (a chat template's tojson shows it).
absl::StatusOr<nlohmann::ordered_json> ParseJsonBody(const std::string& body);

// Reads `body` (already parsed JSON). `chat` selects the endpoint's fields.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(const nlohmann::ordered_json& body,
                                                         bool chat, const RequestLimits& limits);

}  // namespace attnserve::server::openai
