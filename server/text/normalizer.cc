#include "server/text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <utility>

namespace attnserve::server::text {
namespace {

bool IsAscii(absl::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

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
    // ASCII is invariant under every form; most prompts are mostly ASCII.
    if (IsAscii(text)) return std::string(text);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &out,
                     static_cast<utf8proc_option_t>(options_));
    if (n < 0) {
      // Only on invalid UTF-8 (callers validate first) or out of memory: leave it.
      return std::string(text);
    }
    std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
  }

 private:
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
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool IsWordCharacter(char32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace attnserve::server::text
