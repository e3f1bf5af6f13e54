#include "server/text/pre_tokenizer.h"

#include <utility>

namespace attnserve::server::text {
namespace {

// The pieces of `text` that `behavior` keeps, given the delimiter ranges `delims` (sorted,
// disjoint), appended to `out`.
void SplitByDelimiters(const std::string& text,
                       const std::vector<std::pair<size_t, size_t>>& delims, SplitBehavior behavior,
                       std::vector<std::string>* out) {
  // (begin, end, is_delimiter) covering all of `text`.
  struct Span {
    size_t begin, end;
    bool delim;
  };
  std::vector<Span> spans;
  spans.reserve(2 * delims.size() + 1);
  size_t at = 0;
  for (const auto& [b, e] : delims) {
    if (b > at) spans.push_back({at, b, false});
    spans.push_back({b, e, true});
    at = e;
  }
  if (at < text.size()) spans.push_back({at, text.size(), false});

  const auto emit = [&](size_t b, size_t e) {
    if (e > b) out->emplace_back(text, b, e - b);
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.delim) emit(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) emit(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      // A delimiter ends the piece before it.
      size_t begin = 0;
      for (const Span& s : spans) {
        if (s.delim) {
          emit(begin, s.end);
          begin = s.end;
        }
      }
      emit(begin, text.size());
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // A delimiter starts a new piece.
      size_t begin = 0;
      for (const Span& s : spans) {
        if (s.delim) {
          emit(begin, s.begin);
          begin = s.begin;
        }
      }
      emit(begin, text.size());
      break;
    }
    case SplitBehavior::kContiguous: {
      // Runs of adjacent delimiters become one piece.
      size_t i = 0;
      while (i < spans.size()) {
        size_t j = i + 1;
        if (spans[i].delim) {
          while (j < spans.size() && spans[j].delim && spans[j].begin == spans[j - 1].end) ++j;
        }
        emit(spans[i].begin, spans[j - 1].end);
        i = j;
      }
      break;
    }
  }
}

// The ranges of `text` between `matches` (the inverse of a match list).
std::vector<std::pair<size_t, size_t>> Gaps(const std::vector<std::pair<size_t, size_t>>& matches,
                                            size_t size) {
  std::vector<std::pair<size_t, size_t>> gaps;
  size_t at = 0;
  for (const auto& [b, e] : matches) {
    if (b > at) gaps.emplace_back(at, b);
    at = e;
  }
  if (at < size) gaps.emplace_back(at, size);
  return gaps;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  absl::Status Split(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    std::vector<std::pair<size_t, size_t>> matches;
    for (const std::string& piece : *pieces) {
      if (absl::Status s = regex_->Matches(piece, &matches); !s.ok()) return s;
      SplitByDelimiters(piece, invert_ ? Gaps(matches, piece.size()) : matches, behavior_, &out);
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> gpt2)
      : add_prefix_space_(add_prefix_space), gpt2_(std::move(gpt2)) {}

  absl::Status Split(std::vector<std::string>* pieces) const override {
    if (add_prefix_space_) {
      for (std::string& piece : *pieces) {
        if (piece.empty() || piece[0] != ' ') piece.insert(piece.begin(), ' ');
      }
    }
    if (gpt2_ == nullptr) return absl::OkStatus();
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    std::vector<std::pair<size_t, size_t>> matches;
    for (const std::string& piece : *pieces) {
      if (absl::Status s = gpt2_->Matches(piece, &matches); !s.ok()) return s;
      SplitByDelimiters(piece, matches, SplitBehavior::kIsolated, &out);
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> gpt2_;  // null: use_regex false
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status Split(std::vector<std::string>* pieces) const override {
    for (const auto& step : steps_) {
      if (absl::Status s = step->Split(pieces); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  bool byte_level() const override { return !steps_.empty() && steps_.back()->byte_level(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> MakeSplit(std::unique_ptr<Regex> regex, SplitBehavior behavior,
                                        bool invert) {
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}

std::unique_ptr<PreTokenizer> MakeByteLevel(bool add_prefix_space, bool use_regex) {
  std::unique_ptr<Regex> gpt2;
  if (use_regex) gpt2 = std::move(Regex::Compile(kGpt2Pattern)).value();  // a constant: compiles
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(gpt2));
}

std::unique_ptr<PreTokenizer> MakeSequence(std::vector<std::unique_ptr<PreTokenizer>> steps) {
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

}  // namespace attnserve::server::text
