// The linear attention kernels and the `linear` mixer against the float64 recurrence, the
// streaming contract and the error cases.
#include "kernels/linear/linear_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/linear/linear_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using ::attnserve::testing::MaxRelativeError;
using ::attnserve::testing::RandomTensor;

constexpr double kTolerance = 1e-5;

MixerConfig LinearConfig(int64_t heads, int64_t head_dim, bool causal) {
  MixerConfig c;
  c.kind = MixerKind::kLinear;
  c.num_heads = heads;
  c.d_model = heads * head_dim;
  c.causal = causal;
  return c;
}

std::unique_ptr<Mixer> MakeMixer(const MixerConfig& config, const WeightMap& weights) {
  auto mixer = CreateMixer(config, weights);
  EXPECT_TRUE(mixer.ok()) << mixer.status();
  return mixer.ok() ? std::move(*mixer) : nullptr;
}

template <typename T>
void ExpectError(const absl::StatusOr<T>& result, absl::StatusCode code, const std::string& text) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), text))
      << "message: " << result.status().message() << "\nexpected to contain: " << text;
}

std::vector<int64_t> RandomSplit(int64_t length, int64_t max_chunk, std::mt19937& rng) {
  std::vector<int64_t> sizes;
  for (int64_t pos = 0; pos < length;) {
    const int64_t n = std::min<int64_t>(length - pos, 1 + static_cast<int64_t>(rng() % max_chunk));
    sizes.push_back(n);
    pos += n;
  }
  return sizes;
}

struct MixerCase {
  int64_t batch, heads, head_dim, length;
  bool causal;
};

TEST(LinearAttentionTest, MatchesFloat64Reference) {
  const std::vector<MixerCase> cases = {
      {1, 1, 16, 1, true},   {2, 2, 32, 1, false},   {1, 4, 16, 63, true},
      {2, 1, 128, 65, true}, {1, 8, 16, 65, false},  {2, 2, 64, 200, true},
      {1, 3, 32, 300, true}, {1, 4, 32, 300, false}, {1, 8, 64, 129, true},
  };
  uint64_t seed = 30;
  for (const MixerCase& c : cases) {
    const MixerConfig config = LinearConfig(c.heads, c.head_dim, c.causal);
    const WeightMap weights = RandomWeights(config, seed++);
    auto mixer = MakeMixer(config, weights);
    ASSERT_NE(mixer, nullptr);
    const at::Tensor x = RandomTensor({c.batch, c.length, config.d_model}, seed++);
    auto got = mixer->Prefill(x, nullptr);
    auto want = LinearAttentionReference(weights, x, c.heads, c.causal);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->sizes(), x.sizes());
    EXPECT_LE(MaxRelativeError(*got, *want), kTolerance)
        << "B=" << c.batch << " H=" << c.heads << " d=" << c.head_dim << " L=" << c.length
        << " causal=" << c.causal;
  }
}

// The chunked kernel, from a non-zero incoming state and with any chunk size, equals the
// one-token recurrence, and hands over the same final state.
TEST(LinearAttentionTest, ChunkedKernelContinuesFromAStateLikeTheRecurrence) {
  const int64_t b = 2, h = 3, l = 131, d = 16;
  const at::Tensor q = RandomTensor({b, h, l, d}, 1);
  const at::Tensor k = RandomTensor({b, h, l, d}, 2);
  const at::Tensor v = RandomTensor({b, h, l, d}, 3);
  // A state as if 50 tokens came before: S = Σ φ(k) vᵀ, z = Σ φ(k) > 0.
  const at::Tensor fk0 = at::elu(RandomTensor({b, h, 50, d}, 4)) + 1;
  const at::Tensor s0 = at::matmul(fk0.transpose(-1, -2), RandomTensor({b, h, 50, d}, 5));
  const at::Tensor z0 = fk0.sum(2);

  at::Tensor s = s0, z = z0;
  std::vector<at::Tensor> steps;
  for (int64_t t = 0; t < l; ++t) {
    auto r = CausalLinearAttentionStepCpu(q.select(2, t), k.select(2, t), v.select(2, t), s, z);
    ASSERT_TRUE(r.ok()) << r.status();
    steps.push_back(r->out);
    s = r->s;
    z = r->z;
  }
  const at::Tensor want = at::stack(steps, 2);
  for (int64_t chunk : {1, 7, 64, 1000}) {
    auto got = CausalLinearAttentionCpu(q, k, v, s0, z0, chunk);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(MaxRelativeError(got->out, want), kTolerance) << "chunk " << chunk;
    EXPECT_LE(MaxRelativeError(got->s, s), kTolerance) << "chunk " << chunk;
    EXPECT_LE(MaxRelativeError(got->z, z), kTolerance) << "chunk " << chunk;
  }
  // The inputs are left as they were.
  EXPECT_TRUE(at::equal(s0, at::matmul(fk0.transpose(-1, -2), RandomTensor({b, h, 50, d}, 5))));
}

// q, k, v may be strided views, such as the heads of one (B, L, 3, H, d) projection.
TEST(LinearAttentionTest, KernelsAcceptStridedInputs) {
  const int64_t b = 2, h = 2, l = 70, d = 16;
  const at::Tensor qkv = RandomTensor({b, l, 3, h, d}, 11).permute({2, 0, 3, 1, 4});
  const at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  ASSERT_FALSE(q.is_contiguous());
  const at::Tensor s0 = at::zeros({b, h, d, d}), z0 = at::zeros({b, h, d});
  auto strided = CausalLinearAttentionCpu(q, k, v, s0, z0);
  auto dense = CausalLinearAttentionCpu(q.contiguous(), k.contiguous(), v.contiguous(), s0, z0);
  ASSERT_TRUE(strided.ok() && dense.ok());
  EXPECT_LE(MaxRelativeError(strided->out, dense->out), 1e-6);
  auto strided_full = LinearAttentionCpu(q, k, v);
  auto dense_full = LinearAttentionCpu(q.contiguous(), k.contiguous(), v.contiguous());
  ASSERT_TRUE(strided_full.ok() && dense_full.ok());
  EXPECT_LE(MaxRelativeError(*strided_full, *dense_full), 1e-6);
}

TEST(LinearAttentionTest, RandomChunkSplitsEqualOneWholePass) {
  const MixerConfig config = LinearConfig(4, 16, true);
  const WeightMap weights = RandomWeights(config, 3);
  auto mixer = MakeMixer(config, weights);
  ASSERT_NE(mixer, nullptr);
  const int64_t batch = 2, length = 300;
  const at::Tensor x = RandomTensor({batch, length, config.d_model}, 4);
  auto whole = mixer->Prefill(x, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status();

  std::mt19937 rng(6);
  for (int64_t max_chunk : {3, 70, 200}) {
    auto state = mixer->InitialState(batch);
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<at::Tensor> pieces;
    for (int64_t n : RandomSplit(length, max_chunk, rng)) {
      auto y = mixer->Prefill(x.narrow(1, state->position, n), &*state);
      ASSERT_TRUE(y.ok()) << y.status();
      pieces.push_back(*y);
    }
    EXPECT_EQ(state->position, length);
    EXPECT_LE(MaxRelativeError(at::cat(pieces, 1), *whole), kTolerance)
        << "chunks of at most " << max_chunk;
  }
}

TEST(LinearAttentionTest, StepsEqualOnePrefillWithAFixedSizeState) {
  const MixerConfig config = LinearConfig(2, 32, true);
  auto mixer = MakeMixer(config, RandomWeights(config, 7));
  ASSERT_NE(mixer, nullptr);
  const int64_t batch = 2, length = 100;
  const at::Tensor x = RandomTensor({batch, length, config.d_model}, 8);
  auto whole = mixer->Prefill(x, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status();

  auto state = mixer->InitialState(batch);
  ASSERT_TRUE(state.ok()) << state.status();
  const int64_t bytes = state->Bytes();
  EXPECT_EQ(bytes, batch * mixer->StateBytesPerSequence(0));
  std::vector<at::Tensor> steps;
  for (int64_t t = 0; t < length; ++t) {
    auto y = mixer->Step(x.select(1, t), &*state);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->sizes(), at::IntArrayRef({batch, config.d_model}));
    steps.push_back(y->unsqueeze(1));
  }
  EXPECT_LE(MaxRelativeError(at::cat(steps, 1), *whole), kTolerance);
  EXPECT_EQ(state->position, length);
  EXPECT_EQ(state->Bytes(), bytes);
  EXPECT_EQ(mixer->StateBytesPerSequence(length), (2 * 32 * 32 + 2 * 32) * 4);
}

TEST(LinearAttentionTest, RejectsBadInputs) {
  const MixerConfig config = LinearConfig(2, 16, true);
  auto mixer = MakeMixer(config, RandomWeights(config, 1));
  ASSERT_NE(mixer, nullptr);
  ExpectError(mixer->Prefill(at::zeros({1, 4, 32}, at::kDouble), nullptr),
              absl::StatusCode::kInvalidArgument,
              "x: expected float32 cpu tensor of shape (?, ?, 32), got float64");
  ExpectError(mixer->Prefill(at::zeros({4, 32}), nullptr), absl::StatusCode::kInvalidArgument,
              "got float32 cpu (4, 32)");
  ExpectError(mixer->Prefill(at::zeros({1, 4, 64}), nullptr), absl::StatusCode::kInvalidArgument,
              "got float32 cpu (1, 4, 64)");
  auto state = mixer->InitialState(2);
  ASSERT_TRUE(state.ok());
  ExpectError(mixer->Step(at::zeros({1, 32}), &*state), absl::StatusCode::kInvalidArgument,
              "linear state holds a batch of 2 sequences, but x has 1");
  ExpectError(mixer->Prefill(at::zeros({3, 5, 32}), &*state), absl::StatusCode::kInvalidArgument,
              "but x has 3");
  MixerState wrong = *state;
  wrong.tensors[1] = at::zeros({2, 2, 8});
  ExpectError(
      mixer->Step(at::zeros({2, 32}), &wrong), absl::StatusCode::kInvalidArgument,
      "linear state z: expected float32 cpu tensor of shape (2, 2, 16), got float32 cpu (2, 2, 8)");
  ExpectError(CausalLinearAttentionCpu(at::zeros({1, 2, 3, 16}), at::zeros({1, 2, 3, 16}),
                                       at::zeros({1, 2, 3, 16}, at::kDouble),
                                       at::zeros({1, 2, 16, 16}), at::zeros({1, 2, 16})),
              absl::StatusCode::kInvalidArgument, "v: expected float32");
}

TEST(LinearAttentionTest, BidirectionalCannotStream) {
  const MixerConfig config = LinearConfig(2, 16, false);
  auto mixer = MakeMixer(config, RandomWeights(config, 1));
  ASSERT_NE(mixer, nullptr);
  EXPECT_FALSE(mixer->can_stream());
  EXPECT_EQ(mixer->StateBytesPerSequence(10), 0);
  const std::string why = "linear attention is bidirectional (causal=false): it cannot stream";
  ExpectError(mixer->InitialState(1), absl::StatusCode::kFailedPrecondition, why);
  MixerState state;
  ExpectError(mixer->Step(at::zeros({1, 32}), &state), absl::StatusCode::kFailedPrecondition, why);
  ExpectError(mixer->Prefill(at::zeros({1, 3, 32}), &state), absl::StatusCode::kFailedPrecondition,
              why);
}

TEST(LinearAttentionTest, CreateMixerRejectsMissingAndMisshapenWeights) {
  const MixerConfig config = LinearConfig(2, 16, true);
  WeightMap missing = RandomWeights(config, 1);
  missing.erase("v_proj.weight");
  ExpectError(CreateMixer(config, missing), absl::StatusCode::kInvalidArgument,
              "linear mixer: missing tensor 'v_proj.weight' of shape (32, 32)");
  WeightMap misshapen = RandomWeights(config, 1);
  misshapen["q_proj.weight"] = at::zeros({32});
  ExpectError(CreateMixer(config, misshapen), absl::StatusCode::kInvalidArgument,
              "tensor 'q_proj.weight' expected float32 (32, 32), got float32 (32)");
  WeightMap extra = RandomWeights(config, 1);
  extra["E"] = at::zeros({4, 4});
  ExpectError(CreateMixer(config, extra), absl::StatusCode::kInvalidArgument,
              "unexpected tensor 'E'");
}

}  // namespace
}  // namespace attnserve::kernels
