// bfloat16 KV caches (ModelOptions::kv_cache_dtype, --kv_cache_precision=bf16) through whole
// models: a whole pass, chunks and steps agree; a batch's rows are the session alone's bits; a
// state sharing its prefix continues like its source; snapshots round-trip and do not load into
// a float32-cache model; the caches hold half the bytes; outputs stay near the float32 cache's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/model/default_models.h"
#include "server/model/model.h"
#include "server/model/model_repository.h"
#include "server/sessions/session_snapshot.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

ModelOptions Bf16Cache() {
  ModelOptions options;
  options.kv_cache_dtype = at::kBFloat16;
  return options;
}

at::Tensor Tokens(int64_t n, int64_t offset) {
  return (at::arange(n, at::kLong) * 37 + offset).remainder(4096).unsqueeze(0);
}

class Bf16KvCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16KvCacheTest, WholePassChunksAndStepsAgree) {
  auto model = BuildDefaultModel(GetParam(), Bf16Cache());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const at::Tensor tokens = Tokens(90, 3);
  const at::Tensor whole = *m.Forward(tokens, nullptr, OutputKind::kAllLogits);
  ModelState state = *m.NewState();
  std::vector<at::Tensor> parts;
  parts.push_back(*m.Forward(tokens.narrow(1, 0, 33), &state, OutputKind::kAllLogits));
  parts.push_back(*m.Forward(tokens.narrow(1, 33, 40), &state, OutputKind::kAllLogits));
  for (int64_t t = 73; t < 90; ++t) {
    auto step = m.StepBatch({tokens[0][t].item<int64_t>()}, {&state});
    ASSERT_TRUE(step.ok()) << step.status();
    parts.push_back(step->unsqueeze(1));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(parts, 1), whole), 1e-5);
  // The standard layers' caches are bfloat16: half the float32 cache's bytes.
  bool any_bf16 = false;
  for (const kernels::MixerState& layer : state.layers) {
    for (const at::Tensor& t : layer.tensors) any_bf16 |= t.scalar_type() == at::kBFloat16;
  }
  EXPECT_TRUE(any_bf16);
  auto fp32 = BuildDefaultModel(GetParam());
  ASSERT_TRUE(fp32.ok());
  const int64_t cache_bytes_fp32 =
      (*fp32)->StateBytesPerSequence(1000) - (*fp32)->StateBytesPerSequence(0);
  const int64_t cache_bytes_bf16 = m.StateBytesPerSequence(1000) - m.StateBytesPerSequence(0);
  EXPECT_EQ(2 * cache_bytes_bf16, cache_bytes_fp32);
  EXPECT_NE(m.fingerprint(), (*fp32)->fingerprint());
  // Near the float32 cache's logits: the keys and values differ by bfloat16's rounding.
  const at::Tensor want = *(*fp32)->Forward(tokens, nullptr, OutputKind::kAllLogits);
  const double error = testing::MaxRelativeError(whole, want);
  EXPECT_GT(error, 0);
  EXPECT_LE(error, 2e-2);
}

TEST_P(Bf16KvCacheTest, BatchRowsAndSharedPrefixesKeepTheSessionsBits) {
  auto model = BuildDefaultModel(GetParam(), Bf16Cache());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  constexpr int kSessions = 5;
  std::vector<ModelState> batched, alone;
  for (int i = 0; i < kSessions; ++i) {
    ModelState s = *m.NewState();
    ASSERT_TRUE(m.Forward(Tokens(1 + 9 * i, i), &s, OutputKind::kLastLogits).ok());
    alone.push_back(s.Clone());
    batched.push_back(std::move(s));
  }
  // One more row: a state sharing session 4's prefix (a prefix-cache hit, a fork).
  auto sharing = m.CloneSharingPrefix(alone[4], 8);
  ASSERT_TRUE(sharing.ok()) << sharing.status();
  ModelState sharing_alone = alone[4].Clone();
  batched.push_back(*std::move(sharing));
  alone.push_back(std::move(sharing_alone));
  for (int step = 0; step < 4; ++step) {
    std::vector<int64_t> tokens;
    std::vector<ModelState*> states;
    for (size_t i = 0; i < batched.size(); ++i) {
      tokens.push_back((step * 71 + static_cast<int64_t>(i) * 13) % m.vocab_size());
      states.push_back(&batched[i]);
    }
    auto logits = m.StepBatch(tokens, states);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t r = 0; r < tokens.size(); ++r) {
      auto one = m.StepBatch({tokens[r]}, {&alone[r]});
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_TRUE(at::equal(logits->narrow(0, static_cast<int64_t>(r), 1), *one))
          << "row " << r << " step " << step;
    }
  }
  // A prompt chunk on the sharing state (its segments flattened into one bfloat16 cache).
  const at::Tensor a = *m.Forward(Tokens(6, 1), &batched.back(), OutputKind::kAllLogits);
  const at::Tensor b = *m.Forward(Tokens(6, 1), &alone.back(), OutputKind::kAllLogits);
  EXPECT_TRUE(at::equal(a, b));
}

TEST_P(Bf16KvCacheTest, SnapshotsRoundTripAndStayWithTheirPrecision) {
  auto bf16 = ModelRepository::BuildDefault(Bf16Cache());
  auto fp32 = ModelRepository::BuildDefault();
  ASSERT_TRUE(bf16.ok() && fp32.ok());
  const Model& m = *(*bf16)->Find(GetParam());
  server::Session session("0123456789abcdef0123456789abcdef", &m, absl::Minutes(5), *m.NewState());
  ASSERT_TRUE(m.Forward(Tokens(41, 2), &session.state, OutputKind::kLastLogits).ok());
  const std::string bytes = server::EncodeSessionSnapshot(session);
  EXPECT_LE(static_cast<int64_t>(bytes.size()), m.StateBytesPerSequence(41) + 4096);
  auto restored = server::DecodeSessionSnapshot(bytes, **bf16);
  ASSERT_TRUE(restored.ok()) << restored.status();
  std::vector<at::Tensor> unbroken, resumed;
  unbroken.push_back(*m.Forward(Tokens(7, 5), &session.state, OutputKind::kAllLogits));
  resumed.push_back(*m.Forward(Tokens(7, 5), &restored->state, OutputKind::kAllLogits));
  for (int t = 0; t < 3; ++t) {
    unbroken.push_back(m.StepBatch({t + 1}, {&session.state})->unsqueeze(1));
    resumed.push_back(m.StepBatch({t + 1}, {&restored->state})->unsqueeze(1));
  }
  EXPECT_TRUE(at::equal(at::cat(unbroken, 1), at::cat(resumed, 1)));
  // A float32-cache server refuses it (another fingerprint), and the other way round.
  EXPECT_FALSE(server::DecodeSessionSnapshot(bytes, **fp32).ok());
  const Model& m32 = *(*fp32)->Find(GetParam());
  server::Session session32("0123456789abcdef0123456789abcdef", &m32, absl::Minutes(5),
                            *m32.NewState());
  ASSERT_TRUE(m32.Forward(Tokens(41, 2), &session32.state, OutputKind::kLastLogits).ok());
  EXPECT_FALSE(
      server::DecodeSessionSnapshot(server::EncodeSessionSnapshot(session32), **bf16).ok());
}

INSTANTIATE_TEST_SUITE_P(KvCacheModels, Bf16KvCacheTest, ::testing::Values("standard", "hybrid"));

TEST(Bf16KvCacheTest, OnlyFloat32OrBfloat16OnTheCpu) {
  ModelOptions options;
  options.kv_cache_dtype = at::kHalf;
  EXPECT_EQ(BuildDefaultModel("standard", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve::model
