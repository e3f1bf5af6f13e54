#include "server/text/jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace attnserve::server::text::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.l_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::Dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.d_ = std::make_shared<ValueDict>();
  return v;
}
Value Value::Namespace() {
  Value v = Dict();
  v.namespace_ = true;
  return v;
}
Value Value::Function(std::string name,
                      std::function<absl::StatusOr<Value>(Interpreter&, ValueList&, KwArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.c_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u))
                                                  : Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Dict();
      d.dict().items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.dict().items.emplace_back(String(it.key()), FromJson(it.value()));
      }
      return d;
    }
    case nlohmann::ordered_json::value_t::binary:
      return None();
  }
  return None();
}

double Value::number_value() const {
  switch (kind_) {
    case Kind::kFloat:
      return f_;
    case Kind::kInt:
      return static_cast<double>(i_);
    case Kind::kBool:
      return b_ ? 1 : 0;
    default:
      return 0;
  }
}

const void* Value::identity() const {
  if (l_) return l_.get();
  if (d_) return d_.get();
  if (c_) return c_.get();
  return nullptr;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !l_->empty();
    case Kind::kDict:
      return namespace_ || !d_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string FormatFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  // buf is d.ddde[+-]XX with `precision` significant digits.
  std::string s(buf);
  size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  int exponent = std::atoi(s.c_str() + e + 1);
  bool negative = mantissa[0] == '-';
  std::string digits;
  for (char c : mantissa) {
    if (c >= '0' && c <= '9') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) {
    return absl::StrCat(out, "0.", std::string(-exponent - 1, '0'), digits);
  }
  if (static_cast<int>(digits.size()) <= exponent + 1) {
    return absl::StrCat(out, digits, std::string(exponent + 1 - digits.size(), '0'), ".0");
  }
  return absl::StrCat(out, digits.substr(0, exponent + 1), ".", digits.substr(exponent + 1));
}

std::string ReprString(std::string_view s) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) quote = '"';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(&out, 0);
  return out;
}

void Value::AppendRepr(std::string* out, int depth) const {
  constexpr size_t kMaxReprBytes = 16 << 20;
  if (out->size() > kMaxReprBytes) return;
  switch (kind_) {
    case Kind::kString:
      *out += ReprString(*s_);
      return;
    case Kind::kList: {
      if (depth > 256) {
        *out += "[...]";
        return;
      }
      *out += tuple_ ? "(" : "[";
      for (size_t i = 0; i < l_->size() && out->size() <= kMaxReprBytes; ++i) {
        if (i) *out += ", ";
        (*l_)[i].AppendRepr(out, depth + 1);
      }
      if (tuple_ && l_->size() == 1) *out += ",";
      *out += tuple_ ? ")" : "]";
      return;
    }
    case Kind::kDict: {
      if (namespace_) {
        *out += "<Namespace>";
        return;
      }
      if (depth > 256) {
        *out += "{...}";
        return;
      }
      *out += "{";
      bool first = true;
      for (const auto& [k, v] : d_->items) {
        if (out->size() > kMaxReprBytes) break;
        if (!first) *out += ", ";
        first = false;
        k.AppendRepr(out, depth + 1);
        *out += ": ";
        v.AppendRepr(out, depth + 1);
      }
      *out += "}";
      return;
    }
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      *out += "None";
      return;
    case Kind::kBool:
      *out += b_ ? "True" : "False";
      return;
    case Kind::kInt:
      *out += std::to_string(i_);
      return;
    case Kind::kFloat:
      *out += FormatFloat(f_);
      return;
    case Kind::kCallable:
      absl::StrAppend(out, "<function ", c_->name, ">");
      return;
  }
}

bool Value::Equals(const Value& o, int depth) const {
  if (depth > 256) return false;
  if (is_number() && o.is_number()) {
    if ((is_int() || is_bool()) && (o.is_int() || o.is_bool())) return int_value() == o.int_value();
    return number_value() == o.number_value();
  }
  if (kind_ != o.kind_) return false;
  if (identity() != nullptr && identity() == o.identity()) return true;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *s_ == *o.s_;
    case Kind::kList: {
      if (l_->size() != o.l_->size()) return false;
      for (size_t i = 0; i < l_->size(); ++i) {
        if (!(*l_)[i].Equals((*o.l_)[i], depth + 1)) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (namespace_ || o.namespace_) return d_ == o.d_;
      if (d_->items.size() != o.d_->items.size()) return false;
      for (const auto& [k, v] : d_->items) {
        const Value* ov = o.d_->Find(k);
        if (ov == nullptr || !v.Equals(*ov, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return c_ == o.c_;
    default:
      return false;
  }
}

absl::StatusOr<int> Value::Compare(const Value& o, int depth) const {
  if (depth > 256) return absl::InvalidArgumentError("comparison nested too deeply");
  if (is_number() && o.is_number()) {
    if ((is_int() || is_bool()) && (o.is_int() || o.is_bool())) {
      return int_value() < o.int_value() ? -1 : int_value() > o.int_value() ? 1 : 0;
    }
    double a = number_value(), b = o.number_value();
    return a < b ? -1 : a > b ? 1 : 0;
  }
  if (is_string() && o.is_string()) {
    int c = s_->compare(*o.s_);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (is_list() && o.is_list()) {
    size_t n = std::min(l_->size(), o.l_->size());
    for (size_t i = 0; i < n; ++i) {
      absl::StatusOr<int> c = (*l_)[i].Compare((*o.l_)[i], depth + 1);
      if (!c.ok() || *c != 0) return c;
    }
    return l_->size() < o.l_->size() ? -1 : l_->size() > o.l_->size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 TypeName(), "' and '", o.TypeName(), "'"));
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return namespace_ ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

const Value* ValueDict::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (k.Equals(key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

static size_t Utf8SeqLen(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xe) return 3;
  if ((c >> 3) == 0x1e) return 4;
  return 1;
}

int64_t Utf8Length(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i += Utf8SeqLen(static_cast<unsigned char>(s[i]))) ++n;
  return n;
}

std::vector<size_t> Utf8Offsets(std::string_view s) {
  std::vector<size_t> out;
  size_t i = 0;
  while (i < s.size()) {
    out.push_back(i);
    i += Utf8SeqLen(static_cast<unsigned char>(s[i]));
  }
  out.push_back(s.size());
  if (i > s.size()) out.back() = s.size();
  return out;
}

}  // namespace attnserve::server::text::jinja
