// Globals of chat templates: range, namespace, dict, raise_exception, strftime_now.
#include <ctime>

#include "absl/strings/str_cat.h"
#include "server/text/jinja/builtins.h"

namespace attnserve::server::text::jinja {

absl::Status ArgError(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

void AddGlobals(std::chrono::system_clock::time_point now, Value* context) {
  ValueDict& d = context->dict();
  d.Set(Value::String("range"),
        Value::Function(
            "range", [](Interpreter& in, ValueList& args, KwArgs&) -> absl::StatusOr<Value> {
              int64_t start = 0, stop = 0, step = 1;
              for (const Value& a : args) {
                if (!a.is_int() && !a.is_bool())
                  return ArgError("range() arguments must be integers");
              }
              if (args.size() == 1) {
                stop = args[0].int_value();
              } else if (args.size() == 2 || args.size() == 3) {
                start = args[0].int_value();
                stop = args[1].int_value();
                if (args.size() == 3) step = args[2].int_value();
              } else {
                return ArgError("range() takes 1 to 3 arguments");
              }
              if (step == 0) return ArgError("range() arg 3 must not be zero");
              // Count with care: the bounds may be near the int64 limits.
              long double n = step > 0
                                  ? (static_cast<long double>(stop) - start + step - 1) / step
                                  : (static_cast<long double>(start) - stop - step - 1) / -step;
              int64_t count = n <= 0 ? 0 : n > 1e18L ? INT64_MAX : static_cast<int64_t>(n);
              absl::Status st = in.ChargeList(count);
              if (!st.ok()) return st;
              ValueList items;
              items.reserve(count);
              for (int64_t i = 0; i < count; ++i) items.push_back(Value::Int(start + i * step));
              return Value::List(std::move(items));
            }));
  d.Set(Value::String("namespace"),
        Value::Function("namespace",
                        [](Interpreter&, ValueList& args, KwArgs& kwargs) -> absl::StatusOr<Value> {
                          Value ns = Value::Namespace();
                          for (const Value& a : args) {
                            if (!a.is_dict())
                              return ArgError("namespace() takes a dict or keyword arguments");
                            for (const auto& [k, v] : a.dict().items) ns.dict().Set(k, v);
                          }
                          for (const auto& [k, v] : kwargs) ns.dict().Set(Value::String(k), v);
                          return ns;
                        }));
  d.Set(Value::String("dict"),
        Value::Function("dict",
                        [](Interpreter&, ValueList& args, KwArgs& kwargs) -> absl::StatusOr<Value> {
                          Value out = Value::Dict();
                          for (const Value& a : args) {
                            if (!a.is_dict())
                              return ArgError("dict() takes a dict or keyword arguments");
                            for (const auto& [k, v] : a.dict().items) out.dict().Set(k, v);
                          }
                          for (const auto& [k, v] : kwargs) out.dict().Set(Value::String(k), v);
                          return out;
                        }));
  d.Set(Value::String("raise_exception"),
        Value::Function(
            "raise_exception", [](Interpreter&, ValueList& args, KwArgs&) -> absl::StatusOr<Value> {
              std::string msg = args.empty() ? "raise_exception() called" : args[0].ToString();
              return absl::InvalidArgumentError(absl::StrCat("template raised: ", msg));
            }));
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  d.Set(Value::String("strftime_now"),
        Value::Function("strftime_now",
                        [t](Interpreter&, ValueList& args, KwArgs&) -> absl::StatusOr<Value> {
                          if (args.size() != 1 || !args[0].is_string()) {
                            return ArgError("strftime_now() takes one format string");
                          }
                          std::tm tm{};
                          gmtime_r(&t, &tm);
                          const std::string& fmt = args[0].str();
                          if (fmt.empty()) return Value::String("");
                          if (fmt.size() > 256) return ArgError("strftime_now() format too long");
                          char buf[1024];
                          size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                          if (n == 0)
                            return ArgError("strftime_now() format produced nothing or too much");
                          return Value::String(std::string(buf, n));
                        }));
}

}  // namespace attnserve::server::text::jinja
