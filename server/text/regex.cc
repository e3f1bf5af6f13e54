#include "server/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/text/utf8.h"

namespace attnserve::server::text {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  ~Impl() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

Regex::Regex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern, bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto impl = std::make_unique<Impl>();
  // UTF: the subject is UTF-8 (validated by the caller, so PCRE2 need not check it again);
  // UCP: \s \w \d and case folding by Unicode properties, as Rust's regex has them.
  impl->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0),
                    &error, &offset, nullptr);
  if (impl->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex pattern does not compile at offset ",
                                                   offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  // JIT makes matching several times faster; where it is not available the interpreter runs.
  (void)pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE);
  impl->context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(impl->context, kMatchLimit);
  return std::unique_ptr<Regex>(new Regex(std::move(impl)));
}

absl::Status Regex::Matches(absl::string_view text,
                            std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  // One match-data block per call (a few dozen bytes: the patterns' capture groups).
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  absl::Status status;
  while (at <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data,
                               impl_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      status = absl::ResourceExhaustedError(absl::StrCat(
          "tokenizer regex gave up at byte ", at, ": ", reinterpret_cast<const char*>(message)));
      break;
    }
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data);
    const size_t begin = v[0], end = v[1];
    if (end > begin) {
      out->emplace_back(begin, end);
      at = end;
    } else {
      // An empty match: step over one character.
      if (begin >= text.size()) break;
      at = begin + Utf8SequenceLength(static_cast<uint8_t>(text[begin]));
    }
  }
  pcre2_match_data_free(data);
  return status;
}

}  // namespace attnserve::server::text
