// Reading a Hugging Face config.json's keys (parsed into a protobuf Struct, python_json.h) with
// transformers' defaults: a key that is absent or null takes the default; one of the wrong type
// is an error naming the key. Shared by the architectures' readers (architecture.h).
#pragma once

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::model::architectures {

using ConfigJson = google::protobuf::Struct;

// Whether the key is present and not null.
bool Has(const ConfigJson& json, const char* key);

absl::StatusOr<int64_t> IntKey(const ConfigJson& json, const char* key, int64_t fallback);
absl::StatusOr<double> NumberKey(const ConfigJson& json, const char* key, double fallback);
absl::StatusOr<bool> BoolKey(const ConfigJson& json, const char* key, bool fallback);
absl::StatusOr<std::string> StringKey(const ConfigJson& json, const char* key,
                                      const std::string& fallback);
// A size that may also be the string "auto" (Mamba's time_step_rank, mamba_ssm's dt_rank):
// 0 for "auto", absent or null (the reader's default then applies), else the number.
absl::StatusOr<int64_t> IntOrAutoKey(const ConfigJson& json, const char* key);
// A list of numbers; absent or null: empty.
absl::StatusOr<std::vector<double>> NumberListKey(const ConfigJson& json, const char* key);
// A list of strings; absent or null: empty.
absl::StatusOr<std::vector<std::string>> StringListKey(const ConfigJson& json, const char* key);
// An object; absent or null: an empty one (`present` says which).
absl::StatusOr<ConfigJson> ObjectKey(const ConfigJson& json, const char* key,
                                     bool* present = nullptr);

// num_hidden_layers-style counts: an error naming the key outside [1, 1024].
absl::StatusOr<int64_t> LayerCount(const ConfigJson& json, const char* key, int64_t fallback);

// The error for a value the loader does not support: "config.json: 'key': value is not
// supported (why)".
absl::Status Unsupported(const char* key, const std::string& value, const std::string& why);

}  // namespace attnserve::model::architectures
