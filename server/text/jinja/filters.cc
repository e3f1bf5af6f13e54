// Jinja filters (`x | trim`, `messages | selectattr('role', 'equalto', 'user') | list`, ...).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/markup_escape.h"
#include "kernels/common/status_macros.h"
#include "server/text/jinja/builtins.h"

namespace attnserve::server::text::jinja {
namespace {

// Positional-or-keyword argument `i` named `name` of a filter, or `def`.
Value Arg(const ValueList& args, const KwArgs& kwargs, size_t i, std::string_view name,
          Value def = Value()) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return i < args.size() ? args[i] : def;
}

std::string Lower(std::string s) {
  for (char& c : s) c = std::tolower(static_cast<unsigned char>(c));
  return s;
}
std::string Upper(std::string s) {
  for (char& c : s) c = std::toupper(static_cast<unsigned char>(c));
  return s;
}

// `obj.a.b` for map/selectattr/sort attribute= (dotted paths and integer parts).
Value AttrPath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const Value* next = nullptr;
    if (cur.is_dict()) next = cur.dict().Find(part);
    if (next == nullptr && cur.is_list() && !part.empty() &&
        std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t i = std::strtoul(part.c_str(), nullptr, 10);
      if (i < cur.list().size()) next = &cur.list()[i];
    }
    if (next == nullptr) return Value::Undefined(absl::StrCat("no attribute '", part, "'"));
    cur = *next;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

absl::StatusOr<ValueList> Items(const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return ValueList{};
  if (v.is_dict() && !v.is_namespace()) {
    ValueList keys;
    for (const auto& kv : v.dict().items) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    ValueList chars;
    std::vector<size_t> off = Utf8Offsets(v.str());
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      chars.push_back(Value::String(v.str().substr(off[i], off[i + 1] - off[i])));
    }
    return chars;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
}

// Sort key comparison (case-insensitive strings unless case_sensitive).
absl::StatusOr<int> CompareKeys(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    return Value::String(Lower(a.str())).Compare(Value::String(Lower(b.str())));
  }
  return a.Compare(b);
}

absl::Status SortValues(ValueList* items, bool reverse, bool case_sensitive,
                        const std::string& attribute) {
  absl::Status err;
  auto key = [&](const Value& v) { return attribute.empty() ? v : AttrPath(v, attribute); };
  std::stable_sort(items->begin(), items->end(), [&](const Value& a, const Value& b) {
    absl::StatusOr<int> c = CompareKeys(key(a), key(b), case_sensitive);
    if (!c.ok()) {
      err = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  return err;
}

absl::StatusOr<Value> ToInt(const Value& v, const Value& def) {
  if (v.is_int() || v.is_bool()) return Value::Int(v.int_value());
  if (v.is_float()) {
    double f = v.number_value();
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return def;
    return Value::Int(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    std::string s = StripChars(v.str(), nullptr, true, true);
    std::string digits;
    for (char c : s)
      if (c != '_') digits += c;
    if (digits.empty()) return def;
    errno = 0;
    char* end = nullptr;
    long long i = std::strtoll(digits.c_str(), &end, 10);
    if (*end == '\0' && errno == 0) return Value::Int(i);
    double f = std::strtod(digits.c_str(), &end);
    if (*end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18)
      return Value::Int(static_cast<int64_t>(f));
  }
  return def;
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(Interpreter& in, std::string_view name_view, const Value& v,
                                  ValueList& args, KwArgs& kwargs) {
  const std::string name(name_view);
  auto str = [&]() { return v.ToString(); };
  if (name == "trim") {
    Value chars = Arg(args, kwargs, 0, "chars");
    return Value::String(StripChars(str(), chars.is_string() ? &chars : nullptr, true, true));
  }
  if (name == "upper") return Value::String(Upper(str()));
  if (name == "lower") return Value::String(Lower(str()));
  if (name == "capitalize") {
    std::string s = Lower(str());
    if (!s.empty()) s[0] = std::toupper(static_cast<unsigned char>(s[0]));
    return Value::String(s);
  }
  if (name == "title") {
    std::string s = str();
    bool word_start = true;
    for (char& c : s) {
      unsigned char u = c;
      if (std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
        word_start = true;
      } else {
        c = word_start ? std::toupper(u) : std::tolower(u);
        word_start = false;
      }
    }
    return Value::String(s);
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(Utf8Length(v.str()));
    if (v.is_list()) return Value::Int(static_cast<int64_t>(v.list().size()));
    if (v.is_dict()) return Value::Int(static_cast<int64_t>(v.dict().items.size()));
    if (v.is_undefined()) return Value::Int(0);
    return absl::InvalidArgumentError(
        absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    if (items.empty())
      return Value::Undefined(absl::StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    Value def = Arg(args, kwargs, 0, "default_value", Value::String(""));
    bool boolean = Arg(args, kwargs, 1, "boolean", Value::Bool(false)).Truthy();
    if (v.is_undefined() || (boolean && !v.Truthy())) return def;
    return v;
  }
  if (name == "join") {
    Value sep = Arg(args, kwargs, 0, "d", Value::String(""));
    Value attr = Arg(args, kwargs, 1, "attribute");
    ASSIGN_OR_RETURN(auto items, Items(v));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep.ToString();
      out += (attr.is_string() ? AttrPath(items[i], attr.str()) : items[i]).ToString();
      if (static_cast<int64_t>(out.size()) > in.limits().max_value_bytes) break;
    }
    absl::Status st = in.ChargeString(static_cast<int64_t>(out.size()));
    if (!st.ok()) return st;
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    ValueList margs = {Value::String(Arg(args, kwargs, 0, "old").ToString()),
                       Value::String(Arg(args, kwargs, 1, "new").ToString())};
    Value count = Arg(args, kwargs, 2, "count");
    if (count.is_int()) margs.push_back(count);
    KwArgs none;
    return CallMethod(in, Value::String(str()), "replace", margs, none);
  }
  if (name == "tojson") {
    Value indent = Arg(args, kwargs, 0, "indent", Value::None());
    bool ascii = Arg(args, kwargs, 1, "ensure_ascii", Value::Bool(false)).Truthy();
    bool sort_keys = Arg(args, kwargs, 3, "sort_keys", Value::Bool(false)).Truthy();
    std::string ind;
    bool use_indent = !indent.is_none() && !indent.is_undefined();
    if (indent.is_int()) {
      if (indent.int_value() > 64) return absl::InvalidArgumentError("tojson indent too large");
      ind = std::string(std::max<int64_t>(0, indent.int_value()), ' ');
    } else if (indent.is_string()) {
      if (indent.str().size() > 64) return absl::InvalidArgumentError("tojson indent too large");
      ind = indent.str();
    }
    ASSIGN_OR_RETURN(auto s, ToJson(in, v, ascii, ind, use_indent, sort_keys));
    return Value::String(std::move(s));
  }
  if (name == "safe" || name == "string") {
    return v.is_string() && name == "safe" ? v : Value::String(str());
  }
  if (name == "escape" || name == "e") return Value::String(EscapeMarkup(str()));
  if (name == "int") return ToInt(v, Arg(args, kwargs, 0, "default", Value::Int(0)));
  if (name == "float") {
    Value def = Arg(args, kwargs, 0, "default", Value::Float(0));
    if (v.is_number()) return Value::Float(v.number_value());
    if (v.is_string()) {
      std::string s = StripChars(v.str(), nullptr, true, true);
      char* end = nullptr;
      double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0') return Value::Float(f);
    }
    return def;
  }
  if (name == "abs") {
    if (v.is_int() || v.is_bool()) {
      if (v.int_value() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
      return Value::Int(std::llabs(v.int_value()));
    }
    if (v.is_float()) return Value::Float(std::fabs(v.number_value()));
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "round") {
    Value prec = Arg(args, kwargs, 0, "precision", Value::Int(0));
    std::string method = Arg(args, kwargs, 1, "method", Value::String("common")).ToString();
    if (!v.is_number()) return absl::InvalidArgumentError("round needs a number");
    if ((v.is_int() || v.is_bool()) && method == "common") return Value::Int(v.int_value());
    double scale = std::pow(10.0, static_cast<double>(prec.int_value()));
    double x = v.number_value() * scale;
    double r = method == "floor"  ? std::floor(x)
               : method == "ceil" ? std::ceil(x)
                                  : std::nearbyint(x);
    return Value::Float(r / scale);
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    return Value::List(std::move(items));
  }
  if (name == "items") {
    ValueList out;
    if (v.is_dict()) {
      for (const auto& [k, x] : v.dict().items) out.push_back(Value::Tuple({k, x}));
    } else if (!v.is_undefined()) {
      return absl::InvalidArgumentError("items filter needs a mapping");
    }
    return Value::List(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return absl::InvalidArgumentError("dictsort needs a mapping");
    bool cs = Arg(args, kwargs, 0, "case_sensitive", Value::Bool(false)).Truthy();
    bool by_value = Arg(args, kwargs, 1, "by", Value::String("key")).ToString() == "value";
    bool reverse = Arg(args, kwargs, 2, "reverse", Value::Bool(false)).Truthy();
    ValueList out;
    for (const auto& [k, x] : v.dict().items) out.push_back(Value::Tuple({k, x}));
    absl::Status st = SortValues(&out, reverse, cs, by_value ? "1" : "0");
    if (!st.ok()) return st;
    return Value::List(std::move(out));
  }
  if (name == "sort") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    bool reverse = Arg(args, kwargs, 0, "reverse", Value::Bool(false)).Truthy();
    bool cs = Arg(args, kwargs, 1, "case_sensitive", Value::Bool(false)).Truthy();
    Value attr = Arg(args, kwargs, 2, "attribute");
    absl::Status st = in.Step(static_cast<int64_t>(items.size()));
    if (!st.ok()) return st;
    st = SortValues(&items, reverse, cs, attr.is_string() ? attr.str() : "");
    if (!st.ok()) return st;
    return Value::List(std::move(items));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<size_t> off = Utf8Offsets(v.str());
      std::string out;
      for (size_t i = off.size() - 1; i > 0; --i)
        out.append(v.str(), off[i - 1], off[i] - off[i - 1]);
      return Value::String(std::move(out));
    }
    ASSIGN_OR_RETURN(auto items, Items(v));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    bool cs = Arg(args, kwargs, 0, "case_sensitive", Value::Bool(false)).Truthy();
    Value attr = Arg(args, kwargs, 1, "attribute");
    ValueList out, seen;
    absl::Status st = in.Step(static_cast<int64_t>(items.size() * items.size() / 64));
    if (!st.ok()) return st;
    for (const Value& x : items) {
      Value key = attr.is_string() ? AttrPath(x, attr.str()) : x;
      if (!cs && key.is_string()) key = Value::String(Lower(key.str()));
      bool dup = false;
      for (const Value& s : seen) dup = dup || s.Equals(key);
      if (!dup) {
        seen.push_back(key);
        out.push_back(x);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "sum" || name == "min" || name == "max") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    Value attr = Arg(args, kwargs, name == "sum" ? 0 : 1, "attribute");
    if (name == "sum") {
      Value total = Arg(args, kwargs, 1, "start", Value::Int(0));
      bool is_int = total.is_int() || total.is_bool();
      int64_t itotal = total.int_value();
      double ftotal = total.number_value();
      for (const Value& x0 : items) {
        Value x = attr.is_string() ? AttrPath(x0, attr.str()) : x0;
        if (!x.is_number()) return absl::InvalidArgumentError("sum needs numbers");
        if (is_int && (x.is_int() || x.is_bool())) {
          if (__builtin_add_overflow(itotal, x.int_value(), &itotal)) {
            return absl::InvalidArgumentError("integer overflow");
          }
          ftotal = static_cast<double>(itotal);
        } else {
          if (is_int) ftotal = static_cast<double>(itotal);
          is_int = false;
          ftotal += x.number_value();
        }
      }
      return is_int ? Value::Int(itotal) : Value::Float(ftotal);
    }
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    bool cs = Arg(args, kwargs, 0, "case_sensitive", Value::Bool(false)).Truthy();
    Value best = items[0];
    for (const Value& x : items) {
      Value a = attr.is_string() ? AttrPath(x, attr.str()) : x;
      Value b = attr.is_string() ? AttrPath(best, attr.str()) : best;
      ASSIGN_OR_RETURN(auto c, CompareKeys(a, b, cs));
      if ((name == "min" && c < 0) || (name == "max" && c > 0)) best = x;
    }
    return best;
  }
  if (name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
      name == "rejectattr") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    ValueList out;
    if (name == "map") {
      Value attr = Arg(args, kwargs, 99, "attribute");
      if (attr.is_string()) {
        Value def = Arg(args, kwargs, 99, "default");
        for (const Value& x : items) {
          Value y = AttrPath(x, attr.str());
          out.push_back(y.is_undefined() && !def.is_undefined() ? def : y);
        }
        return Value::List(std::move(out));
      }
      if (args.empty() || !args[0].is_string())
        return absl::InvalidArgumentError("map needs a filter name or attribute=");
      std::string filter = args[0].str();
      ValueList rest(args.begin() + 1, args.end());
      for (const Value& x : items) {
        absl::Status st = in.Step();
        if (!st.ok()) return st;
        ValueList a = rest;
        KwArgs k = kwargs;
        ASSIGN_OR_RETURN(auto y, ApplyFilter(in, filter, x, a, k));
        out.push_back(std::move(y));
      }
      return Value::List(std::move(out));
    }
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool keep_when = name == "select" || name == "selectattr";
    size_t test_pos = by_attr ? 1 : 0;
    if (by_attr && (args.empty() || !args[0].is_string())) {
      return absl::InvalidArgumentError(absl::StrCat(name, " needs an attribute name"));
    }
    for (const Value& x : items) {
      absl::Status st = in.Step();
      if (!st.ok()) return st;
      Value subject = by_attr ? AttrPath(x, args[0].str()) : x;
      bool r;
      if (args.size() <= test_pos) {
        r = subject.Truthy();
      } else {
        ValueList targs(args.begin() + test_pos + 1, args.end());
        ASSIGN_OR_RETURN(auto t, ApplyTest(in, args[test_pos].ToString(), subject, targs));
        r = t;
      }
      if (r == keep_when) out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "batch") {
    ASSIGN_OR_RETURN(auto items, Items(v));
    Value n = Arg(args, kwargs, 0, "linecount");
    Value fill = Arg(args, kwargs, 1, "fill_with", Value::None());
    if (!n.is_int() || n.int_value() <= 0)
      return absl::InvalidArgumentError("batch needs a positive count");
    ValueList out, cur;
    for (const Value& x : items) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == n.int_value()) {
        out.push_back(Value::List(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (!fill.is_none()) {
        while (static_cast<int64_t>(cur.size()) < n.int_value()) cur.push_back(fill);
      }
      out.push_back(Value::List(std::move(cur)));
    }
    return Value::List(std::move(out));
  }
  if (name == "indent") {
    Value width = Arg(args, kwargs, 0, "width", Value::Int(4));
    bool first = Arg(args, kwargs, 1, "first", Value::Bool(false)).Truthy();
    bool blank = Arg(args, kwargs, 2, "blank", Value::Bool(false)).Truthy();
    std::string ind = width.is_string()
                          ? width.str()
                          : std::string(std::clamp<int64_t>(width.int_value(), 0, 256), ' ');
    ValueList none;
    KwArgs nokw;
    ASSIGN_OR_RETURN(auto lines,
                     CallMethod(in, Value::String(str() + "\n"), "splitlines", none, nokw));
    std::string out;
    for (size_t i = 0; i < lines.list().size(); ++i) {
      const std::string& line = lines.list()[i].str();
      if (i) out += "\n";
      if (i && (blank || !line.empty())) out += ind;
      out += line;
      if (static_cast<int64_t>(out.size()) > in.limits().max_value_bytes) break;
    }
    if (first) out = ind + out;
    absl::Status st = in.ChargeString(static_cast<int64_t>(out.size()));
    if (!st.ok()) return st;
    return Value::String(std::move(out));
  }
  if (name == "center") {
    int64_t width =
        std::min<int64_t>(Arg(args, kwargs, 0, "width", Value::Int(80)).int_value(), 4096);
    std::string s = str();
    int64_t len = Utf8Length(s);
    if (width <= len) return Value::String(s);
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    return Value::String(std::string(left, ' ') + s + std::string(pad - left, ' '));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (unsigned char c : str()) {
      bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::Int(n);
  }
  if (name == "attr") {
    Value a = Arg(args, kwargs, 0, "name");
    if (v.is_dict() && a.is_string()) {
      if (const Value* x = v.dict().Find(a.str())) return *x;
    }
    return Value::Undefined(absl::StrCat("no attribute ", a.Repr()));
  }
  return absl::InvalidArgumentError(absl::StrCat("no filter named '", name, "'"));
}

}  // namespace attnserve::server::text::jinja
