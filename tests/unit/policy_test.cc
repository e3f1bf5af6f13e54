// The policy against models' real limits: a Linformer's max length is its linformer_max_len
// when that is the smaller, and a rule whose variant cannot take the request is skipped.
#include "server/policy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "server/model/default_models.h"
#include "server/model/model_io.h"
#include "server/model/model_repository.h"

namespace attnserve::server {
namespace {

namespace fs = std::filesystem;

TEST(PolicyTest, ALinformerShorterThanItsRuleIsSkippedForLongerRequests) {
  v1::ModelConfig config = *model::DefaultModelConfig("linformer");
  config.set_linformer_max_len(40);
  config.clear_max_sequence_length();
  config.set_max_sequence_length(1 << 20);  // what a config.json without the field gets
  auto linformer =
      model::Model::Create("linformer40", config, model::Model::RandomWeights(config, 1));
  ASSERT_TRUE(linformer.ok()) << linformer.status();
  EXPECT_EQ((*linformer)->max_sequence_length(), 40);

  const fs::path dir =
      fs::temp_directory_path() / ("attnserve_policy_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_TRUE(model::WriteModelFolder(**linformer, (dir / "linformer40").string()).ok());
  ASSERT_TRUE(
      model::WriteModelFolder(**model::BuildDefaultModel("mamba"), (dir / "mamba").string()).ok());
  auto repository = model::ModelRepository::LoadFolder(dir.string());
  ASSERT_TRUE(repository.ok()) << repository.status();
  EXPECT_EQ((*repository)->Find("linformer40")->max_sequence_length(), 40);
  auto policy = Policy::Parse("linformer40:64,mamba", **repository);
  ASSERT_TRUE(policy.ok()) << policy.status();
  auto short_request = policy->Resolve("auto", 40, /*stream=*/false);
  auto long_request = policy->Resolve("auto", 41, /*stream=*/false);
  ASSERT_TRUE(short_request.ok() && long_request.ok()) << long_request.status();
  EXPECT_EQ(short_request->model->name(), "linformer40");
  EXPECT_EQ(long_request->model->name(), "mamba") << long_request->reason;
  fs::remove_all(dir);
}

TEST(PolicyTest, AnUnknownModelNameIsEchoedShortAndEscaped) {
  auto repository = model::ModelRepository::BuildDefault();
  ASSERT_TRUE(repository.ok());
  auto policy = Policy::Parse(Policy::kDefaultSpec, **repository);
  ASSERT_TRUE(policy.ok());
  const std::string name = std::string(10000, 'x') + "\n\x01";
  auto resolved = policy->Resolve(name, 1, false);
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kNotFound);
  EXPECT_LT(resolved.status().message().size(), 300u) << resolved.status().message();
  EXPECT_EQ(resolved.status().message().find('\n'), std::string::npos);
}

TEST(PolicyTest, UnboundedRulesServeOnlyStreamsOfUnknownLength) {
  auto repository = model::ModelRepository::BuildDefault();
  ASSERT_TRUE(repository.ok());
  auto policy = Policy::Parse("standard:4095,rwkv:unbounded,mamba", **repository);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->Describe(),
            "[standard up to 4095 tokens, rwkv for streams of unknown length, mamba beyond]");
  auto unknown = policy->Choose(0, /*stream=*/true);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->model->name(), "rwkv");
  EXPECT_EQ(unknown->rule, 2);
  // Known lengths, streamed or not, skip it.
  EXPECT_EQ(policy->Choose(100, true)->model->name(), "standard");
  EXPECT_EQ(policy->Choose(5000, true)->model->name(), "mamba");
  EXPECT_EQ(policy->Choose(5000, false)->model->name(), "mamba");
  // JSON spells it "unbounded": true; a bound, or a variant that cannot stream, is refused.
  const fs::path file = fs::temp_directory_path() / "attnserve_policy_unbounded.json";
  {
    std::ofstream out(file);
    out << R"({"rules": [{"variant": "standard", "max_tokens": 10},
                         {"variant": "linear", "unbounded": true}]})";
  }
  auto from_json = Policy::Parse("@" + file.string(), **repository);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(from_json->Choose(0, true)->model->name(), "linear");
  fs::remove(file);
  auto not_streaming = Policy::Parse("linformer:unbounded,mamba", **repository);
  EXPECT_FALSE(not_streaming.ok());
  EXPECT_NE(std::string(not_streaming.status().message()).find("cannot stream"), std::string::npos)
      << not_streaming.status();
  EXPECT_FALSE(Policy::Parse("rwkv:unbound", **repository).ok());
}

TEST(PolicyTest, TheDefaultKeepsToTheRepositorysVariantsAndOnlyUnboundedRulesAreRefused) {
  // A repository of the earlier default models only (no sliding_window, performer, rwkv).
  const fs::path dir = fs::temp_directory_path() / "attnserve_policy_default_test";
  fs::remove_all(dir);
  for (const char* name : {"standard", "linformer", "mamba"}) {
    auto model = model::BuildDefaultModel(name);
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(model::WriteModelFolder(**model, (dir / name).string()).ok());
  }
  auto repository = model::ModelRepository::LoadFolder(dir.string());
  ASSERT_TRUE(repository.ok()) << repository.status();
  EXPECT_FALSE(Policy::Parse(Policy::kDefaultSpec, **repository).ok());
  std::vector<std::string> dropped;
  auto policy = Policy::ParseDefault(**repository, &dropped);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(dropped, (std::vector<std::string>{"sliding_window", "rwkv"}));
  EXPECT_EQ(policy->Describe(), "[standard up to 4095 tokens, mamba beyond]");
  EXPECT_EQ(policy->Choose(0, /*stream=*/true)->model->name(), "standard");
  fs::remove_all(dir);

  auto defaults = model::ModelRepository::BuildDefault();
  ASSERT_TRUE(defaults.ok());
  auto only_unbounded = Policy::Parse("rwkv:unbounded", **defaults);
  ASSERT_FALSE(only_unbounded.ok());
  EXPECT_NE(std::string(only_unbounded.status().message()).find("only unbounded rules"),
            std::string::npos);
}

TEST(PolicyTest, TheDefaultServesEveryLengthOfARepositoryOfOneModelOrWithAGap) {
  const fs::path dir = fs::temp_directory_path() / "attnserve_policy_one_model_test";
  auto repository_of = [&](std::vector<const char*> names) {
    fs::remove_all(dir);
    for (const char* name : names) {
      auto model = model::BuildDefaultModel(name);
      EXPECT_TRUE(model.ok());
      EXPECT_TRUE(model::WriteModelFolder(**model, (dir / name).string()).ok());
    }
    return model::ModelRepository::LoadFolder(dir.string());
  };
  // One RWKV folder: auto and every length go to it, with no --policy.
  auto one = repository_of({"rwkv"});
  ASSERT_TRUE(one.ok()) << one.status();
  auto policy = Policy::ParseDefault(**one, nullptr);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->Describe(), "[rwkv for streams of unknown length, rwkv at any length]");
  for (auto [length, stream] :
       {std::pair<int64_t, bool>{1, false}, {100000, false}, {0, true}, {5000, true}}) {
    auto d = policy->Choose(length, stream);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->model->name(), "rwkv");
  }
  // standard and linformer only: past standard's 4095 tokens, the model that takes the
  // longest requests (not a RESOURCE_EXHAUSTED gap).
  auto gap = repository_of({"standard", "linformer"});
  ASSERT_TRUE(gap.ok()) << gap.status();
  policy = Policy::ParseDefault(**gap, nullptr);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const model::Model* longest = (*gap)->models()[0];
  for (const model::Model* m : (*gap)->models()) {
    if (m->max_sequence_length() > longest->max_sequence_length()) longest = m;
  }
  EXPECT_EQ(policy->rules().back().variant, longest->name());
  auto d = policy->Choose(5000, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->model->name(), longest->name());
  fs::remove_all(dir);
}

TEST(PolicyTest, TheDefaultFollowsTheSeedsGuide) {
  auto repository = model::ModelRepository::BuildDefault();
  ASSERT_TRUE(repository.ok());
  auto policy = Policy::Parse(Policy::kDefaultSpec, **repository);
  ASSERT_TRUE(policy.ok()) << policy.status();
  for (auto [length, stream, want] :
       {std::tuple<int64_t, bool, const char*>{4095, false, "standard"},
        {4096, false, "sliding_window"},
        {32768, true, "sliding_window"},
        {32769, false, "mamba"},
        {1 << 20, true, "mamba"},
        {0, true, "rwkv"}}) {
    auto d = policy->Choose(length, stream);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->model->name(), want) << length << (stream ? " streaming" : "");
  }
}

}  // namespace
}  // namespace attnserve::server
