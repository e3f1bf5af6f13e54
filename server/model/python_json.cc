#include "server/model/python_json.h"

namespace attnserve::model {

std::string PythonJsonToJson(absl::string_view json) {
  std::string out;
  out.reserve(json.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < json.size()) {
        out.push_back(json[++i]);  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out.push_back(c);
      continue;
    }
    // A token starts here only after a separator: not inside a number or a name.
    const bool at_token = out.empty() || out.back() == '[' || out.back() == ',' ||
                          out.back() == ':' || out.back() == ' ' || out.back() == '\n' ||
                          out.back() == '\t' || out.back() == '\r';
    bool replaced = false;
    if (at_token) {
      for (absl::string_view token : {"-Infinity", "Infinity", "NaN"}) {
        if (json.substr(i, token.size()) != token) continue;
        const size_t end = i + token.size();
        const bool ends = end == json.size() || json[end] == ',' || json[end] == ']' ||
                          json[end] == '}' || json[end] == ' ' || json[end] == '\n' ||
                          json[end] == '\t' || json[end] == '\r';
        if (!ends) continue;
        out.push_back('"');
        out.append(token.data(), token.size());
        out.push_back('"');
        i = end - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(c);
  }
  return out;
}

}  // namespace attnserve::model
