#include "server/text/utf8.h"

#include "absl/strings/str_cat.h"

namespace attnserve::server::text {
namespace {

// The length of the valid sequence at text[i], or 0 when text[i] does not start one; `whole`
// says whether the sequence ends inside `text` (false: a valid but cut start).
int ValidSequenceAt(absl::string_view text, size_t i, bool* whole) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  *whole = true;
  if (b0 < 0x80) return 1;
  int n;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= text.size()) {
      *whole = false;
      return k;  // a valid prefix of k bytes that the text cuts
    }
    const uint8_t b = byte(i + k);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -k;  // invalid after k bytes
  }
  return n;
}

}  // namespace

size_t FirstInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= text.size()) {
      uint64_t w;
      __builtin_memcpy(&w, text.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= text.size()) break;
    bool whole;
    const int n = ValidSequenceAt(text, i, &whole);
    if (n <= 0 || !whole) return i;
    i += n;
  }
  return text.size();
}

absl::Status CheckUtf8(absl::string_view text, absl::string_view what) {
  const size_t bad = FirstInvalidUtf8(text);
  if (bad == text.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is not valid UTF-8 at byte ", bad));
}

size_t CompleteUtf8Prefix(absl::string_view bytes) {
  // Only the last 3 bytes can start a sequence that is still open.
  const size_t from = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t i = from; i < bytes.size(); ++i) {
    bool whole;
    const int n = ValidSequenceAt(bytes, i, &whole);
    if (n > 0 && !whole) return i;  // a valid start that the bytes cut: it waits
  }
  return bytes.size();
}

std::string Utf8Repair(absl::string_view bytes) {
  if (FirstInvalidUtf8(bytes) == bytes.size()) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t i = 0;
  while (i < bytes.size()) {
    bool whole;
    const int n = ValidSequenceAt(bytes, i, &whole);
    if (n > 0 && whole) {
      out.append(bytes.data() + i, n);
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      // A maximal subpart: the valid prefix of a sequence counts as one, else one byte.
      i += n < 0 ? -n : (n > 0 ? n : 1);
    }
  }
  return out;
}

char32_t NextCodePoint(absl::string_view text, size_t* pos) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[*pos + k]); };
  const uint8_t b0 = b(0);
  char32_t cp;
  int n;
  if (b0 < 0x80) {
    cp = b0;
    n = 1;
  } else if (b0 < 0xE0) {
    cp = (char32_t{b0} & 0x1F) << 6 | (b(1) & 0x3F);
    n = 2;
  } else if (b0 < 0xF0) {
    cp = (char32_t{b0} & 0x0F) << 12 | (char32_t{b(1)} & 0x3F) << 6 | (b(2) & 0x3F);
    n = 3;
  } else {
    cp = (char32_t{b0} & 0x07) << 18 | (char32_t{b(1)} & 0x3F) << 12 |
         (char32_t{b(2)} & 0x3F) << 6 | (b(3) & 0x3F);
    n = 4;
  }
  *pos += n;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace attnserve::server::text
