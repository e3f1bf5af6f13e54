#include "server/rpc/attnserve/generated_token_stream.h"

#include <utility>

namespace attnserve::server {

GeneratedTokenStream::GeneratedTokenStream(int64_t sequence_number, int interval,
                                           int max_new_tokens,
                                           std::shared_ptr<text::GenerationText> text)
    : sequence_number_(sequence_number), groups_(std::move(text), interval, max_new_tokens) {}

std::optional<v1::StreamResponse> GeneratedTokenStream::Add(const scheduler::SampledToken& sampled,
                                                            int index) {
  top_ = sampled.top;
  if (!groups_.Add(sampled.token, sampled.logprob, index)) return std::nullopt;
  return Flush();
}

std::optional<v1::StreamResponse> GeneratedTokenStream::Flush() {
  const GeneratedTokenGroups::Group& group = groups_.group();
  if (group.tokens.empty()) return std::nullopt;
  v1::StreamResponse response;
  if (groups_.interval() == 1) {  // one token: the message clients had before groups
    v1::GeneratedToken* g = response.mutable_generated();
    g->set_sequence_number(sequence_number_);
    g->set_token(group.tokens[0]);
    g->set_logprob(group.logprobs[0]);
    g->set_index(group.first_index);
    g->set_text(group.text);
    for (const scheduler::TokenLogprob& t : top_) {
      v1::TokenProbability* p = g->add_top_logprobs();
      p->set_token(t.token);
      p->set_logprob(t.logprob);
    }
  } else {
    v1::GeneratedTokens* g = response.mutable_generated_tokens();
    g->set_sequence_number(sequence_number_);
    g->set_first_index(group.first_index);
    g->mutable_tokens()->Add(group.tokens.begin(), group.tokens.end());
    g->mutable_logprobs()->Add(group.logprobs.begin(), group.logprobs.end());
    g->set_text(group.text);
  }
  groups_.Clear();
  return response;
}

}  // namespace attnserve::server
