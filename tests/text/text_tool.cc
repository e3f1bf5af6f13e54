// attnserve_text_tool: the tokenizer library on the command line, for the golden tests
// (tests/text/golden_test.py) and the encode benchmark (bench/tokenizer_bench.py).
//
//   attnserve_text_tool encode TOKENIZER_JSON CORPUS_JSONL   one JSON line per input line:
//       {"ids": [...], "decoded": "..."} (decoded: Decode(ids) with special tokens kept), or
//       {"error": "..."}; each input line is a JSON string.
//   attnserve_text_tool bench TOKENIZER_JSON TEXT_FILE REPEATS
//       encodes the file's bytes REPEATS times on one thread; prints the fastest pass:
//       {"bytes": N, "tokens": T, "seconds": S, "load_seconds": L, "memory_bytes": M,
//        "load_rss_bytes": R} (M: the tables' estimate; R: resident memory the load added)
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/text/tokenizer_json.h"

namespace {

using attnserve::server::text::LoadTokenizerFile;
using attnserve::server::text::Tokenizer;

std::string JsonString(const std::string& s) {
  google::protobuf::Value v;
  v.set_string_value(s);
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

int Encode(const Tokenizer& tokenizer, const char* corpus) {
  std::ifstream in(corpus);
  std::string line;
  while (std::getline(in, line)) {
    google::protobuf::Value v;
    if (!google::protobuf::util::JsonStringToMessage(line, &v).ok() || !v.has_string_value()) {
      std::cerr << "corpus line is not a JSON string: " << line.substr(0, 80) << "\n";
      return 2;
    }
    auto ids = tokenizer.Encode(v.string_value(), /*add_special_tokens=*/true);
    if (!ids.ok()) {
      std::cout << "{\"error\": " << JsonString(std::string(ids.status().message())) << "}\n";
      continue;
    }
    std::cout << "{\"ids\": [" << absl::StrJoin(*ids, ",") << "], \"decoded\": "
              << JsonString(tokenizer.Decode(*ids, /*skip_special_tokens=*/false)) << "}\n";
  }
  return 0;
}

// Resident memory of this process (VmRSS), bytes.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

int Bench(const Tokenizer& tokenizer, const char* file, int repeats, double load_seconds,
          int64_t load_rss_bytes) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  int64_t tokens = 0;
  double seconds = 1e30;  // the fastest pass
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto ids = tokenizer.Encode(text, true);
    if (!ids.ok()) {
      std::cerr << ids.status() << "\n";
      return 1;
    }
    seconds = std::min(
        seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    tokens = static_cast<int64_t>(ids->size());
  }
  std::cout << "{\"bytes\": " << text.size() << ", \"tokens\": " << tokens
            << ", \"seconds\": " << seconds << ", \"load_seconds\": " << load_seconds
            << ", \"memory_bytes\": " << tokenizer.MemoryBytes()
            << ", \"load_rss_bytes\": " << load_rss_bytes << "}\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: attnserve_text_tool encode TOKENIZER_JSON CORPUS_JSONL\n"
      "       attnserve_text_tool bench TOKENIZER_JSON TEXT_FILE REPEATS\n";
  if (argc < 4) {
    std::cerr << usage;
    return 2;
  }
  const std::string mode = argv[1];
  const int64_t rss_before = ResidentBytes();
  const auto start = std::chrono::steady_clock::now();
  auto tokenizer = LoadTokenizerFile(argv[2]);
  const int64_t load_rss = ResidentBytes() - rss_before;
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 1;
  }
  if (mode == "encode") return Encode(**tokenizer, argv[3]);
  if (mode == "bench" && argc == 5)
    return Bench(**tokenizer, argv[3], std::stoi(argv[4]), load_seconds, load_rss);
  std::cerr << usage;
  return 2;
}
