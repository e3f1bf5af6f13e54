#include "server/rpc/attnserve/generated_token_stream.h"

#include <utility>

namespace attnserve::server {

GeneratedTokenStream::GeneratedTokenStream(int64_t sequence_number, int interval,
                                           int max_new_tokens,
                                           std::shared_ptr<text::GenerationText> text)
    : sequence_number_(sequence_number),
      interval_(interval),
      max_new_tokens_(max_new_tokens),
      text_(std::move(text)) {}

std::optional<v1::StreamResponse> GeneratedTokenStream::Add(int64_t token, float logprob,
                                                            int index) {
  text::GenerationText::Step step = text_->Push(token);
  if (step.stop == text::StopReason::kNone && index + 1 == max_new_tokens_) {
    step.piece += text_->Finish();
  }
  if (interval_ <= 1) {
    v1::StreamResponse response;
    v1::GeneratedToken* g = response.mutable_generated();
    g->set_sequence_number(sequence_number_);
    g->set_token(token);
    g->set_logprob(logprob);
    g->set_index(index);
    g->set_text(std::move(step.piece));
    return response;
  }
  v1::GeneratedTokens* g = group_.mutable_generated_tokens();
  if (g->tokens_size() == 0) {
    g->set_sequence_number(sequence_number_);
    g->set_first_index(index);
  }
  g->add_tokens(token);
  g->add_logprobs(logprob);
  g->mutable_text()->append(step.piece);
  if (g->tokens_size() < interval_) return std::nullopt;
  return Flush();
}

std::optional<v1::StreamResponse> GeneratedTokenStream::Flush() {
  if (group_.generated_tokens().tokens_size() == 0) return std::nullopt;
  v1::StreamResponse out = std::move(group_);
  group_.Clear();
  return out;
}

}  // namespace attnserve::server
