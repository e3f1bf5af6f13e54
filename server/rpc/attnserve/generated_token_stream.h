// The streamed messages of one append's generated tokens: a GeneratedToken per token, or, with
// GenerateSpec.stream_interval N > 1, GeneratedTokens groups of N (the last, shorter one from
// Flush when generation ends, before the AppendResult). Each token's text is what
// GenerationText makes final with it; the last token of a generation that ran to its length
// carries the held-back text.
//
// Not thread-safe: used by one scheduler step at a time (Add after each decode step, on a
// kernel thread; Flush in on_done, after the last), which orders the calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "attnserve/v1/inference.pb.h"
#include "server/text/generation_text.h"

namespace attnserve::server {

class GeneratedTokenStream {
 public:
  // `text` non-null (shared with the append's on_done); `interval` as
  // GenerateSpec.stream_interval (0 or 1: one message per token).
  GeneratedTokenStream(int64_t sequence_number, int interval, int max_new_tokens,
                       std::shared_ptr<text::GenerationText> text);

  // Generated token number `index` (0-based): the message to send now, if any.
  std::optional<v1::StreamResponse> Add(int64_t token, float logprob, int index);

  // The tokens of a group not sent yet, if any.
  std::optional<v1::StreamResponse> Flush();

 private:
  const int64_t sequence_number_;
  const int interval_;
  const int max_new_tokens_;
  const std::shared_ptr<text::GenerationText> text_;
  v1::StreamResponse group_;  // generated_tokens being filled (interval_ > 1)
};

}  // namespace attnserve::server
