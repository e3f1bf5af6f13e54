#include "server/model/architectures/config_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace attnserve::model::architectures {
namespace {

using google::protobuf::Value;

const Value* Find(const ConfigJson& json, const char* key) {
  auto it = json.fields().find(key);
  if (it == json.fields().end() || it->second.kind_case() == Value::kNullValue) return nullptr;
  return &it->second;
}

absl::Status WrongType(const char* key, const char* expected) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: '", key, "' must be ", expected));
}

// A number, or the strings a non-finite one becomes (python_json.h).
absl::StatusOr<double> NumberOf(const Value& v, const char* key) {
  if (v.kind_case() == Value::kNumberValue) return v.number_value();
  if (v.kind_case() == Value::kStringValue) {
    if (v.string_value() == "Infinity") return INFINITY;
    if (v.string_value() == "-Infinity") return -INFINITY;
    if (v.string_value() == "NaN") return NAN;
  }
  return WrongType(key, "a number");
}

}  // namespace

bool Has(const ConfigJson& json, const char* key) { return Find(json, key) != nullptr; }

absl::StatusOr<int64_t> IntKey(const ConfigJson& json, const char* key, int64_t fallback) {
  const Value* v = Find(json, key);
  if (v == nullptr) return fallback;
  if (v->kind_case() != Value::kNumberValue || v->number_value() != std::floor(v->number_value()) ||
      std::abs(v->number_value()) > 9.0e15) {
    return WrongType(key, "an integer");
  }
  return static_cast<int64_t>(v->number_value());
}

absl::StatusOr<double> NumberKey(const ConfigJson& json, const char* key, double fallback) {
  const Value* v = Find(json, key);
  if (v == nullptr) return fallback;
  return NumberOf(*v, key);
}

absl::StatusOr<bool> BoolKey(const ConfigJson& json, const char* key, bool fallback) {
  const Value* v = Find(json, key);
  if (v == nullptr) return fallback;
  if (v->kind_case() != Value::kBoolValue) return WrongType(key, "true or false");
  return v->bool_value();
}

absl::StatusOr<std::string> StringKey(const ConfigJson& json, const char* key,
                                      const std::string& fallback) {
  const Value* v = Find(json, key);
  if (v == nullptr) return fallback;
  if (v->kind_case() != Value::kStringValue) return WrongType(key, "a string");
  return v->string_value();
}

absl::StatusOr<std::vector<double>> NumberListKey(const ConfigJson& json, const char* key) {
  std::vector<double> out;
  const Value* v = Find(json, key);
  if (v == nullptr) return out;
  if (v->kind_case() != Value::kListValue) return WrongType(key, "a list of numbers");
  for (const Value& item : v->list_value().values()) {
    absl::StatusOr<double> n = NumberOf(item, key);
    if (!n.ok()) return WrongType(key, "a list of numbers");
    out.push_back(*n);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> StringListKey(const ConfigJson& json, const char* key) {
  std::vector<std::string> out;
  const Value* v = Find(json, key);
  if (v == nullptr) return out;
  if (v->kind_case() != Value::kListValue) return WrongType(key, "a list of strings");
  for (const Value& item : v->list_value().values()) {
    if (item.kind_case() != Value::kStringValue) return WrongType(key, "a list of strings");
    out.push_back(item.string_value());
  }
  return out;
}

absl::StatusOr<int64_t> IntOrAutoKey(const ConfigJson& json, const char* key) {
  const Value* v = Find(json, key);
  if (v != nullptr && v->kind_case() == Value::kStringValue && v->string_value() == "auto") {
    return 0;
  }
  return IntKey(json, key, 0);
}

absl::StatusOr<ConfigJson> ObjectKey(const ConfigJson& json, const char* key, bool* present) {
  const Value* v = Find(json, key);
  if (present != nullptr) *present = v != nullptr;
  if (v == nullptr) return ConfigJson();
  if (v->kind_case() != Value::kStructValue) return WrongType(key, "an object");
  return v->struct_value();
}

absl::StatusOr<int64_t> LayerCount(const ConfigJson& json, const char* key, int64_t fallback) {
  absl::StatusOr<int64_t> n = IntKey(json, key, fallback);
  if (n.ok() && (*n <= 0 || *n > 1024)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: '", key, "' must be in [1, 1024], got ", *n));
  }
  return n;
}

absl::Status Unsupported(const char* key, const std::string& value, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: '", key, "': ", value, " is not supported (", why, ")"));
}

}  // namespace attnserve::model::architectures
