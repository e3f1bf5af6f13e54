// Values of the Jinja chat-template engine: Python-like dynamic values (undefined, none, bool, int,
// float, str, list, dict, callable). Lists and dicts are shared by reference (as in Python), so a
// copy of a Value is cheap; strings are immutable and shared too.
//
// Threads: a Value and everything it references belongs to one render (one thread); values are
// never shared between renders.
// Strings are UTF-8; lengths and indices that the templates see count code points, as Python does.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_VALUE_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attnserve::server::text::jinja {

class Value;
class Interpreter;

using ValueList = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;

// A callable value: a builtin global (range, namespace, ...), or a macro. `fn` is called with the
// interpreter of the render that calls it.
struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(Interpreter&, ValueList& args, KwArgs& kwargs)> fn;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

struct ValueDict;

class Value {
 public:
  Value() = default;  // undefined
  static Value Undefined(std::string hint = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items = {});
  static Value Tuple(ValueList items);
  static Value Dict();
  static Value Namespace();
  static Value Function(std::string name,
                        std::function<absl::StatusOr<Value>(Interpreter&, ValueList&, KwArgs&)> fn);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double number_value() const;
  const std::string& str() const { return *s_; }  // strings; the hint for undefined
  ValueList& list() const { return *l_; }
  ValueDict& dict() const { return *d_; }
  const Callable& callable() const { return *c_; }
  // Identity of the referenced list/dict/callable (for `is sameas`).
  const void* identity() const;
  // How many values share this list (1: a temporary that may be moved from).
  long use_count() const { return l_ ? l_.use_count() : 0; }

  // Python truthiness: undefined, none, false, 0, 0.0, "", [], {} are false.
  bool Truthy() const;
  // str(x) as Jinja prints it ("None", "True", "1.0", "[1, 'a']"); undefined prints "".
  std::string ToString() const;
  // repr(x) as Python writes it inside containers. Containers nested past 256 levels (a list
  // holding itself) print "[...]"; output stops growing past 16 MiB (callers' limits are lower).
  std::string Repr() const;
  // Python ==. Containers nested past 256 levels compare unequal.
  bool Equals(const Value& other, int depth = 0) const;
  // Python-compatible ordering: numbers with numbers, strings with strings, lists element-wise.
  absl::StatusOr<int> Compare(const Value& other, int depth = 0) const;
  // A short type name for error messages ("str", "list", "dict object", ...).
  std::string TypeName() const;

 private:
  void AppendRepr(std::string* out, int depth) const;

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> l_;
  std::shared_ptr<ValueDict> d_;
  std::shared_ptr<const Callable> c_;
};

// An insertion-ordered dict (Python 3.7+ semantics). Lookup is linear: chat-template dicts are
// small, and every insertion is bounded by the render's limits.
struct ValueDict {
  std::vector<std::pair<Value, Value>> items;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(const Value& key, Value value);
};

// Python float repr (shortest round-trip: "1.0", "0.1", "1e+20", "inf", "nan").
std::string FormatFloat(double f);
// Python repr of a str: quotes and escapes.
std::string ReprString(std::string_view s);

// UTF-8 helpers counting code points as Python does. Invalid bytes count as one code point each.
int64_t Utf8Length(std::string_view s);
// Byte offsets of the code points of s, plus s.size() at the end.
std::vector<size_t> Utf8Offsets(std::string_view s);

}  // namespace attnserve::server::text::jinja

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_VALUE_H_
