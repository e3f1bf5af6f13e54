// The builtins of the engine: filters, tests, methods of str/list/dict, and globals. Each follows
// Jinja 3.1 / Python semantics for the subset chat templates use.
//
// Threads: called from one render's interpreter; no shared state.
// Errors: INVALID_ARGUMENT with a short message (the interpreter adds "chat template:" and the
// line); RESOURCE_EXHAUSTED from the interpreter's limits.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_BUILTINS_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_BUILTINS_H_

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/value.h"

namespace attnserve::server::text::jinja {

// filters.cc: `input | name(args, kwargs)`.
absl::StatusOr<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& input,
                                  ValueList& args, KwArgs& kwargs);

// tests.cc: `value is name(args)`.
absl::StatusOr<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& value,
                               ValueList& args);

// methods.cc: whether `obj.name(...)` is a str/list/dict method, and calling it.
bool IsMethod(const Value& obj, std::string_view name);
absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& obj, std::string_view name,
                                 ValueList& args, KwArgs& kwargs);

// tojson.cc: Python json.dumps(x, ensure_ascii, indent, sort_keys) with its default separators.
absl::StatusOr<std::string> ToJson(Interpreter& in, const Value& v, bool ensure_ascii,
                                   const std::string& indent, bool use_indent, bool sort_keys);

// globals.cc: range, namespace, dict, raise_exception, strftime_now (formats `now`, UTC).
void AddGlobals(std::chrono::system_clock::time_point now, Value* context);

// Helpers shared by the builtins.
absl::Status ArgError(std::string_view what);
// Python str.split / strip semantics on UTF-8.
std::string StripChars(std::string_view s, const Value* chars, bool left, bool right);
// Python-style index normalization and slicing over n elements.
void SliceIndices(int64_t n, const Value& start, const Value& stop, int64_t step, int64_t* s,
                  int64_t* e);

}  // namespace attnserve::server::text::jinja

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_BUILTINS_H_
