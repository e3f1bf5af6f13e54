// Python methods of str, list and dict that chat templates call (`content.strip()`,
// `message.get('x')`, `ns.items.append(x)`, ...).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/text/jinja/builtins.h"

namespace attnserve::server::text::jinja {
namespace {

uint32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  unsigned char c = s[i];
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (s[i + k] & 0x3f);
  *len = n;
  return cp;
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Code points of s with their byte offsets.
struct CodePoints {
  std::vector<uint32_t> cps;
  std::vector<size_t> off;  // off.size() == cps.size() + 1
};
CodePoints Decode(std::string_view s) {
  CodePoints r;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    r.off.push_back(i);
    r.cps.push_back(DecodeAt(s, i, &n));
    i += n;
  }
  r.off.push_back(s.size());
  return r;
}

absl::StatusOr<Value> StrArg(const ValueList& args, size_t i, std::string_view method) {
  if (i >= args.size() || !args[i].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(method), "() needs a string argument"));
  }
  return args[i];
}

std::string AsciiCase(std::string s, bool upper) {
  for (char& c : s)
    c = upper ? std::toupper(static_cast<unsigned char>(c))
              : std::tolower(static_cast<unsigned char>(c));
  return s;
}

absl::StatusOr<Value> Split(Interpreter& in, const std::string& s, const ValueList& args) {
  int64_t maxsplit = args.size() > 1 && args[1].is_int() ? args[1].int_value() : -1;
  ValueList parts;
  if (args.empty() || args[0].is_none()) {
    CodePoints cp = Decode(s);
    size_t i = 0, n = cp.cps.size();
    while (true) {
      while (i < n && IsPySpace(cp.cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = n;
        while (e > i && IsPySpace(cp.cps[e - 1])) --e;
        parts.push_back(Value::String(s.substr(cp.off[i], cp.off[e] - cp.off[i])));
        break;
      }
      size_t j = i;
      while (j < n && !IsPySpace(cp.cps[j])) ++j;
      parts.push_back(Value::String(s.substr(cp.off[i], cp.off[j] - cp.off[i])));
      i = j;
    }
  } else {
    if (!args[0].is_string())
      return absl::InvalidArgumentError("split() separator must be a string");
    const std::string& sep = args[0].str();
    if (sep.empty()) return absl::InvalidArgumentError("empty separator");
    size_t pos = 0;
    while (true) {
      size_t f = s.find(sep, pos);
      if (f == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
        parts.push_back(Value::String(s.substr(pos)));
        break;
      }
      parts.push_back(Value::String(s.substr(pos, f - pos)));
      pos = f + sep.size();
    }
  }
  absl::Status st = in.ChargeList(static_cast<int64_t>(parts.size()));
  if (!st.ok()) return st;
  return Value::List(std::move(parts));
}

bool StartsOrEnds(const std::string& s, const Value& arg, bool starts) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return starts ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_string()) return one(arg.str());
  if (arg.is_list()) {
    for (const Value& v : arg.list()) {
      if (v.is_string() && one(v.str())) return true;
    }
  }
  return false;
}

}  // namespace

std::string StripChars(std::string_view s, const Value* chars, bool left, bool right) {
  CodePoints cp = Decode(s);
  std::vector<uint32_t> set;
  bool ws = chars == nullptr || !chars->is_string();
  if (!ws) set = Decode(chars->str()).cps;
  auto strip = [&](uint32_t c) {
    return ws ? IsPySpace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cp.cps.size();
  if (left) {
    while (b < e && strip(cp.cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cp.cps[e - 1])) --e;
  }
  return std::string(s.substr(cp.off[b], cp.off[e] - cp.off[b]));
}

void SliceIndices(int64_t n, const Value& start, const Value& stop, int64_t step, int64_t* s,
                  int64_t* e) {
  auto norm = [&](const Value& v, int64_t def, bool is_start) -> int64_t {
    if (v.is_undefined() || v.is_none()) return def;
    int64_t i = v.int_value();
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  if (step > 0) {
    *s = norm(start, 0, true);
    *e = norm(stop, n, false);
  } else {
    *s = norm(start, n - 1, true);
    *e = norm(stop, -1, false);
  }
}

bool IsMethod(const Value& obj, std::string_view name) {
  static const char* kStr[] = {"strip",      "lstrip",  "rstrip",  "split",   "startswith",
                               "endswith",   "upper",   "lower",   "title",   "capitalize",
                               "replace",    "find",    "rfind",   "count",   "join",
                               "splitlines", "isdigit", "isalpha", "isspace", "isalnum",
                               "isupper",    "islower", "format",  "index"};
  static const char* kList[] = {"append", "pop", "index", "count", "extend", "insert"};
  static const char* kDict[] = {"items", "keys", "values", "get"};
  if (obj.is_string()) {
    for (const char* m : kStr)
      if (name == m) return true;
  } else if (obj.is_list()) {
    for (const char* m : kList)
      if (name == m) return true;
  } else if (obj.is_dict() && !obj.is_namespace()) {
    for (const char* m : kDict)
      if (name == m) return true;
  }
  return false;
}

absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& obj, std::string_view name_view,
                                 ValueList& args, KwArgs& kwargs) {
  const std::string name(name_view);
  for (auto& [k, v] : kwargs) {
    if (k == "maxsplit" || k == "sep") {
      if (args.empty()) args.push_back(Value::None());
      if (k == "maxsplit") {
        args.resize(2);
        args[1] = v;
      } else {
        args[0] = v;
      }
    }
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = args.empty() ? nullptr : &args[0];
      return Value::String(StripChars(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split") return Split(in, s, args);
    if (name == "startswith" || name == "endswith") {
      if (args.empty())
        return absl::InvalidArgumentError(absl::StrCat(name, "() needs an argument"));
      return Value::Bool(StartsOrEnds(s, args[0], name == "startswith"));
    }
    if (name == "upper" || name == "lower") return Value::String(AsciiCase(s, name == "upper"));
    if (name == "capitalize") {
      std::string r = AsciiCase(s, false);
      if (!r.empty()) r[0] = std::toupper(static_cast<unsigned char>(r[0]));
      return Value::String(r);
    }
    if (name == "title") {
      std::string r = s;
      bool prev_cased = false;
      for (char& c : r) {
        bool alpha = std::isalpha(static_cast<unsigned char>(c));
        if (alpha)
          c = prev_cased ? std::tolower(static_cast<unsigned char>(c))
                         : std::toupper(static_cast<unsigned char>(c));
        prev_cased = alpha;
      }
      return Value::String(r);
    }
    if (name == "replace") {
      auto from = StrArg(args, 0, name);
      if (!from.ok()) return from.status();
      auto to = StrArg(args, 1, name);
      if (!to.ok()) return to.status();
      int64_t limit = args.size() > 2 && args[2].is_int() ? args[2].int_value() : -1;
      std::string out;
      const std::string& f = from->str();
      size_t pos = 0;
      int64_t done = 0;
      if (f.empty()) {
        return absl::InvalidArgumentError("replace() with an empty pattern is not supported");
      }
      while (limit < 0 || done < limit) {
        size_t p = s.find(f, pos);
        if (p == std::string::npos) break;
        out.append(s, pos, p - pos);
        out += to->str();
        pos = p + f.size();
        ++done;
        if (static_cast<int64_t>(out.size()) > in.limits().max_value_bytes) break;
      }
      out.append(s, pos, std::string::npos);
      absl::Status st = in.ChargeString(static_cast<int64_t>(out.size()));
      if (!st.ok()) return st;
      return Value::String(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "index") {
      auto sub = StrArg(args, 0, name);
      if (!sub.ok()) return sub.status();
      size_t p = name == "rfind" ? s.rfind(sub->str()) : s.find(sub->str());
      if (p == std::string::npos) {
        if (name == "index") return absl::InvalidArgumentError("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(Utf8Length(std::string_view(s).substr(0, p)));
    }
    if (name == "count") {
      auto sub = StrArg(args, 0, name);
      if (!sub.ok()) return sub.status();
      if (sub->str().empty()) return Value::Int(Utf8Length(s) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub->str()); p != std::string::npos;
           p = s.find(sub->str(), p + sub->str().size()))
        ++n;
      return Value::Int(n);
    }
    if (name == "join") {
      if (args.empty() || !args[0].is_list())
        return absl::InvalidArgumentError("join() needs a list");
      std::string out;
      for (size_t i = 0; i < args[0].list().size(); ++i) {
        const Value& v = args[0].list()[i];
        if (!v.is_string()) return absl::InvalidArgumentError("join() needs a list of strings");
        if (i) out += s;
        out += v.str();
        if (static_cast<int64_t>(out.size()) > in.limits().max_value_bytes) break;
      }
      absl::Status st = in.ChargeString(static_cast<int64_t>(out.size()));
      if (!st.ok()) return st;
      return Value::String(std::move(out));
    }
    if (name == "splitlines") {
      ValueList lines;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t e = s.find_first_of("\r\n", pos);
        if (e == std::string::npos) {
          lines.push_back(Value::String(s.substr(pos)));
          break;
        }
        lines.push_back(Value::String(s.substr(pos, e - pos)));
        pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
      }
      return Value::List(std::move(lines));
    }
    if (name == "format") {
      std::string out;
      size_t next = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
          out += '{';
          ++i;
        } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
          out += '}';
          ++i;
        } else if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '}') {
          if (next >= args.size())
            return absl::InvalidArgumentError("format(): not enough arguments");
          out += args[next++].ToString();
          ++i;
        } else if (s[i] == '{') {
          return absl::InvalidArgumentError("format(): only '{}' fields are supported");
        } else {
          out += s[i];
        }
      }
      absl::Status st = in.ChargeString(static_cast<int64_t>(out.size()));
      if (!st.ok()) return st;
      return Value::String(std::move(out));
    }
    // is* predicates (ASCII classes; non-ASCII letters count as alpha).
    if (s.empty()) return Value::Bool(false);
    bool all = true, cased = false, any_upper = false, any_lower = false;
    for (unsigned char c : s) {
      if (name == "isdigit") all = all && std::isdigit(c);
      if (name == "isalpha") all = all && (std::isalpha(c) || c >= 0x80);
      if (name == "isalnum") all = all && (std::isalnum(c) || c >= 0x80);
      if (name == "isspace") all = all && std::isspace(c);
      if (std::isupper(c)) any_upper = cased = true;
      if (std::islower(c)) any_lower = cased = true;
    }
    if (name == "isupper") return Value::Bool(cased && !any_lower);
    if (name == "islower") return Value::Bool(cased && !any_upper);
    return Value::Bool(all);
  }
  if (obj.is_list()) {
    ValueList& l = obj.list();
    if (name == "append" || name == "extend" || name == "insert") {
      if (args.empty())
        return absl::InvalidArgumentError(absl::StrCat(name, "() needs an argument"));
      int64_t add = name == "extend" && args[0].is_list() ? args[0].list().size() : 1;
      absl::Status st = in.ChargeList(static_cast<int64_t>(l.size()) + add);
      if (!st.ok()) return st;
      if (name == "append") {
        l.push_back(args[0]);
      } else if (name == "extend") {
        if (!args[0].is_list()) return absl::InvalidArgumentError("extend() needs a list");
        ValueList copy = args[0].list();
        l.insert(l.end(), copy.begin(), copy.end());
      } else {
        if (args.size() < 2 || !args[0].is_int())
          return absl::InvalidArgumentError("insert(index, x)");
        int64_t i = args[0].int_value(), n = static_cast<int64_t>(l.size());
        if (i < 0) i = std::max<int64_t>(0, i + n);
        l.insert(l.begin() + std::min(i, n), args[1]);
      }
      return Value::None();
    }
    if (name == "pop") {
      int64_t n = static_cast<int64_t>(l.size());
      int64_t i = args.empty() ? n - 1 : args[0].int_value();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return absl::InvalidArgumentError("pop index out of range");
      Value v = l[i];
      l.erase(l.begin() + i);
      return v;
    }
    if (name == "index" || name == "count") {
      if (args.empty())
        return absl::InvalidArgumentError(absl::StrCat(name, "() needs an argument"));
      int64_t count = 0;
      for (size_t i = 0; i < l.size(); ++i) {
        if (l[i].Equals(args[0])) {
          if (name == "index") return Value::Int(static_cast<int64_t>(i));
          ++count;
        }
      }
      if (name == "index") return absl::InvalidArgumentError("value is not in list");
      return Value::Int(count);
    }
  }
  if (obj.is_dict()) {
    ValueDict& d = obj.dict();
    if (name == "get") {
      if (args.empty()) return absl::InvalidArgumentError("get() needs a key");
      const Value* v = d.Find(args[0]);
      if (v != nullptr) return *v;
      return args.size() > 1 ? args[1] : Value::None();
    }
    ValueList out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::Tuple({k, v}));
      if (name == "keys") out.push_back(k);
      if (name == "values") out.push_back(v);
    }
    return Value::List(std::move(out));
  }
  return absl::InvalidArgumentError(absl::StrCat("no method '", name, "'"));
}

}  // namespace attnserve::server::text::jinja
