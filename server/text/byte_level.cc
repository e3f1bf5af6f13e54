#include "server/text/byte_level.h"

#include <array>

#include "server/text/utf8.h"

namespace attnserve::server::text {
namespace {

struct Alphabet {
  std::array<char32_t, 256> to_code_point{};
  // Code points of the alphabet are below 0x144; -1 marks one outside it.
  std::array<int16_t, 0x144> to_byte{};
  Alphabet() {
    to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp =
          printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      to_code_point[b] = cp;
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet* alphabet = new Alphabet();
  return *alphabet;
}

}  // namespace

char32_t ByteLevelCodePoint(uint8_t b) { return TheAlphabet().to_code_point[b]; }

std::optional<std::string> ByteLevelToBytes(absl::string_view alphabet_text) {
  const Alphabet& a = TheAlphabet();
  std::string out;
  out.reserve(alphabet_text.size());
  size_t pos = 0;
  while (pos < alphabet_text.size()) {
    const char32_t cp = NextCodePoint(alphabet_text, &pos);
    if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.to_byte[cp]));
  }
  return out;
}

std::string BytesToByteLevel(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) AppendUtf8(ByteLevelCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

}  // namespace attnserve::server::text
