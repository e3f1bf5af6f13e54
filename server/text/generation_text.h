// What generation turns into for a client: text pieces as tokens come, and when to stop.
// Pieces never end inside a UTF-8 character (an unfinished character's bytes wait for the next
// token) nor inside what may still become a stop string (that text waits until it cannot);
// a stop string, once matched (across token boundaries), ends generation and neither it nor
// anything after it is returned. A stop token (by default the model's end-of-text) ends
// generation too, and its text is not returned. Protocol-neutral: both protocol doors use it.
//
// Threads: one object per generation, used by one thread at a time (the scheduler's, in the
// job's on_token hook); Push costs O(token bytes + held-back bytes x stop strings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "server/text/tokenizer.h"

namespace attnserve::server::text {

enum class StopReason { kNone, kStopToken, kStopString };

struct GenerationTextOptions {
  std::vector<std::string> stop_strings;        // non-empty, valid UTF-8 (CheckStopStrings)
  absl::flat_hash_set<int64_t> stop_token_ids;  // e.g. the model's end-of-text
  bool skip_special_tokens = true;              // special tokens add no text
};

// INVALID_ARGUMENT for an empty or invalid UTF-8 stop string, more than `max_count` of them,
// or one longer than `max_bytes`.
absl::Status CheckStopStrings(const std::vector<std::string>& stop, int max_count, int max_bytes);

class GenerationText {
 public:
  // `tokenizer` may be null (a model without one): then only stop tokens apply and pieces are
  // empty. Borrowed; must outlive this object.
  GenerationText(const Tokenizer* tokenizer, GenerationTextOptions options);

  struct Step {
    std::string piece;  // text that is final now (may be empty)
    StopReason stop = StopReason::kNone;
  };
  // The next generated token. After a step that stops, further calls return nothing.
  Step Push(int64_t token);
  // At the end of generation (without a stop): the held-back text, an unfinished character
  // as U+FFFD.
  std::string Finish();

  const std::string& text() const { return text_; }  // every piece returned so far
  StopReason stop_reason() const { return stop_; }
  const std::string& matched_stop_string() const { return matched_; }

 private:
  // Moves what `held_` can give up to the returned piece, or stops at a stop string.
  void Release(Step* step);

  const Tokenizer* tokenizer_;
  GenerationTextOptions options_;
  std::string pending_bytes_;  // an unfinished UTF-8 character
  std::string held_;           // decoded text that may still start a stop string
  std::string text_;
  std::string matched_;
  StopReason stop_ = StopReason::kNone;
};

}  // namespace attnserve::server::text
