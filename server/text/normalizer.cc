#include "server/text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <utility>

namespace attnserve::server::text {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) {
    switch (form) {
      case UnicodeForm::kNfc:
        options_ = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
        break;
      case UnicodeForm::kNfd:
        options_ = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
        break;
      case UnicodeForm::kNfkc:
        options_ = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case UnicodeForm::kNfkd:
        options_ = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
  }
  std::string Normalize(absl::string_view text) const override {
    // ASCII is invariant under every form, and no character composes with an ASCII one that
    // follows it (only marks and Hangul vowels and trailing consonants compose with what
    // precedes them): a text is normalized stretch by stretch, each non-ASCII run with the one
    // ASCII character before it, and mostly-ASCII prompts skip utf8proc almost entirely.
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      size_t j = i;
      while (j < text.size() && static_cast<unsigned char>(text[j]) < 0x80) ++j;
      if (j == text.size()) {
        out.append(text.data() + i, j - i);
        break;
      }
      // text[j] starts a non-ASCII run; the ASCII character before it goes with it.
      const size_t run_begin = j > i ? j - 1 : j;
      out.append(text.data() + i, run_begin - i);
      size_t k = j;
      while (k < text.size() && static_cast<unsigned char>(text[k]) >= 0x80) ++k;
      AppendNormalized(text.substr(run_begin, k - run_begin), &out);
      i = k;
    }
    return out;
  }

 private:
  void AppendNormalized(absl::string_view run, std::string* out) const {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                            static_cast<utf8proc_ssize_t>(run.size()), &mapped,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) {
      // Only on invalid UTF-8 (callers validate first) or out of memory: leave it.
      out->append(run.data(), run.size());
      return;
    }
    out->append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
  }

  int options_ = 0;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string Normalize(absl::string_view text) const override {
    std::string s(text);
    for (const auto& step : steps_) s = step->Normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> MakeUnicodeNormalizer(UnicodeForm form) {
  return std::make_unique<UnicodeNormalizer>(form);
}

std::unique_ptr<Normalizer> MakeNormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps) {
  return std::make_unique<NormalizerSequence>(std::move(steps));
}

bool IsUnicodeWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool IsWordCharacter(char32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace attnserve::server::text
