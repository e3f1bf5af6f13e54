// server/model/torch_pickle.h: torch.save files (written here by LibTorch's pickle_save, the
// format torch.save writes and torch.load reads) read back as safetensors, and what is refused.
#include "server/model/torch_pickle.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace attnserve::model {
namespace {

std::string WriteFile(const std::string& name, const std::vector<char>& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  return path;
}

std::string SaveDict(const std::string& name, const c10::impl::GenericDict& dict) {
  return WriteFile(name, torch::jit::pickle_save(c10::IValue(dict)));
}

TEST(TorchPickleTest, ReadsAStateDictOfFloatTensors) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  const at::Tensor a = at::randn({3, 4}), b = at::randn({5}).to(at::kBFloat16),
                   c = at::randn({2, 2}, at::kDouble), tied = a;
  dict.insert("backbone.embedding.weight", a);
  dict.insert("lm_head.weight", tied);
  dict.insert("norm.weight", b);
  dict.insert("A_log", c);
  auto file = OpenTorchPickle(SaveDict("state.bin", dict));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->names().size(), 4u);
  EXPECT_TRUE(at::equal((*file)->LoadFloat32("backbone.embedding.weight").value(), a));
  EXPECT_TRUE(at::equal((*file)->LoadFloat32("lm_head.weight").value(), a));
  EXPECT_TRUE(at::equal((*file)->LoadFloat32("norm.weight").value(), b.to(at::kFloat)));
  EXPECT_TRUE(at::equal((*file)->LoadFloat32("A_log").value(), c.to(at::kFloat)));
  EXPECT_EQ((*file)->Find("norm.weight")->dtype, SafetensorsDType::kBF16);
}

TEST(TorchPickleTest, RefusesWhatIsNotAStateDictOfFloats) {
  c10::impl::GenericDict ints(c10::StringType::get(), c10::TensorType::get());
  ints.insert("steps", at::arange(4));
  auto refused = OpenTorchPickle(SaveDict("ints.bin", ints));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'steps' is Long"), std::string::npos)
      << refused.status();

  const std::string list = WriteFile(
      "list.bin", torch::jit::pickle_save(c10::IValue(c10::List<at::Tensor>({at::ones({2})}))));
  refused = OpenTorchPickle(list);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("expected a dict"), std::string::npos)
      << refused.status();

  refused = OpenTorchPickle(WriteFile("text.bin", {'n', 'o', 't', ' ', 'a', ' ', 'z', 'i', 'p'}));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not a zip archive"), std::string::npos);

  refused = OpenTorchPickle(WriteFile("zip.bin", {'P', 'K', '\x03', '\x04', 'x', 'y'}));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("could not unpickle"), std::string::npos)
      << refused.status();

  EXPECT_EQ(OpenTorchPickle(::testing::TempDir() + "/absent.bin").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace attnserve::model
