// Python json.dumps over values, as Hugging Face's tojson filter calls it.
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/text/jinja/builtins.h"

namespace attnserve::server::text::jinja {
namespace {

void AppendEscaped(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    switch (c) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    char buf[16];
    if (c < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    } else if (c < 0x80 || !ensure_ascii) {
      *out += static_cast<char>(c);
    } else {
      // Decode one UTF-8 sequence and write \uXXXX (surrogate pairs above the BMP).
      uint32_t cp = c;
      size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
      cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : len == 4 ? c & 0x07 : 0xfffd;
      for (size_t k = 1; k < len && i + 1 < s.size(); ++k) cp = (cp << 6) | (s[++i] & 0x3f);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                      0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
    }
  }
  *out += '"';
}

class JsonWriter {
 public:
  JsonWriter(Interpreter& in, bool ensure_ascii, const std::string& indent, bool use_indent,
             bool sort_keys)
      : in_(in), ascii_(ensure_ascii), indent_(indent), use_indent_(use_indent), sort_(sort_keys) {}

  absl::Status Write(const Value& v, int level) {
    absl::Status st = in_.Step();
    if (!st.ok()) return st;
    if (level > in_.limits().max_depth * 4) {
      return absl::ResourceExhaustedError("chat template: tojson value nested too deeply");
    }
    if (static_cast<int64_t>(out.size()) > in_.limits().max_value_bytes) {
      return in_.ChargeString(static_cast<int64_t>(out.size()));
    }
    switch (v.kind()) {
      case Kind::kNone:
        out += "null";
        return absl::OkStatus();
      case Kind::kBool:
        out += v.bool_value() ? "true" : "false";
        return absl::OkStatus();
      case Kind::kInt:
        out += std::to_string(v.int_value());
        return absl::OkStatus();
      case Kind::kFloat: {
        double f = v.number_value();
        out += std::isnan(f)   ? "NaN"
               : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity")
                               : FormatFloat(f);
        return absl::OkStatus();
      }
      case Kind::kString:
        AppendEscaped(v.str(), ascii_, &out);
        return absl::OkStatus();
      case Kind::kList: {
        if (v.list().empty()) {
          out += "[]";
          return absl::OkStatus();
        }
        out += '[';
        for (size_t i = 0; i < v.list().size(); ++i) {
          if (i) out += use_indent_ ? "," : ", ";
          Newline(level + 1);
          st = Write(v.list()[i], level + 1);
          if (!st.ok()) return st;
        }
        Newline(level);
        out += ']';
        return absl::OkStatus();
      }
      case Kind::kDict: {
        if (v.is_namespace()) break;
        if (v.dict().items.empty()) {
          out += "{}";
          return absl::OkStatus();
        }
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict().items) items.push_back(&kv);
        if (sort_) {
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
            return a->first.ToString() < b->first.ToString();
          });
        }
        out += '{';
        bool first = true;
        for (const auto* kv : items) {
          if (!first) out += use_indent_ ? "," : ", ";
          first = false;
          Newline(level + 1);
          const Value& k = kv->first;
          if (k.is_string()) {
            AppendEscaped(k.str(), ascii_, &out);
          } else if (k.is_none()) {
            out += "\"null\"";
          } else if (k.is_bool()) {
            out += k.bool_value() ? "\"true\"" : "\"false\"";
          } else if (k.is_int() || k.is_float()) {
            absl::StrAppend(&out, "\"", k.ToString(), "\"");
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
          }
          out += ": ";
          st = Write(kv->second, level + 1);
          if (!st.ok()) return st;
        }
        Newline(level);
        out += '}';
        return absl::OkStatus();
      }
      default:
        break;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }

  std::string out;

 private:
  void Newline(int level) {
    if (!use_indent_) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += indent_;
  }

  Interpreter& in_;
  bool ascii_;
  std::string indent_;
  bool use_indent_;
  bool sort_;
};

}  // namespace

absl::StatusOr<std::string> ToJson(Interpreter& in, const Value& v, bool ensure_ascii,
                                   const std::string& indent, bool use_indent, bool sort_keys) {
  JsonWriter w(in, ensure_ascii, indent, use_indent, sort_keys);
  absl::Status st = w.Write(v, 0);
  if (!st.ok()) return st;
  st = in.ChargeString(static_cast<int64_t>(w.out.size()));
  if (!st.ok()) return st;
  return std::move(w.out);
}

}  // namespace attnserve::server::text::jinja
