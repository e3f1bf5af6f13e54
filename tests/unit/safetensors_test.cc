#include "server/model/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/model/safetensors_header.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

// Whether `text` contains `part`, saying both when not (the unit binary has no gmock).
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// A file from a header and a data section, built by hand: 8-byte little-endian length first.
std::string BuildFile(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string TensorBytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "safetensors_test_" + std::to_string(::getpid()) + "_" + name;
}

// The status of parsing `file`, which the test expects to fail.
absl::Status ParseError(const std::string& file) {
  auto parsed = SafetensorsFile::FromBytes(file);
  EXPECT_FALSE(parsed.ok()) << "parsed a corrupt file";
  return parsed.ok() ? absl::OkStatus() : parsed.status();
}

std::string Message(const absl::Status& st) { return std::string(st.message()); }

TEST(SafetensorsTest, WriteThenReadRoundTripsExactly) {
  const std::string weird = "we\"ird\\name\n\x01 \xc3\xbc";  // Quote, backslash, controls, ü.
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"layers.0.weight", testing::RandomTensor({2, 3}, 1)},
      {"scalar", at::full({}, 3.5f)},
      {"empty", at::empty({0, 4}, at::kFloat)},
      {"strided", testing::RandomTensor({4, 5, 6}, 2).transpose(0, 2)},  // Not contiguous.
      {weird, testing::RandomTensor({7}, 3)},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"note", "a \"quoted\"\tvalue"}};
  const std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  for (bool from_bytes : {false, true}) {
    SCOPED_TRACE(from_bytes ? "FromBytes" : "Open");
    auto file =
        from_bytes ? SafetensorsFile::FromBytes(ReadAll(path)) : SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    std::vector<std::string> want_names;
    for (const auto& [name, t] : tensors) want_names.push_back(name);
    // Zero-size tensors have no bytes to order them by; the rest keep the written order.
    std::vector<std::string> names = (*file)->names();
    names.erase(std::remove(names.begin(), names.end(), "empty"), names.end());
    want_names.erase(std::remove(want_names.begin(), want_names.end(), "empty"), want_names.end());
    EXPECT_EQ(names, want_names);
    EXPECT_EQ((*file)->metadata(), metadata);
    for (const auto& [name, want] : tensors) {
      SCOPED_TRACE(name);
      const SafetensorsEntry* entry = (*file)->Find(name);
      ASSERT_NE(entry, nullptr);
      EXPECT_EQ(entry->dtype, SafetensorsDType::kF32);
      EXPECT_EQ(entry->shape, want.sizes().vec());
      auto got = (*file)->LoadFloat32(name);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->scalar_type(), at::kFloat);
      EXPECT_TRUE(got->is_contiguous());
      EXPECT_TRUE(at::equal(*got, want));  // Bit-exact.
    }
    EXPECT_EQ((*file)->Find("missing"), nullptr);
  }

  // The data section starts 8-byte aligned, the header padded with spaces.
  const std::string bytes = ReadAll(path);
  auto header = ParseSafetensorsHeader(bytes);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->data_offset % 8, 0u);
  const char last = bytes[header->data_offset - 1];
  EXPECT_TRUE(last == ' ' || last == '}') << last;
  std::remove(path.c_str());
}

TEST(SafetensorsTest, WriteReplacesAnExistingFileAndLeavesNoTemporary) {
  const std::string path = TempPath("replace.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", at::ones({3})}}, {}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"b", at::zeros({2, 2})}}, {}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->names(), std::vector<std::string>{"b"});
  EXPECT_TRUE((*file)->metadata().empty());
  std::remove(path.c_str());
}

TEST(SafetensorsTest, WriteRejectsNonFloatDuplicateAndReservedNames) {
  const std::string path = TempPath("reject.safetensors");
  absl::Status st = WriteSafetensors(path, {{"ids", at::ones({3}, at::kLong)}}, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(Message(st), "tensor 'ids' is int64; only float32"));
  st = WriteSafetensors(path, {{"a", at::ones({1})}, {"a", at::ones({1})}}, {});
  EXPECT_TRUE(Contains(Message(st), "duplicate tensor 'a'"));
  st = WriteSafetensors(path, {{"__metadata__", at::ones({1})}}, {});
  EXPECT_FALSE(st.ok());
  st = WriteSafetensors(path, {{"bad\xff", at::ones({1})}}, {});
  EXPECT_TRUE(Contains(Message(st), "not valid UTF-8"));
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "a failed write left a file";
}

TEST(SafetensorsTest, HalfAndBFloat16LoadAsTheirFloatValues) {
  const at::Tensor x = testing::RandomTensor({3, 4}, 7);
  const at::Tensor h = x.to(at::kHalf), b = x.to(at::kBFloat16);
  const std::string header = R"({"h":{"dtype":"F16","shape":[3,4],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"BF16","shape":[3,4],"data_offsets":[24,48]}})";
  // Pad so that the data starts 8-aligned within the file (the aligned path), then again one
  // byte further (the unaligned path).
  for (size_t pad : {(8 - header.size() % 8) % 8, (8 - header.size() % 8) % 8 + 1}) {
    SCOPED_TRACE(pad);
    auto file = SafetensorsFile::FromBytes(
        BuildFile(header + std::string(pad, ' '), TensorBytes(h) + TensorBytes(b)));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->Find("h")->dtype, SafetensorsDType::kF16);
    EXPECT_EQ((*file)->Find("b")->dtype, SafetensorsDType::kBF16);
    auto got_h = (*file)->LoadFloat32("h");
    auto got_b = (*file)->LoadFloat32("b");
    ASSERT_TRUE(got_h.ok()) << got_h.status();
    ASSERT_TRUE(got_b.ok()) << got_b.status();
    EXPECT_EQ(got_h->scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(*got_h, h.to(at::kFloat)));
    EXPECT_TRUE(at::equal(*got_b, b.to(at::kFloat)));
  }
}

TEST(SafetensorsTest, UnalignedFloat32Loads) {
  const at::Tensor x = testing::RandomTensor({5}, 9);
  // A header of odd length: the data starts at an odd address.
  std::string header = R"({"x":{"dtype":"F32","shape":[5],"data_offsets":[0,20]}})";
  if (header.size() % 2 == 0) header += ' ';
  auto file = SafetensorsFile::FromBytes(BuildFile(header, TensorBytes(x)));
  ASSERT_TRUE(file.ok()) << file.status();
  auto got = (*file)->LoadFloat32("x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(at::equal(*got, x));
}

TEST(SafetensorsTest, GapsBetweenTensorsAreAllowed) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})";
  auto file = SafetensorsFile::FromBytes(BuildFile(header, std::string(24, '\0')));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->names(), (std::vector<std::string>{"a", "b"}));
}

TEST(SafetensorsTest, LoadOfAMissingTensorNamesIt) {
  auto file = SafetensorsFile::FromBytes(BuildFile("{}"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto got = (*file)->LoadFloat32("nope");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(Message(got.status()), "no tensor 'nope'"));
}

TEST(SafetensorsTest, OpenOfAMissingPathNamesItAndTheError) {
  const std::string path = TempPath("does_not_exist.safetensors");
  auto file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(Message(file.status()), path));
  EXPECT_TRUE(Contains(Message(file.status()), "No such file"));
}

TEST(SafetensorsTest, OpenOfAnEmptyFileOrADirectoryFails) {
  const std::string path = TempPath("empty.safetensors");
  std::ofstream(path).close();
  auto file = SafetensorsFile::Open(path);
  EXPECT_TRUE(Contains(Message(file.status()), "is empty"));
  std::remove(path.c_str());
  file = SafetensorsFile::Open(::testing::TempDir());
  EXPECT_TRUE(Contains(Message(file.status()), "not a regular file"));
}

TEST(SafetensorsTest, OpenReportsAnInvalidHeaderWithThePath) {
  const std::string path = TempPath("bad.safetensors");
  { std::ofstream(path, std::ios::binary) << BuildFile("[]"); }
  auto file = SafetensorsFile::Open(path);
  EXPECT_TRUE(Contains(Message(file.status()), path + ": safetensors: the header is not a JSON"));
  std::remove(path.c_str());
}

// Corrupt files: each fault has its own message.

TEST(SafetensorsHeaderTest, FileShorterThanTheLength) {
  EXPECT_TRUE(Contains(Message(ParseError("abc")), "has 3 bytes, fewer than the 8"));
}

TEST(SafetensorsHeaderTest, HeaderLengthBeyondTheFile) {
  std::string file = BuildFile(std::string(20, ' '));
  file[0] = static_cast<char>(1000 & 0xFF);
  file[1] = static_cast<char>(1000 >> 8);
  EXPECT_TRUE(Contains(Message(ParseError(file)),
                       "header length 1000 is beyond the file: the file has 28 bytes"));
  file[7] = '\x80';  // 2^63 + 1000: no overflow in the comparison.
  EXPECT_TRUE(Contains(Message(ParseError(file)), "is beyond the file"));
}

TEST(SafetensorsHeaderTest, TruncatedDataSection) {
  const std::string path = TempPath("truncated.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", at::ones({4, 4})}}, {}).ok());
  std::string bytes = ReadAll(path);
  std::remove(path.c_str());
  bytes.resize(bytes.size() - 4);
  EXPECT_TRUE(Contains(Message(ParseError(bytes)),
                       "tensor 'w': data_offsets [0, 64] extend beyond the data section of 60 "
                       "bytes"));
}

TEST(SafetensorsHeaderTest, OverlappingRangesNameBothTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  const std::string msg = Message(ParseError(BuildFile(header, std::string(24, '\0'))));
  EXPECT_TRUE(Contains(msg, "tensors 'a'"));
  EXPECT_TRUE(Contains(msg, "and 'b'"));
  EXPECT_TRUE(Contains(msg, "overlap"));
  // A range inside an earlier, longer one overlaps it too, even past a third in between.
  const std::string nested = R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("c":{"dtype":"F32","shape":[1],"data_offsets":[20,24]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(nested, std::string(32, '\0')))), "overlap"));
}

TEST(SafetensorsHeaderTest, UnknownAndUnsupportedDTypes) {
  const std::string unknown = R"({"w":{"dtype":"Q8","shape":[4],"data_offsets":[0,4]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(unknown, std::string(4, '\0')))),
                       "tensor 'w': unknown dtype 'Q8'; supported: F32, F16, BF16"));
  const std::string i64 = R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(i64, std::string(8, '\0')))),
                       "tensor 'w': unsupported dtype I64"));
}

TEST(SafetensorsHeaderTest, ShapeTimesDTypeMustMatchTheRange) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(header, std::string(24, '\0')))),
                       "tensor 'w': shape (2, 3) of F32 needs 24 bytes, but data_offsets [0, 20] "
                       "span 20"));
}

TEST(SafetensorsHeaderTest, ShapeProductOverflowIsCaught) {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(header))), "more bytes than fit in 64 bits"));
  // A zero size makes the product zero, whatever came before it.
  const std::string zero =
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})";
  EXPECT_TRUE(SafetensorsFile::FromBytes(BuildFile(zero)).ok());
}

TEST(SafetensorsHeaderTest, BadJson) {
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile("{\"w\": "))), "the header is not valid JSON"));
}

TEST(SafetensorsHeaderTest, NotAnObject) {
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile("[1, 2]"))),
                       "the header is not a JSON object, got a list"));
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(R"({"w": 3})"))),
                       "tensor 'w': expected an object with dtype, shape and data_offsets, got a "
                       "number"));
  EXPECT_TRUE(
      Contains(Message(ParseError(BuildFile(R"({"w": {"dtype": "F32", "data_offsets": [0, 0]}})"))),
               "tensor 'w': missing \"shape\""));
}

TEST(SafetensorsHeaderTest, NegativeOrFractionalShape) {
  const std::string negative = R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,0]}})";
  EXPECT_TRUE(
      Contains(Message(ParseError(BuildFile(negative))), "tensor 'w': shape[0] is negative (-1)"));
  const std::string fraction = R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,10]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(fraction, std::string(10, '\0')))),
                       "tensor 'w': shape[0] is 2.5, not an integer"));
}

TEST(SafetensorsHeaderTest, BeginAfterEnd) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(header, std::string(8, '\0')))),
                       "tensor 'w': data_offsets [8, 4]: begin is after end"));
}

TEST(SafetensorsHeaderTest, MetadataMustBeStrings) {
  EXPECT_TRUE(Contains(Message(ParseError(BuildFile(R"({"__metadata__": {"k": 1}})"))),
                       "\"__metadata__\" key 'k': value must be a string, got a number"));
  auto ok = ParseSafetensorsHeader(BuildFile(R"({"__metadata__": {"k": "v"}}   )"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->metadata.at("k"), "v");
  EXPECT_TRUE(ok->tensors.empty());
}

}  // namespace
}  // namespace attnserve::model
