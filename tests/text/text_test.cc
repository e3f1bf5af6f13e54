// The tokenizer library (server/text/) on its own: UTF-8 helpers, the components' contracts,
// refusals at load, added-token options, limits, and generated text (pieces at character
// boundaries, stop strings across tokens). Ids against Hugging Face's own are golden_test.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "server/text/byte_level.h"
#include "server/text/generation_text.h"
#include "server/text/tokenizer_json.h"
#include "server/text/utf8.h"

namespace attnserve::server::text {
namespace {

// A byte-level tokenizer.json with a few merges ("h e", "he l", "hel l", "hell o", "Ġ w") and
// the added tokens given as JSON.
std::string TinyTokenizerJson(
    const std::string& added = "[]", const std::string& extra_model = "",
    const std::string& pre =
        R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})",
    const std::string& normalizer = "null") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string key = BytesToByteLevel(std::string(1, static_cast<char>(b)));
    key = absl::StrReplaceAll(key, {{"\\", "\\\\"}, {"\"", "\\\""}});
    absl::StrAppend(&vocab, "\"", key, "\": ", b, ", ");
  }
  absl::StrAppend(&vocab, R"("he": 256, "hel": 257, "hell": 258, "hello": 259, "Ġw": 260)");
  return absl::StrCat(R"({"version": "1.0", "added_tokens": )", added, R"(, "normalizer": )",
                      normalizer, R"(, "pre_tokenizer": )", pre,
                      R"(, "post_processor": null, "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", )",
                      extra_model, R"( "vocab": {)", vocab,
                      R"(}, "merges": ["h e", "he l", "hel l", "hell o", ["Ġ", "w"]]}})");
}

std::unique_ptr<Tokenizer> Load(const std::string& json) {
  auto t = TokenizerFromJson(json);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int64_t> Ids(const Tokenizer& t, const std::string& text) {
  auto ids = t.Encode(text, true);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int64_t>{};
}

TEST(Utf8, FirstInvalidNamesTheByte) {
  EXPECT_EQ(FirstInvalidUtf8("abc"), 3u);
  EXPECT_EQ(FirstInvalidUtf8("ab\xC3\xA9z"), 5u);
  EXPECT_EQ(FirstInvalidUtf8("ab\xC3"), 2u);             // cut
  EXPECT_EQ(FirstInvalidUtf8("ab\xC0\xAF"), 2u);         // overlong
  EXPECT_EQ(FirstInvalidUtf8("a\xED\xA0\x80"), 1u);      // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("a\xF4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("0123456789\xFF"), 10u);    // after the ASCII fast path
  EXPECT_EQ(CheckUtf8("x\x80", "text").message(), "text is not valid UTF-8 at byte 1");
}

TEST(Utf8, CompletePrefixLeavesOnlyAnOpenCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82"), 2u);      // the start of a 3-byte character
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82\xAC"), 5u);  // the whole of it
  EXPECT_EQ(CompleteUtf8Prefix("ab\xFF"), 3u);          // never valid: does not wait
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(Utf8Repair("a\xFF"
                       "b\xE2\x82"
                       "c"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c");
}

TEST(ByteLevel, AlphabetRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ByteLevelToBytes(BytesToByteLevel(all)), all);
  EXPECT_EQ(BytesToByteLevel(" "), "\xC4\xA0");                // 'Ġ'
  EXPECT_FALSE(ByteLevelToBytes("\xE4\xB8\xAD").has_value());  // outside the alphabet
}

TEST(Tokenizer, MergesInRankOrder) {
  auto t = Load(TinyTokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "hello"), (std::vector<int64_t>{259}));
  EXPECT_EQ(Ids(*t, "hello world"), (std::vector<int64_t>{259, 260, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(Ids(*t, "hhe"), (std::vector<int64_t>{'h', 256}));
  EXPECT_EQ(t->Decode(Ids(*t, "hello world"), false), "hello world");
}

TEST(Tokenizer, AddedTokensStripAndSingleWord) {
  const std::string added = R"([
    {"id": 300, "content": "<s>", "special": true, "lstrip": true, "rstrip": true},
    {"id": 301, "content": "cat", "special": false, "single_word": true, "normalized": false}])";
  auto t = Load(TinyTokenizerJson(added));
  ASSERT_NE(t, nullptr);
  // lstrip/rstrip: the spaces around <s> belong to it.
  EXPECT_EQ(Ids(*t, "he  <s>  he"), (std::vector<int64_t>{256, 300, 256}));
  // single_word: only between non-word characters.
  EXPECT_EQ(Ids(*t, "a cat."), (std::vector<int64_t>{'a', ' ', 301, '.'}));
  const std::vector<int64_t> concat = Ids(*t, "concat");
  EXPECT_EQ(std::count(concat.begin(), concat.end(), 301), 0);
  EXPECT_TRUE(t->IsSpecial(300));
  EXPECT_EQ(t->Decode({256, 300, 256}, /*skip_special_tokens=*/true), "hehe");
  EXPECT_EQ(t->Decode({256, 300, 256}, /*skip_special_tokens=*/false), "he<s>he");
}

TEST(Tokenizer, ByteFallbackAndUnknown) {
  // A vocabulary without the byte 'z' (id 'z' renamed): with byte_fallback a <0x7A> token.
  std::string json = TinyTokenizerJson("[]", R"("byte_fallback": true, "unk_token": "<unk>",)");
  json = absl::StrReplaceAll(json, {{"\"z\": 122, ", "\"<0x7A>\": 122, \"<unk>\": 261, "}});
  auto t = Load(json);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "hez"), (std::vector<int64_t>{256, 122}));
}

TEST(Tokenizer, SplitThenByteLevelAsLlama3) {
  const std::string pre = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+(?!\\S)|\\s+|."},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  auto t = Load(TinyTokenizerJson("[]", "", pre));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "12345"), (std::vector<int64_t>{'1', '2', '3', '4', '5'}));
  EXPECT_EQ(Ids(*t, "hello world"), (std::vector<int64_t>{259, 260, 'o', 'r', 'l', 'd'}));
}

TEST(Tokenizer, RefusesUnsupportedComponentsByName) {
  const auto message = [](const std::string& json) {
    auto t = TokenizerFromJson(json);
    return t.ok() ? std::string("loaded") : std::string(t.status().message());
  };
  EXPECT_EQ(message(TinyTokenizerJson("[]", "", R"({"type": "Metaspace", "replacement": "_"})")),
            "tokenizer.json: pre_tokenizer Metaspace is not supported (supported: ByteLevel, "
            "Split, Sequence)");
  EXPECT_EQ(
      message(TinyTokenizerJson("[]", "", R"({"type": "ByteLevel"})", R"({"type": "Lowercase"})")),
      "tokenizer.json: normalizer Lowercase is not supported (supported: NFC, NFD, NFKC, "
      "NFKD, Sequence)");
  EXPECT_EQ(message(absl::StrReplaceAll(TinyTokenizerJson(),
                                        {{R"("type": "BPE")", R"("type": "WordPiece")"}})),
            "tokenizer.json: model WordPiece is not supported (supported: BPE)");
  EXPECT_EQ(
      message(absl::StrReplaceAll(TinyTokenizerJson(), {{R"("decoder": {"type": "ByteLevel"})",
                                                         R"("decoder": {"type": "Metaspace"})"}})),
      "tokenizer.json: decoder Metaspace is not supported (supported: ByteLevel)");
  EXPECT_EQ(message(absl::StrReplaceAll(TinyTokenizerJson(), {{R"("h e")", R"("h q9")"}})),
            "tokenizer.json: BPE merge 0 ('h' 'q9') names a token not in the vocab");
  EXPECT_NE(message("{not json").find("tokenizer.json: not JSON"), std::string::npos);
}

TEST(Tokenizer, InvalidUtf8AndTokenLimit) {
  auto t = Load(TinyTokenizerJson());
  ASSERT_NE(t, nullptr);
  auto bad = t->Encode("abc\xC3(", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "text is not valid UTF-8 at byte 3");
  auto many = t->Encode(std::string(1000, 'x') + " " + std::string(1000, 'y'), true, 100);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Tokenizer, AdversarialTextsCostBoundedTime) {
  auto t = Load(TinyTokenizerJson());
  ASSERT_NE(t, nullptr);
  // 1 MiB without a space (one piece), 1 MiB of spaces, deep combining marks.
  const std::vector<std::string> texts = {
      std::string(1 << 20, 'h'), std::string(1 << 20, ' '),
      "a" + absl::StrJoin(std::vector<std::string>(200000, "\xCC\x81"), "")};
  for (const std::string& text : texts) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = t->Encode(text, true);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(t->Decode(*ids, false), text);
    // Linear or n log n: far below a second per MiB here; 20 s is a hang, not noise.
    EXPECT_LT(seconds, 20.0) << text.size() << " bytes";
  }
}

TEST(GenerationText, PiecesNeverSplitACharacter) {
  auto t = Load(TinyTokenizerJson());
  ASSERT_NE(t, nullptr);
  GenerationText g(t.get(), {});
  // "é" is C3 A9: the first byte waits for the second.
  EXPECT_EQ(g.Push(0xC3).piece, "");
  EXPECT_EQ(g.Push(0xA9).piece, "\xC3\xA9");
  // "€" is E2 82 AC.
  EXPECT_EQ(g.Push(0xE2).piece, "");
  EXPECT_EQ(g.Push(0x82).piece, "");
  EXPECT_EQ(g.Push(259).piece,
            "\xEF\xBF\xBD"
            "hello");  // a cut character is U+FFFD
  EXPECT_EQ(g.Push(0xF0).piece, "");
  EXPECT_EQ(g.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(g.text(), "\xC3\xA9\xEF\xBF\xBDhello\xEF\xBF\xBD");
}

TEST(GenerationText, StopStringAcrossTokensIsNotReturned) {
  auto t = Load(TinyTokenizerJson());
  ASSERT_NE(t, nullptr);
  GenerationTextOptions options;
  options.stop_strings = {"lo w", "xyz"};
  GenerationText g(t.get(), options);
  std::string out;
  for (const int64_t id : std::vector<int64_t>{'a', 258 /* hell */, 'o', 260 /* Ġw */, 'q'}) {
    const GenerationText::Step s = g.Push(id);
    out += s.piece;
    if (s.stop != StopReason::kNone) break;
  }
  EXPECT_EQ(out, "ahel");
  EXPECT_EQ(g.stop_reason(), StopReason::kStopString);
  EXPECT_EQ(g.matched_stop_string(), "lo w");
  EXPECT_EQ(g.Push('z').piece, "");  // after a stop, nothing
}

TEST(GenerationText, HeldBackTextComesOutWhenItCannotStop) {
  auto t = Load(TinyTokenizerJson());
  ASSERT_NE(t, nullptr);
  GenerationTextOptions options;
  options.stop_strings = {"hex"};
  options.stop_token_ids = {7};
  GenerationText g(t.get(), options);
  EXPECT_EQ(g.Push(256).piece, "");     // "he" may start "hex"
  EXPECT_EQ(g.Push('y').piece, "hey");  // not any more
  EXPECT_EQ(g.Push(256).piece, "");
  const GenerationText::Step s = g.Push(7);  // the stop token: what was held is final
  EXPECT_EQ(s.piece, "he");
  EXPECT_EQ(s.stop, StopReason::kStopToken);
  EXPECT_EQ(g.text(), "heyhe");
}

TEST(GenerationText, StopStringsAreChecked) {
  EXPECT_TRUE(CheckStopStrings({"a", "\n\n"}, 4, 16).ok());
  EXPECT_EQ(CheckStopStrings({""}, 4, 16).message(), "generate.stop[0] is empty");
  EXPECT_EQ(CheckStopStrings({"a", "b\xFF"}, 4, 16).message(),
            "generate.stop[1] is not valid UTF-8 at byte 1");
  EXPECT_EQ(CheckStopStrings({"a", "b", "c"}, 2, 16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckStopStrings({std::string(17, 'a')}, 4, 16).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve::server::text
