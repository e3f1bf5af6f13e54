// A generation's tokens as either protocol door streams them (protocol-neutral): each token
// with the text it makes final (GenerationText's piece; the last token of a generation that ran
// to its length carries the held-back text), gathered in groups of `interval` tokens
// (GenerateSpec.stream_interval, OIP's parameter stream_interval; 0 or 1: one a group).
//
// Not thread-safe: used by one scheduler step at a time (Add in the job's on_token, after each
// decode step on a kernel thread; a last, shorter group in on_done), which orders the calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/text/generation_text.h"

namespace attnserve::server {

class GeneratedTokenGroups {
 public:
  struct Group {
    std::vector<int64_t> tokens;
    std::vector<float> logprobs;  // one per token
    std::string text;             // the tokens' pieces, concatenated
    int first_index = 0;          // of tokens[0] among the generated tokens
  };

  // `text` non-null (the job's, from AttachGenerationText).
  GeneratedTokenGroups(std::shared_ptr<text::GenerationText> text, int interval,
                       int max_new_tokens);

  // Generated token number `index` (0-based); true when its group is complete (read it, then
  // Clear).
  bool Add(int64_t token, float logprob, int index);

  // The tokens added since the last Clear (no tokens: none).
  const Group& group() const { return group_; }
  // Starts a new group (keeping the buffers: no allocation a token).
  void Clear();

  int interval() const { return interval_; }

 private:
  const std::shared_ptr<text::GenerationText> text_;
  const int interval_;  // >= 1
  const int max_new_tokens_;
  Group group_;
};

}  // namespace attnserve::server
