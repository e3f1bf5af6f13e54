#include "server/model/safetensors_header.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::model {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Value;

// JSON numbers arrive as doubles; above 2^53 they no longer hold every integer, and no real
// file has sizes or offsets that large.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// Dtypes of the format that attnserve does not load; named so that the error says
// "unsupported" rather than "unknown".
constexpr const char* kOtherKnownDTypes[] = {
    "BOOL", "U8",  "I8",      "I16",     "U16",     "I32", "U32",     "I64",    "U64",
    "F64",  "C64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2"};

// A name as messages quote it: bounded, since a hostile header can hold huge names; cut at a
// UTF-8 character boundary.
std::string Quote(absl::string_view name) {
  constexpr size_t kMaxShown = 128;
  if (name.size() <= kMaxShown) return absl::StrCat("'", name, "'");
  size_t cut = kMaxShown;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat("'", name.substr(0, cut), "...'");
}

const char* KindName(const Value& v) {
  switch (v.kind_case()) {
    case Value::kNullValue:
      return "null";
    case Value::kNumberValue:
      return "a number";
    case Value::kStringValue:
      return "a string";
    case Value::kBoolValue:
      return "a boolean";
    case Value::kStructValue:
      return "an object";
    case Value::kListValue:
      return "a list";
    default:
      return "nothing";
  }
}

absl::Status Invalid(absl::string_view tensor, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors: tensor ", Quote(tensor), ": ", what));
}

// A non-negative integer that `v` holds exactly; `what` names it in the message
// ("shape[1]", "data_offsets[0]").
absl::StatusOr<uint64_t> ToCount(const Value& v, absl::string_view tensor, absl::string_view what) {
  if (v.kind_case() != Value::kNumberValue) {
    return Invalid(tensor,
                   absl::StrCat(what, " must be a non-negative integer, got ", KindName(v)));
  }
  const double d = v.number_value();
  if (!std::isfinite(d) || d != std::floor(d)) {
    return Invalid(tensor, absl::StrCat(what, " is ", d, ", not an integer"));
  }
  if (d < 0) return Invalid(tensor, absl::StrCat(what, " is negative (", d, ")"));
  if (d > kMaxExactInteger) {
    return Invalid(tensor, absl::StrCat(what, " is ", d, ", beyond the supported 2^53"));
  }
  return static_cast<uint64_t>(d);
}

absl::StatusOr<SafetensorsDType> ParseDType(const Value& v, absl::string_view tensor) {
  if (v.kind_case() != Value::kStringValue) {
    return Invalid(tensor, absl::StrCat("\"dtype\" must be a string, got ", KindName(v)));
  }
  const std::string& s = v.string_value();
  if (s == "F32") return SafetensorsDType::kF32;
  if (s == "F16") return SafetensorsDType::kF16;
  if (s == "BF16") return SafetensorsDType::kBF16;
  for (const char* known : kOtherKnownDTypes) {
    if (s == known) {
      return Invalid(tensor, absl::StrCat("unsupported dtype ", s, "; supported: F32, F16, BF16"));
    }
  }
  return Invalid(tensor, absl::StrCat("unknown dtype ", Quote(s), "; supported: F32, F16, BF16"));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// Validates one tensor's entry against a data section of `data_size` bytes; byte_offset is
// relative to the data section until the caller shifts it.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const Value& v,
                                            uint64_t data_size) {
  if (v.kind_case() != Value::kStructValue) {
    return Invalid(name, absl::StrCat("expected an object with dtype, shape and data_offsets, got ",
                                      KindName(v)));
  }
  const auto& fields = v.struct_value().fields();
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (fields.find(key) == fields.end()) {
      return Invalid(name, absl::StrCat("missing \"", key, "\""));
    }
  }
  SafetensorsEntry entry;
  entry.name = name;
  auto dtype = ParseDType(fields.at("dtype"), name);
  if (!dtype.ok()) return dtype.status();
  entry.dtype = *dtype;

  const Value& shape = fields.at("shape");
  if (shape.kind_case() != Value::kListValue) {
    return Invalid(name, absl::StrCat("\"shape\" must be a list, got ", KindName(shape)));
  }
  const ListValue& dims = shape.list_value();
  // The element count, with overflow tracked separately: a later zero size makes the count
  // zero whatever came before it.
  bool overflow = false, has_zero = false;
  uint64_t elements = 1;
  entry.shape.reserve(dims.values_size());
  for (int i = 0; i < dims.values_size(); ++i) {
    auto size = ToCount(dims.values(i), name, absl::StrCat("shape[", i, "]"));
    if (!size.ok()) return size.status();
    entry.shape.push_back(static_cast<int64_t>(*size));
    if (*size == 0) has_zero = true;
    if (!overflow && __builtin_mul_overflow(elements, *size, &elements)) overflow = true;
  }
  const uint64_t elem_size = SafetensorsDTypeSize(entry.dtype);
  uint64_t needed = 0;  // Stays 0 when a size is 0.
  if (!has_zero && (overflow || __builtin_mul_overflow(elements, elem_size, &needed))) {
    return Invalid(name, absl::StrCat("shape ", ShapeText(entry.shape), " of ",
                                      SafetensorsDTypeName(entry.dtype),
                                      " holds more bytes than fit in 64 bits"));
  }

  const Value& offsets = fields.at("data_offsets");
  if (offsets.kind_case() != Value::kListValue || offsets.list_value().values_size() != 2) {
    return Invalid(name,
                   absl::StrCat("\"data_offsets\" must be a list [begin, end], got ",
                                offsets.kind_case() == Value::kListValue
                                    ? absl::StrCat("a list of ", offsets.list_value().values_size())
                                    : KindName(offsets)));
  }
  auto begin = ToCount(offsets.list_value().values(0), name, "data_offsets[0]");
  if (!begin.ok()) return begin.status();
  auto end = ToCount(offsets.list_value().values(1), name, "data_offsets[1]");
  if (!end.ok()) return end.status();
  const std::string range = absl::StrCat("[", *begin, ", ", *end, "]");
  if (*begin > *end) {
    return Invalid(name, absl::StrCat("data_offsets ", range, ": begin is after end"));
  }
  if (*end - *begin != needed) {
    return Invalid(name, absl::StrCat("shape ", ShapeText(entry.shape), " of ",
                                      SafetensorsDTypeName(entry.dtype), " needs ", needed,
                                      " bytes, but data_offsets ", range, " span ", *end - *begin));
  }
  if (*end > data_size) {
    return Invalid(name, absl::StrCat("data_offsets ", range, " extend beyond the data section of ",
                                      data_size, " bytes (is the file truncated?)"));
  }
  entry.byte_offset = *begin;
  entry.byte_length = needed;
  return entry;
}

absl::Status ParseMetadata(const Value& v, std::map<std::string, std::string>* out) {
  if (v.kind_case() == Value::kNullValue) return absl::OkStatus();
  if (v.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: \"__metadata__\" must be an object of strings, got ", KindName(v)));
  }
  for (const auto& [key, value] : v.struct_value().fields()) {
    if (value.kind_case() != Value::kStringValue) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: \"__metadata__\" key ",
                                                     Quote(key), ": value must be a string, got ",
                                                     KindName(value)));
    }
    out->emplace(key, value.string_value());
  }
  return absl::OkStatus();
}

}  // namespace

const char* SafetensorsDTypeName(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return "F32";
    case SafetensorsDType::kF16:
      return "F16";
    case SafetensorsDType::kBF16:
      return "BF16";
  }
  return "?";
}

int SafetensorsDTypeSize(SafetensorsDType dtype) { return dtype == SafetensorsDType::kF32 ? 4 : 2; }

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view file) {
  if (file.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: the file has ", file.size(),
                     " bytes, fewer than the 8 of the header length"));
  }
  // Little-endian whatever the host, byte by byte.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(file[i]);
  const uint64_t available = file.size() - 8;
  if (header_len > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: header length ", header_len, " is beyond the file: the file has ",
        file.size(), " bytes, the header needs 8 + ", header_len));
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: header length ", header_len,
                                                   " exceeds the limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  const absl::string_view json = file.substr(8, header_len);

  // A Value accepts any JSON, so that "not JSON" and "JSON but not an object" read apart.
  Value root;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: the header is not valid JSON: ", std::string(parsed.message())));
  }
  if (root.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: the header is not a JSON object, got ", KindName(root)));
  }

  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = available - header_len;
  const auto& fields = root.struct_value().fields();
  // In name order, so that a file with several faults always reports the same one.
  std::vector<const std::string*> names;
  names.reserve(fields.size());
  for (const auto& [name, value] : fields) names.push_back(&name);
  std::sort(names.begin(), names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (const std::string* name : names) {
    const Value& value = fields.at(*name);
    if (*name == "__metadata__") {
      absl::Status st = ParseMetadata(value, &header.metadata);
      if (!st.ok()) return st;
      continue;
    }
    auto entry = ParseEntry(*name, value, data_size);
    if (!entry.ok()) return entry.status();
    header.tensors.push_back(*std::move(entry));
  }

  // Overlaps: sorted by start, a non-empty range overlaps an earlier one exactly when it
  // starts before the furthest end seen so far. Empty ranges overlap nothing; gaps are fine.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.byte_offset, a.name) < std::tie(b.byte_offset, b.name);
            });
  const SafetensorsEntry* furthest = nullptr;
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.byte_length == 0) continue;
    const uint64_t end = e.byte_offset + e.byte_length;
    if (furthest != nullptr) {
      const uint64_t furthest_end = furthest->byte_offset + furthest->byte_length;
      if (e.byte_offset < furthest_end) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors: tensors ", Quote(furthest->name), " (bytes [",
                         furthest->byte_offset, ", ", furthest_end, "]) and ", Quote(e.name),
                         " (bytes [", e.byte_offset, ", ", end, "]) overlap"));
      }
    }
    if (furthest == nullptr || end > furthest->byte_offset + furthest->byte_length) furthest = &e;
  }
  for (SafetensorsEntry& e : header.tensors) e.byte_offset += header.data_offset;
  return header;
}

}  // namespace attnserve::model
