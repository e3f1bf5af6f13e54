#include "client/cli/text_input.h"

#include <iostream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/cli/flags.h"
#include "client/cli/token_reader.h"

namespace attnserve::cli {
namespace {

bool TokenFlagsGiven() {
  return !absl::GetFlag(FLAGS_tokens).empty() || absl::GetFlag(FLAGS_random_tokens) > 0 ||
         absl::GetFlag(FLAGS_tokens_file) != "-";
}

bool CheckExclusive(Printer& out, const std::string& sub) {
  if (!absl::GetFlag(FLAGS_text).empty() && !absl::GetFlag(FLAGS_text_file).empty()) {
    out.Problem(sub, "give --text or --text_file, not both");
    return false;
  }
  if (TokenFlagsGiven()) {
    out.Problem(sub,
                "give text (--text, --text_file) or token ids (--tokens, --tokens_file, "
                "--random_tokens), not both");
    return false;
  }
  return true;
}

std::unique_ptr<std::istream> OpenSource(Printer& out, const std::string& sub, std::istream** in) {
  if (!absl::GetFlag(FLAGS_text).empty()) {
    auto s = std::make_unique<std::istringstream>(absl::GetFlag(FLAGS_text));
    *in = s.get();
    return s;
  }
  const std::string path = absl::GetFlag(FLAGS_text_file);
  if (path == "-") {
    *in = &std::cin;
    return nullptr;
  }
  auto f = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*f) {
    out.Problem(sub, absl::StrCat("cannot read ", path));
    *in = nullptr;
    return nullptr;
  }
  *in = f.get();
  return f;
}

}  // namespace

bool TextGiven() {
  return !absl::GetFlag(FLAGS_text).empty() || !absl::GetFlag(FLAGS_text_file).empty();
}

bool ReadText(Printer& out, const std::string& sub, std::string* text) {
  if (!CheckExclusive(out, sub)) return false;
  std::istream* in = nullptr;
  std::unique_ptr<std::istream> owned = OpenSource(out, sub, &in);
  if (in == nullptr) return false;
  std::stringstream buffer;
  buffer << in->rdbuf();
  *text = buffer.str();
  if (text->empty()) {
    out.Problem(sub, "the text is empty");
    return false;
  }
  return true;
}

bool TextLines::Open(Printer& out, const std::string& sub) {
  if (!CheckExclusive(out, sub)) return false;
  owned_ = OpenSource(out, sub, &in_);
  return in_ != nullptr;
}

bool TextLines::Next(std::string* line) {
  if (!std::getline(*in_, *line)) return false;
  if (!in_->eof()) line->push_back('\n');
  return !line->empty();
}

bool StopsFromFlags(Printer& out, const std::string& sub, v1::GenerateSpec* spec) {
  for (const std::string& s : absl::GetFlag(FLAGS_stop)) {
    std::string unescaped, error;
    if (!absl::CUnescape(s, &unescaped, &error)) {
      out.Problem(sub, absl::StrCat("--stop: ", error));
      return false;
    }
    spec->add_stop(unescaped);
  }
  absl::StatusOr<std::vector<int64_t>> ids = ParseTokens(absl::GetFlag(FLAGS_stop_token_ids));
  if (!ids.ok()) {
    out.Problem(sub, absl::StrCat("--stop_token_ids: ", ids.status().message()));
    return false;
  }
  spec->mutable_stop_token_ids()->Add(ids->begin(), ids->end());
  spec->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  return true;
}

}  // namespace attnserve::cli
