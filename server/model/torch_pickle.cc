#include "server/model/torch_pickle.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::model {
namespace {

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// A JSON string literal of `s` (tensor names are plain ASCII; quotes, backslashes and control
// characters escaped all the same).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrCat("\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenTorchPickle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "PK\x03\x04", 4) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a zip archive written by torch.save (the legacy format of "
                     "torch < 1.6 is not read; re-save it or convert it to safetensors)"));
  }
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": LibTorch could not unpickle it: ", FirstLine(e.what())));
  }
  bytes = {};
  if (!value.isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected a dict of name -> tensor (a state_dict), got ", value.tagKind()));
  }
  std::map<std::string, at::Tensor> tensors;  // name order: deterministic offsets
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": expected a dict of name -> tensor, found an entry of ",
                       entry.key().tagKind(), " -> ", entry.value().tagKind()));
    }
    at::Tensor t = entry.value().toTensor();
    const std::string name = entry.key().toStringRef();
    if (t.scalar_type() == at::kDouble) t = t.to(at::kFloat);
    if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kHalf &&
        t.scalar_type() != at::kBFloat16) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is ",
                                                     c10::toString(t.scalar_type()),
                                                     "; float32, float16 or bfloat16 expected"));
    }
    tensors[name] = t.contiguous();
  }
  std::vector<std::string> entries;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const char* dtype = t.scalar_type() == at::kFloat  ? "F32"
                        : t.scalar_type() == at::kHalf ? "F16"
                                                       : "BF16";
    const uint64_t size = t.numel() * t.element_size();
    entries.push_back(absl::StrCat(JsonString(name), ":{\"dtype\":\"", dtype, "\",\"shape\":[",
                                   absl::StrJoin(t.sizes(), ","), "],\"data_offsets\":[", offset,
                                   ",", offset + size, "]}"));
    offset += size;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8 + header.size() + offset, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::memcpy(&file[8], header.data(), header.size());
  char* data = &file[8 + header.size()];
  for (const auto& [name, t] : tensors) {
    const size_t size = t.numel() * t.element_size();
    std::memcpy(data, t.data_ptr(), size);
    data += size;
  }
  tensors.clear();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> result =
      SafetensorsFile::FromBytes(std::move(file));
  if (!result.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", result.status().message()));
  }
  return result;
}

}  // namespace attnserve::model
