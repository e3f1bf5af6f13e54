// Jinja tests (`x is defined`, `x is string`, ...).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/text/jinja/builtins.h"

namespace attnserve::server::text::jinja {
namespace {

bool AllCased(const std::string& s, bool upper) {
  bool any = false;
  for (unsigned char c : s) {
    if (c >= 'a' && c <= 'z') {
      if (upper) return false;
      any = true;
    } else if (c >= 'A' && c <= 'Z') {
      if (!upper) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace

absl::StatusOr<bool> ApplyTest(Interpreter& in, std::string_view name_view, const Value& v,
                               ValueList& args) {
  const std::string name(name_view);
  auto arg = [&](size_t i) -> absl::StatusOr<Value> {
    if (i >= args.size()) {
      return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an argument"));
    }
    return args[i];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "iterable") return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && AllCased(v.str(), false);
  if (name == "upper") return v.is_string() && AllCased(v.str(), true);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) {
      if (v.is_undefined()) return absl::InvalidArgumentError(v.str());
      return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an integer"));
    }
    int64_t x = v.int_value();
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    auto d = arg(0);
    if (!d.ok()) return d.status();
    if (!d->is_int() || d->int_value() == 0) {
      return absl::InvalidArgumentError("divisibleby needs a non-zero integer");
    }
    return x % d->int_value() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    auto o = arg(0);
    if (!o.ok()) return o.status();
    bool eq = v.Equals(*o);
    return (name == "ne" || name == "!=") ? !eq : eq;
  }
  if (name == "lt" || name == "lessthan" || name == "gt" || name == "greaterthan" || name == "le" ||
      name == "ge") {
    auto o = arg(0);
    if (!o.ok()) return o.status();
    absl::StatusOr<int> c = v.Compare(*o);
    if (!c.ok()) return c.status();
    if (name == "lt" || name == "lessthan") return *c < 0;
    if (name == "gt" || name == "greaterthan") return *c > 0;
    if (name == "le") return *c <= 0;
    return *c >= 0;
  }
  if (name == "sameas") {
    auto o = arg(0);
    if (!o.ok()) return o.status();
    if (v.kind() != o->kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.bool_value() == o->bool_value();
    if (v.identity() != nullptr) return v.identity() == o->identity();
    return v.Equals(*o);
  }
  if (name == "in") {
    auto o = arg(0);
    if (!o.ok()) return o.status();
    if (o->is_string()) return v.is_string() && o->str().find(v.str()) != std::string::npos;
    if (o->is_list()) {
      for (const Value& x : o->list()) {
        if (x.Equals(v)) return true;
      }
      return false;
    }
    if (o->is_dict()) return o->dict().Find(v) != nullptr;
    return absl::InvalidArgumentError("test 'in' needs a container");
  }
  (void)in;
  return absl::InvalidArgumentError(absl::StrCat("no test named '", name, "'"));
}

}  // namespace attnserve::server::text::jinja
