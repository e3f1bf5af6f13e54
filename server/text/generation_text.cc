#include "server/text/generation_text.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/text/utf8.h"

namespace attnserve::server::text {

absl::Status CheckStopStrings(const std::vector<std::string>& stop, int max_count, int max_bytes) {
  if (static_cast<int>(stop.size()) > max_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("generate.stop has ", stop.size(), " strings; at most ", max_count));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("generate.stop[", i, "] is empty"));
    }
    if (static_cast<int>(stop[i].size()) > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("generate.stop[", i, "] is ", stop[i].size(),
                                                     " bytes; at most ", max_bytes));
    }
    if (absl::Status s = CheckUtf8(stop[i], absl::StrCat("generate.stop[", i, "]")); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

GenerationText::GenerationText(const Tokenizer* tokenizer, GenerationTextOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {}

GenerationText::Step GenerationText::Push(int64_t token) {
  Step step;
  if (stop_ != StopReason::kNone) return step;
  if (options_.stop_token_ids.contains(token)) {
    // What was held back for a stop string that can no longer come is final now.
    step.piece = Finish();
    stop_ = step.stop = StopReason::kStopToken;
    return step;
  }
  if (tokenizer_ == nullptr) return step;
  if (!(options_.skip_special_tokens && tokenizer_->IsSpecial(token))) {
    const absl::string_view bytes = tokenizer_->TokenBytes(token);
    pending_bytes_.append(bytes.data(), bytes.size());
  }
  const size_t complete = CompleteUtf8Prefix(pending_bytes_);
  if (complete > 0) {
    held_ += Utf8Repair(absl::string_view(pending_bytes_).substr(0, complete));
    pending_bytes_.erase(0, complete);
  }
  Release(&step);
  return step;
}

void GenerationText::Release(Step* step) {
  // The earliest stop string in what is held (ties: the longest).
  size_t first = std::string::npos;
  const std::string* found = nullptr;
  for (const std::string& s : options_.stop_strings) {
    const size_t at = held_.find(s);
    if (at != std::string::npos &&
        (at < first || (at == first && found != nullptr && s.size() > found->size()))) {
      first = at;
      found = &s;
    }
  }
  if (found != nullptr) {
    step->piece.append(held_, 0, first);
    text_.append(held_, 0, first);
    matched_ = *found;
    held_.clear();
    pending_bytes_.clear();
    stop_ = step->stop = StopReason::kStopString;
    return;
  }
  // Hold back the longest end of `held_` that begins some stop string.
  size_t keep = 0;
  for (const std::string& s : options_.stop_strings) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  const size_t give = held_.size() - keep;
  step->piece.append(held_, 0, give);
  text_.append(held_, 0, give);
  held_.erase(0, give);
}

std::string GenerationText::Finish() {
  std::string rest = held_;
  if (!pending_bytes_.empty()) rest += "\xEF\xBF\xBD";
  held_.clear();
  pending_bytes_.clear();
  text_ += rest;
  return rest;
}

}  // namespace attnserve::server::text
