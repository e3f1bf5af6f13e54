#include "server/model/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::model {
namespace {

// The format is little-endian; the tensors are copied byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

at::ScalarType ToScalarType(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF16:
      return at::kHalf;
    case SafetensorsDType::kBF16:
      return at::kBFloat16;
    case SafetensorsDType::kF32:
      break;
  }
  return at::kFloat;
}

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF): what the reader's
// JSON parser accepts, so that a file we write can always be read back.
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    unsigned char lo = 0x80, hi = 0xBF;  // Bounds of the second byte.
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(extra)) return false;
    for (int k = 1; k <= extra; ++k) {
      const unsigned char b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += extra + 1;
  }
  return true;
}

// `s` as a JSON string literal, quotes included.
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = ch;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

absl::Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t written = ::write(fd, p, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot write ", path));
    }
    p += written;
    n -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("safetensors: cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", path, " is not a regular file"));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("safetensors: ", path, " is empty"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_err = errno;
  ::close(fd);  // The mapping keeps the file alive.
  if (mapping == MAP_FAILED) {
    return absl::ErrnoToStatus(mmap_err, absl::StrCat("safetensors: cannot mmap ", path));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->source_ = path;
  file->mapping_ = mapping;  // Unmapped by the destructor from here on, on error too.
  file->data_ = static_cast<const char*>(mapping);
  file->size_ = size;
  RETURN_IF_ERROR(file->Init());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string bytes) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->source_ = "<memory>";
  file->owned_ = std::move(bytes);
  file->data_ = file->owned_.data();
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Init());
  return file;
}

absl::Status SafetensorsFile::Init() {
  auto header = ParseSafetensorsHeader(absl::string_view(data_, size_));
  if (!header.ok()) {
    // Prefix the path: the parser's messages say what is wrong, not where.
    return absl::Status(header.status().code(),
                        absl::StrCat(source_, ": ", header.status().message()));
  }
  header_ = *std::move(header);
  index_.reserve(header_.tensors.size());
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
  return absl::OkStatus();
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.tensors.size());
  for (const SafetensorsEntry& e : header_.tensors) out.push_back(e.name);
  return out;
}

const SafetensorsEntry* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

absl::StatusOr<at::Tensor> SafetensorsFile::LoadFloat32(const std::string& name) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("safetensors: ", source_, " has no tensor '", name, "'"));
  }
  // Validation guarantees [byte_offset, byte_offset + byte_length) lies inside the file.
  const char* src = data_ + e->byte_offset;
  const at::ScalarType type = ToScalarType(e->dtype);
  return kernels::GuardTorch("safetensors LoadFloat32", [&]() -> absl::StatusOr<at::Tensor> {
    const size_t elem = static_cast<size_t>(SafetensorsDTypeSize(e->dtype));
    if (type != at::kFloat && reinterpret_cast<uintptr_t>(src) % elem == 0) {
      // Aligned half-precision data converts straight from the file's bytes; to() only reads
      // it and returns new memory.
      at::Tensor view = at::from_blob(const_cast<char*>(src), e->shape, at::dtype(type));
      return view.to(at::kFloat).contiguous();
    }
    // F32, or data that is not aligned for its type (the format does not promise alignment):
    // copy the bytes into a tensor of the file's type first.
    at::Tensor t = at::empty(e->shape, at::dtype(type));
    if (e->byte_length > 0) std::memcpy(t.data_ptr(), src, e->byte_length);
    return type == at::kFloat ? t : t.to(at::kFloat);
  });
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::set<absl::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") {
      return absl::InvalidArgumentError("safetensors: '__metadata__' cannot name a tensor");
    }
    if (!IsValidUtf8(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: tensor name '", absl::CHexEscape(name), "' is not valid UTF-8"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: duplicate tensor '", name, "'"));
    }
    if (!t.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", name, "' is undefined"));
    }
    if (t.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", name, "' is ",
                                                     kernels::DTypeName(t.scalar_type()),
                                                     "; only float32 tensors can be written"));
    }
  }
  for (const auto& [key, value] : metadata) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: metadata key '",
                                                     absl::CHexEscape(key),
                                                     "' or its value is not valid UTF-8"));
    }
  }

  // Row-major CPU copies (no copy for tensors that already are), and the header.
  std::vector<at::Tensor> data;
  data.reserve(tensors.size());
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      absl::StrAppend(&header, JsonString(key), ":", JsonString(value));
    }
    header += '}';
  }
  uint64_t offset = 0;
  RETURN_IF_ERROR(kernels::GuardTorch("WriteSafetensors", [&]() -> absl::Status {
    for (const auto& [name, t] : tensors) {
      data.push_back(t.to(at::kCPU).contiguous());
      const uint64_t bytes = static_cast<uint64_t>(t.numel()) * sizeof(float);
      if (header.size() > 1) header += ',';
      absl::StrAppend(&header, JsonString(name), ":{\"dtype\":\"F32\",\"shape\":[");
      for (int64_t d = 0; d < t.dim(); ++d) absl::StrAppend(&header, d > 0 ? "," : "", t.size(d));
      absl::StrAppend(&header, "],\"data_offsets\":[", offset, ",", offset + bytes, "]}");
      offset += bytes;
    }
    return absl::OkStatus();
  }));
  header += '}';
  // Spaces (valid JSON whitespace) so that the data starts at a multiple of 8.
  header.append((8 - header.size() % 8) % 8, ' ');
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);

  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("safetensors: cannot create a temporary file next to ", path));
  }
  auto write_and_close = [&]() -> absl::Status {
    absl::Status st = WriteAll(fd, len_bytes, 8, tmp);
    if (st.ok()) st = WriteAll(fd, header.data(), header.size(), tmp);
    for (size_t i = 0; st.ok() && i < data.size(); ++i) {
      st = WriteAll(fd, static_cast<const char*>(data[i].data_ptr()),
                    static_cast<size_t>(data[i].numel()) * sizeof(float), tmp);
    }
    // mkstemp makes the file 0600; a weights file is as readable as any other.
    if (st.ok() && ::fchmod(fd, 0644) != 0) {
      st = absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot chmod ", tmp));
    }
    // Durable before it replaces the old file.
    if (st.ok() && ::fsync(fd) != 0) {
      st = absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot fsync ", tmp));
    }
    if (::close(fd) != 0 && st.ok()) {
      st = absl::ErrnoToStatus(errno, absl::StrCat("safetensors: cannot close ", tmp));
    }
    if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      st = absl::ErrnoToStatus(errno,
                               absl::StrCat("safetensors: cannot rename ", tmp, " to ", path));
    }
    return st;
  };
  absl::Status st = write_and_close();
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace attnserve::model
