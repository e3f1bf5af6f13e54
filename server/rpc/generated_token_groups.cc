#include "server/rpc/generated_token_groups.h"

#include <algorithm>
#include <utility>

namespace attnserve::server {

GeneratedTokenGroups::GeneratedTokenGroups(std::shared_ptr<text::GenerationText> text, int interval,
                                           int max_new_tokens)
    : text_(std::move(text)), interval_(std::max(1, interval)), max_new_tokens_(max_new_tokens) {}

bool GeneratedTokenGroups::Add(int64_t token, float logprob, int index) {
  text::GenerationText::Step step = text_->Push(token);
  if (step.stop == text::StopReason::kNone && index + 1 == max_new_tokens_) {
    step.piece += text_->Finish();
  }
  if (group_.tokens.empty()) group_.first_index = index;
  group_.tokens.push_back(token);
  group_.logprobs.push_back(logprob);
  group_.text += step.piece;
  return static_cast<int>(group_.tokens.size()) >= interval_;
}

void GeneratedTokenGroups::Clear() {
  group_.tokens.clear();
  group_.logprobs.clear();
  group_.text.clear();
}

}  // namespace attnserve::server
