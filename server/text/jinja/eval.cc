// Interpreter: expression evaluation (operators, attribute/subscript access, calls, filters).
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/text/jinja/builtins.h"
#include "server/text/jinja/interpreter.h"

namespace attnserve::server::text::jinja {

namespace {

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.str().empty() ? "value is undefined" : v.str());
}

absl::Status OperandError(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

absl::Status Overflow() { return absl::InvalidArgumentError("integer overflow"); }

// obj.name: a dict key, else undefined (Jinja's getattr then getitem).
Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
    return Value::Undefined(absl::StrCat("'", obj.is_namespace() ? "Namespace" : "dict object",
                                         "' has no attribute '", name, "'"));
  }
  return Value::Undefined(absl::StrCat("'", obj.is_none() ? "None" : obj.TypeName() + " object",
                                       "' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
    return Value::Undefined(absl::StrCat("'dict object' has no attribute ", key.Repr()));
  }
  if ((obj.is_list() || obj.is_string()) && IsIntLike(key)) {
    int64_t i = key.int_value();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) {
        return Value::Undefined(absl::StrCat("list object has no element ", key.int_value()));
      }
      return obj.list()[i];
    }
    std::vector<size_t> off = Utf8Offsets(obj.str());
    int64_t n = static_cast<int64_t>(off.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) {
      return Value::Undefined(absl::StrCat("str object has no element ", key.int_value()));
    }
    return Value::String(obj.str().substr(off[i], off[i + 1] - off[i]));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute ", key.Repr()));
}

absl::StatusOr<bool> Contains(const Value& hay, const Value& needle) {
  if (hay.is_string()) {
    if (!needle.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'in <string>' requires string as left operand, not ", needle.TypeName()));
    }
    return hay.str().find(needle.str()) != std::string::npos;
  }
  if (hay.is_list()) {
    for (const Value& v : hay.list()) {
      if (v.Equals(needle)) return true;
    }
    return false;
  }
  if (hay.is_dict()) return hay.dict().Find(needle) != nullptr;
  if (hay.is_undefined()) return false;
  return absl::InvalidArgumentError(
      absl::StrCat("argument of type '", hay.TypeName(), "' is not iterable"));
}

}  // namespace

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  RETURN_IF_ERROR(Step());
  if (++depth_ > limits_.max_depth * 16) {
    return absl::ResourceExhaustedError(
        absl::StrCat("chat template: recursion deeper than ", limits_.max_depth * 16));
  }
  absl::StatusOr<Value> v = EvalInner(e);
  --depth_;
  return v;
}

absl::Status Interpreter::EvalArgs(const Expr& e, size_t first, ValueList* args, KwArgs* kwargs) {
  for (size_t i = first; i < e.args.size(); ++i) {
    const Expr& a = *e.args[i];
    bool splat = a.kind == ExprKind::kUnary && (a.name == "*" || a.name == "**");
    ASSIGN_OR_RETURN(auto v, Eval(splat ? *a.args[0] : a));
    if (!splat) {
      args->push_back(std::move(v));
    } else if (a.name == "*" && v.is_list()) {
      for (const Value& x : v.list()) args->push_back(x);
    } else if (a.name == "**" && v.is_dict()) {
      for (const auto& [k, x] : v.dict().items) kwargs->emplace_back(k.ToString(), x);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot unpack ", v.TypeName(), " with ", a.name));
    }
  }
  for (const auto& [k, x] : e.kwargs) {
    ASSIGN_OR_RETURN(auto v, Eval(*x));
    kwargs->emplace_back(k, std::move(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::EvalInner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName: {
      const Value* v = Lookup(e.name);
      if (v == nullptr) return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
      return *v;
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& a : e.args) {
        ASSIGN_OR_RETURN(auto v, Eval(*a));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::List(std::move(items))
                                       : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::Dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(auto k, Eval(*e.args[i]));
        ASSIGN_OR_RETURN(auto v, Eval(*e.args[i + 1]));
        d.dict().Set(k, std::move(v));
      }
      return d;
    }
    case ExprKind::kAttr: {
      ASSIGN_OR_RETURN(auto obj, Eval(*e.args[0]));
      if (obj.is_undefined()) return UndefinedError(obj);
      return GetAttr(obj, e.name);
    }
    case ExprKind::kSubscript: {
      ASSIGN_OR_RETURN(auto obj, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(auto key, Eval(*e.args[1]));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice:
      return EvalSlice(e);
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter:
      return EvalFilter(e, nullptr);
    case ExprKind::kTest: {
      ASSIGN_OR_RETURN(auto v, Eval(*e.args[0]));
      ValueList args;
      KwArgs kwargs;
      RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
      ASSIGN_OR_RETURN(auto r, ApplyTest(*this, e.name, v, args));
      return Value::Bool(r != e.negated);
    }
    case ExprKind::kUnary: {
      ASSIGN_OR_RETURN(auto v, Eval(*e.args[0]));
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_undefined()) return UndefinedError(v);
      if (!v.is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
      }
      if (e.name == "+") return IsIntLike(v) ? Value::Int(v.int_value()) : v;
      if (IsIntLike(v)) {
        if (v.int_value() == INT64_MIN) return Overflow();
        return Value::Int(-v.int_value());
      }
      return Value::Float(-v.number_value());
    }
    case ExprKind::kBinary:
      return EvalBinary(e);
    case ExprKind::kCond: {
      ASSIGN_OR_RETURN(auto c, Eval(*e.args[1]));
      if (c.Truthy()) return Eval(*e.args[0]);
      if (e.args.size() > 2 && e.args[2]) return Eval(*e.args[2]);
      return Value::Undefined("the inline if expression evaluated to false and no else was given");
    }
  }
  return absl::InternalError("bad expression");
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  const std::string& op = e.name;
  ASSIGN_OR_RETURN(auto a, Eval(*e.args[0]));
  if (op == "and") return a.Truthy() ? Eval(*e.args[1]) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.args[1]);
  ASSIGN_OR_RETURN(auto b, Eval(*e.args[1]));
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "in" || op == "not in") {
    ASSIGN_OR_RETURN(auto r, Contains(b, a));
    return Value::Bool(r == (op == "in"));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    if (a.is_undefined() || b.is_undefined()) return OperandError(op, a, b);
    ASSIGN_OR_RETURN(auto c, a.Compare(b));
    bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    return Value::Bool(r);
  }
  if (op == "~") {
    std::string s = a.ToString();
    std::string t = b.ToString();
    RETURN_IF_ERROR(ChargeString(static_cast<int64_t>(s.size() + t.size())));
    return Value::String(s + t);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(ChargeString(static_cast<int64_t>(a.str().size() + b.str().size())));
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      RETURN_IF_ERROR(ChargeList(static_cast<int64_t>(a.list().size() + b.list().size())));
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return a.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list()   ? &a
                       : b.is_string() || b.is_list() ? &b
                                                      : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && IsIntLike(*count)) {
      int64_t n = std::max<int64_t>(0, count->int_value());
      if (seq->is_string()) {
        if (n > 0 && static_cast<int64_t>(seq->str().size()) > limits_.max_value_bytes / n) {
          return ChargeString(limits_.max_value_bytes + 1);
        }
        RETURN_IF_ERROR(ChargeString(static_cast<int64_t>(seq->str().size()) * n));
        std::string s;
        s.reserve(seq->str().size() * n);
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        return Value::String(std::move(s));
      }
      if (n > 0 && static_cast<int64_t>(seq->list().size()) > limits_.max_value_bytes / n) {
        return ChargeList(limits_.max_value_bytes + 1);
      }
      RETURN_IF_ERROR(ChargeList(static_cast<int64_t>(seq->list().size()) * n));
      ValueList items;
      for (int64_t i = 0; i < n; ++i) {
        items.insert(items.end(), seq->list().begin(), seq->list().end());
      }
      return Value::List(std::move(items));
    }
  }
  if (op == "%" && a.is_string()) {
    return absl::InvalidArgumentError("printf-style string formatting is not supported");
  }
  if (!a.is_number() || !b.is_number()) return OperandError(op, a, b);
  if (IsIntLike(a) && IsIntLike(b) && op != "/") {
    int64_t x = a.int_value(), y = b.int_value(), r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "//" || op == "%") {
      if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return Overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t result = 1, base = x;
      while (y > 0) {
        if (y & 1) {
          if (__builtin_mul_overflow(result, base, &result)) return Overflow();
        }
        y >>= 1;
        if (y > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
      }
      return Value::Int(result);
    }
  }
  double x = a.number_value(), y = b.number_value();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") {
    if (y == 0) return absl::InvalidArgumentError("division by zero");
    return Value::Float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return absl::InvalidArgumentError("float division by zero");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (op == "%") return Value::Float(m);
    return Value::Float(std::floor((x - m) / y + 0.5));
  }
  if (op == "**") return Value::Float(std::pow(x, y));
  return OperandError(op, a, b);
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Expr& e) {
  ASSIGN_OR_RETURN(auto obj, Eval(*e.args[0]));
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    if (e.args[i + 1]) {
      ASSIGN_OR_RETURN(auto v, Eval(*e.args[i + 1]));
      if (!v.is_none() && !IsIntLike(v)) {
        return absl::InvalidArgumentError("slice indices must be integers or None");
      }
      parts[i] = std::move(v);
    }
  }
  int64_t step = parts[2].is_undefined() || parts[2].is_none() ? 1 : parts[2].int_value();
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_list()) {
    int64_t s, end;
    SliceIndices(static_cast<int64_t>(obj.list().size()), parts[0], parts[1], step, &s, &end);
    ValueList items;
    for (int64_t i = s; step > 0 ? i < end : i > end; i += step) items.push_back(obj.list()[i]);
    return obj.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
  }
  if (obj.is_string()) {
    std::vector<size_t> off = Utf8Offsets(obj.str());
    int64_t s, end;
    SliceIndices(static_cast<int64_t>(off.size()) - 1, parts[0], parts[1], step, &s, &end);
    std::string out;
    if (step == 1) {
      if (s < end) out = obj.str().substr(off[s], off[end] - off[s]);
    } else {
      for (int64_t i = s; step > 0 ? i < end : i > end; i += step) {
        out.append(obj.str(), off[i], off[i + 1] - off[i]);
      }
    }
    return Value::String(std::move(out));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  Value fn;
  if (callee.kind == ExprKind::kAttr) {
    ASSIGN_OR_RETURN(auto obj, Eval(*callee.args[0]));
    if (obj.is_undefined()) return UndefinedError(obj);
    if (IsMethod(obj, callee.name)) {
      ValueList args;
      KwArgs kwargs;
      RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
      return CallMethod(*this, obj, callee.name, args, kwargs);
    }
    fn = GetAttr(obj, callee.name);
  } else {
    ASSIGN_OR_RETURN(auto f, Eval(callee));
    fn = std::move(f);
  }
  ValueList args;
  KwArgs kwargs;
  RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
  return Call(fn, args, kwargs);
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e, const Value* block_input) {
  Value input;
  if (e.args[0]) {
    if (e.args[0]->kind == ExprKind::kFilter) {
      RETURN_IF_ERROR(Step());
      ASSIGN_OR_RETURN(auto v, EvalFilter(*e.args[0], block_input));
      input = std::move(v);
    } else {
      ASSIGN_OR_RETURN(auto v, Eval(*e.args[0]));
      input = std::move(v);
    }
  } else if (block_input != nullptr) {
    input = *block_input;
  }
  ValueList args;
  KwArgs kwargs;
  RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
  return ApplyFilter(*this, e.name, input, args, kwargs);
}

}  // namespace attnserve::server::text::jinja
