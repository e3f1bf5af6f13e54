// A prompt as text (--text, --text_file) instead of token ids, and the text flags of generate
// (--stop, --stop_token_ids, --ignore_eos). The server tokenizes with the model's tokenizer.
#ifndef ATTNSERVE_CLIENT_CLI_TEXT_INPUT_H_
#define ATTNSERVE_CLIENT_CLI_TEXT_INPUT_H_

#include <fstream>
#include <istream>
#include <memory>
#include <string>

#include "attnserve/v1/inference.pb.h"
#include "client/cli/printer.h"

namespace attnserve::cli {

// Whether --text or --text_file is given.
bool TextGiven();

// The whole text of --text or --text_file; false (after printing why) when token flags are
// given too or the file cannot be read.
bool ReadText(Printer& out, const std::string& sub, std::string* text);

// --text or --text_file line by line (each line with its '\n'), for stream's appends.
class TextLines {
 public:
  bool Open(Printer& out, const std::string& sub);
  // The next line; false at the end.
  bool Next(std::string* line);

 private:
  std::unique_ptr<std::istream> owned_;
  std::istream* in_ = nullptr;
};

// --stop, --stop_token_ids and --ignore_eos into `spec`; false (after printing why) for a bad
// id or escape.
bool StopsFromFlags(Printer& out, const std::string& sub, v1::GenerateSpec* spec);

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_TEXT_INPUT_H_
