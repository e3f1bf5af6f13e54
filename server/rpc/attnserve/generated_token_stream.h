// The streamed messages of one append's generated tokens (GeneratedTokenGroups as AttnServe
// messages): a GeneratedToken per token, or, with GenerateSpec.stream_interval N > 1,
// GeneratedTokens groups of N (the last, shorter one from Flush when generation ends, before
// the AppendResult).
//
// Not thread-safe: used by one scheduler step at a time (Add after each decode step, on a
// kernel thread; Flush in on_done, after the last), which orders the calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "attnserve/v1/inference.pb.h"
#include "server/rpc/generated_token_groups.h"
#include "server/scheduler/job.h"
#include "server/text/generation_text.h"

namespace attnserve::server {

class GeneratedTokenStream {
 public:
  // `text` non-null (shared with the append's on_done); `interval` as
  // GenerateSpec.stream_interval (0 or 1: one message per token).
  GeneratedTokenStream(int64_t sequence_number, int interval, int max_new_tokens,
                       std::shared_ptr<text::GenerationText> text);

  // Generated token number `index` (0-based): the message to send now, if any. Its top
  // alternatives go into a GeneratedToken (one message per token) only.
  std::optional<v1::StreamResponse> Add(const scheduler::SampledToken& sampled, int index);

  // The tokens of a group not sent yet, if any.
  std::optional<v1::StreamResponse> Flush();

 private:
  const int64_t sequence_number_;
  std::vector<scheduler::TokenLogprob> top_;  // the last token's alternatives
  GeneratedTokenGroups groups_;
};

}  // namespace attnserve::server
