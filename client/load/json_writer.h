// JsonWriter: builds one JSON document into a string, compactly or indented. The caller
// nests Begin/End calls correctly; keys are only given inside objects. Non-finite numbers are
// written as null (JSON has no NaN or infinity).
#ifndef ATTNSERVE_CLIENT_LOAD_JSON_WRITER_H_
#define ATTNSERVE_CLIENT_LOAD_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace attnserve::load {

class JsonWriter {
 public:
  explicit JsonWriter(bool indent = true) : indent_(indent) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value (objects only).
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& str() const { return out_; }

  // `s` as a JSON string literal, quotes included.
  static std::string Quote(absl::string_view s);

 private:
  void BeforeValue();
  void Newline();
  void Close(char bracket);

  bool indent_;
  std::string out_;
  // One entry per open container: whether it holds a value yet.
  std::vector<bool> has_value_;
  bool after_key_ = false;
};

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_JSON_WRITER_H_
