// OpenAI's response objects for one request's choices, assembled from its ChoiceEvents:
//   * streamed: Server-Sent Events, `data: {chunk}\n\n` per event batch ("text_completion" or
//     "chat.completion.chunk" objects; a chat choice's first chunk carries the role, its last
//     the finish_reason), then with stream_options.include_usage a chunk with no choices and
//     the usage, then `data: [DONE]\n\n`; an error once the stream has begun is a
//     `data: {"error": {...}}` event, then `data: [DONE]`.
//   * not streamed: one "text_completion" or "chat.completion" object with every choice and
//     the usage.
// Logprobs as OpenAI's two endpoints shape them (completions: tokens / token_logprobs /
// top_logprobs / text_offset; chat: content[] of {token, logprob, bytes, top_logprobs}).
// Token strings are the tokenizer's bytes of each id (bytes that are not valid UTF-8 become
// U+FFFD in the string; `bytes` has them exactly).
//
// Threads: one assembler per request, used by its handler's thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/rpc/openai/choice_events.h"
#include "server/rpc/openai/openai_error.h"
#include "server/rpc/openai/openai_request.h"
#include "server/text/tokenizer.h"

namespace attnserve::server::openai {

struct ResponseHeader {
  std::string id;          // "cmpl-..." or "chatcmpl-..."
  std::string model;       // the model that answered
  int64_t created = 0;     // Unix seconds
  std::string session_id;  // the session it continued or created (attnserve's extension)
};

class CompletionAssembler {
 public:
  // `tokenizer` may be null (token strings are then empty). `echo_texts`: per choice, the text
  // that goes before its completion (completions with echo), else empty.
  CompletionAssembler(const CompletionRequest& request, ResponseHeader header,
                      const text::Tokenizer* tokenizer, int choices,
                      std::vector<std::string> echo_texts, int64_t prompt_tokens);

  // Streaming: the SSE events for `events` (empty when they carry nothing to send).
  std::string StreamChunks(const std::vector<ChoiceEvent>& events);
  // The usage chunk (when asked for) and [DONE].
  std::string StreamEnd() const;
  // An error after the stream began: the error event and [DONE].
  static std::string StreamError(const HttpError& error);

  // Not streaming: folds `events` in.
  void Add(const std::vector<ChoiceEvent>& events);
  // The whole response object.
  std::string Body() const;

  // The first choice that ended with an error (OK: none).
  const absl::Status& error() const { return error_; }
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  struct Choice {
    std::string text;
    nlohmann::json logprobs;  // accumulated (non-streamed)
    int64_t text_offset = 0;  // completions' text_offset of the next token
    bool role_sent = false;
    std::string finish_reason;
  };
  // The logprobs object of `tokens` (advancing the choice's text offset).
  nlohmann::json Logprobs(Choice& choice, const std::vector<scheduler::SampledToken>& tokens);
  std::string TokenString(int64_t id) const;
  nlohmann::json Usage() const;
  nlohmann::json ChunkObject() const;

  CompletionRequest request_;
  ResponseHeader header_;
  const text::Tokenizer* tokenizer_;
  std::vector<Choice> choices_;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  absl::Status error_;
};

// One SSE event: "data: " + json + "\n\n".
std::string SseEvent(const nlohmann::json& value);

}  // namespace attnserve::server::openai
