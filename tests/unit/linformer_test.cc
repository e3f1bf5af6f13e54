// The `linformer` mixer against its float64 reference, its length limit and its refusal to
// stream.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/linformer/linformer_attention.h"
#include "kernels/linformer/linformer_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using ::attnserve::testing::MaxRelativeError;
using ::attnserve::testing::RandomTensor;

constexpr double kTolerance = 1e-5;

MixerConfig LinformerConfig(int64_t heads, int64_t head_dim, int64_t k, int64_t max_len) {
  MixerConfig c;
  c.kind = MixerKind::kLinformer;
  c.num_heads = heads;
  c.d_model = heads * head_dim;
  c.causal = false;
  c.linformer_k = k;
  c.max_len = max_len;
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

struct LinformerCase {
  int64_t batch, heads, head_dim, k, max_len, length;
};

TEST(LinformerTest, MatchesFloat64Reference) {
  const std::vector<LinformerCase> cases = {
      {1, 1, 16, 8, 64, 1},      {2, 2, 32, 16, 300, 63},   {1, 4, 16, 64, 300, 65},
      {2, 8, 16, 32, 256, 200},  {1, 1, 128, 64, 300, 300}, {1, 2, 64, 128, 300, 300},
      {1, 8, 64, 64, 1024, 777},
  };
  uint64_t seed = 20;
  for (const LinformerCase& c : cases) {
    const MixerConfig config = LinformerConfig(c.heads, c.head_dim, c.k, c.max_len);
    const WeightMap weights = RandomWeights(config, seed++);
    auto mixer = MakeMixer(config, weights);
    ASSERT_NE(mixer, nullptr);
    const at::Tensor x = RandomTensor({c.batch, c.length, config.d_model}, seed++);
    auto got = mixer->Prefill(x, nullptr);
    auto want = LinformerReference(weights, x, c.heads);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->sizes(), x.sizes());
    EXPECT_LE(MaxRelativeError(*got, *want), kTolerance)
        << "B=" << c.batch << " H=" << c.heads << " d=" << c.head_dim << " k=" << c.k
        << " L=" << c.length;
  }
}

TEST(LinformerTest, RandomWeightsHaveTheExpectedShapes) {
  const MixerConfig config = LinformerConfig(2, 16, 24, 100);
  const WeightMap weights = RandomWeights(config, 1);
  ASSERT_EQ(weights.size(), 6u);
  EXPECT_EQ(weights.at("E").sizes(), at::IntArrayRef({100, 24}));
  EXPECT_EQ(weights.at("F").sizes(), at::IntArrayRef({100, 24}));
  EXPECT_FALSE(at::equal(weights.at("E"), weights.at("F")));
  // The same seed gives the same weights.
  EXPECT_TRUE(at::equal(RandomWeights(config, 1).at("E"), weights.at("E")));
}

TEST(LinformerTest, AcceptsMaxLenAndRejectsLongerInputsNamingBothLengths) {
  const MixerConfig config = LinformerConfig(2, 8, 16, 4096);
  auto mixer = MakeMixer(config, RandomWeights(config, 2));
  ASSERT_NE(mixer, nullptr);
  EXPECT_TRUE(mixer->Prefill(RandomTensor({1, 4096, 16}, 3), nullptr).ok());
  ExpectError(mixer->Prefill(at::zeros({1, 5000, 16}), nullptr), absl::StatusCode::kInvalidArgument,
              "sequence length 5000 exceeds linformer max_len 4096");
}

TEST(LinformerTest, InterpolationMatchesItsFloat64Reference) {
  // The interpolation alone, shrinking nothing and stretching by whole and odd factors.
  for (const auto& [rows, length] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 4}, {4, 9}, {64, 128}, {100, 333}, {300, 1024}}) {
    const at::Tensor e = RandomTensor({rows, 24}, rows + length);
    EXPECT_LE(MaxRelativeError(InterpolateLinformerProjection(e, length),
                               LinformerInterpolationReference(e, length)),
              kTolerance)
        << rows << " -> " << length;
  }
  // The whole mixer past max_len, against the reference with the stretched E and F.
  const std::vector<LinformerCase> cases = {
      {1, 2, 16, 8, 64, 65}, {2, 2, 32, 16, 100, 257}, {1, 4, 16, 32, 256, 1000}};
  uint64_t seed = 40;
  for (const LinformerCase& c : cases) {
    MixerConfig config = LinformerConfig(c.heads, c.head_dim, c.k, c.max_len);
    config.linformer_interpolate = true;
    const WeightMap weights = RandomWeights(config, seed++);
    auto mixer = MakeMixer(config, weights);
    ASSERT_NE(mixer, nullptr);
    const at::Tensor x = RandomTensor({c.batch, c.length, config.d_model}, seed++);
    auto got = mixer->Prefill(x, nullptr);
    auto want = LinformerReference(weights, x, c.heads, /*interpolate=*/true);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    // Float32 sums over up to 1000 positions: a little looser than the 1e-5 of shorter inputs.
    EXPECT_LE(MaxRelativeError(*got, *want), 5e-5) << "L=" << c.length;
    // Within max_len nothing changes.
    const at::Tensor short_x = x.narrow(1, 0, c.max_len);
    auto plain = MakeMixer(LinformerConfig(c.heads, c.head_dim, c.k, c.max_len), weights);
    EXPECT_TRUE(at::equal(*mixer->Prefill(short_x, nullptr), *plain->Prefill(short_x, nullptr)));
  }
}

// What interpolation costs in accuracy (docs/benchmarks.md quotes this test's output): the same
// layer on a sequence r times max_len long, interpolated, against the layer at its trained
// length. Two inputs: every token repeated r times (the first of each run is compared with the
// trained output at its position), for which stretching E and F is right when they are smooth
// along the length axis; and a random continuation of the trained-length input (its first
// max_len outputs compared). Two kinds of E and F: smooth (four cosines along the length, as a
// projection that varies slowly with position) and the random-weight default (independent
// rows: interpolation mixes neighbours that have nothing in common).
TEST(LinformerTest, InterpolationAccuracyPastTheTrainedLength) {
  const int64_t max_len = 256, k = 64;
  MixerConfig config = LinformerConfig(4, 16, k, max_len);
  config.linformer_interpolate = true;
  WeightMap random_weights = RandomWeights(config, 77);
  WeightMap smooth_weights = random_weights;
  const at::Tensor position = (at::arange(max_len, at::kDouble) + 0.5) / max_len;  // (N)
  for (const char* name : {kLinformerE, kLinformerF}) {
    const at::Tensor amplitude = RandomTensor({4, k}, name[0]).to(at::kDouble);
    at::Tensor smooth = at::zeros({max_len, k}, at::kDouble);
    for (int f = 0; f < 4; ++f) {
      smooth += at::cos(position * (M_PI * (f + 1))).unsqueeze(1) * amplitude[f].unsqueeze(0);
    }
    smooth_weights[name] = (smooth / std::sqrt(static_cast<double>(k))).to(at::kFloat);
  }
  const at::Tensor base = RandomTensor({1, max_len, config.d_model}, 78);
  for (const auto& [kind, weights] : std::vector<std::pair<const char*, const WeightMap*>>{
           {"smooth", &smooth_weights}, {"random", &random_weights}}) {
    auto mixer = MakeMixer(config, *weights);
    ASSERT_NE(mixer, nullptr);
    const at::Tensor trained = *mixer->Prefill(base, nullptr);
    const auto relative = [&](const at::Tensor& got) {
      return (got - trained).norm().item<double>() / trained.norm().item<double>();
    };
    for (const int64_t r : {2, 4}) {
      const at::Tensor out = *mixer->Prefill(base.repeat_interleave(r, 1), nullptr);
      const double stretched = relative(out.index_select(1, at::arange(0, max_len * r, r)));
      const at::Tensor longer =
          at::cat({base, RandomTensor({1, max_len * (r - 1), config.d_model}, 79 + r)}, 1);
      const double continued = relative(mixer->Prefill(longer, nullptr)->narrow(1, 0, max_len));
      std::printf(
          "linformer interpolation %ldx (max_len %ld -> %ld), %s E and F: relative L2 "
          "error %.4f on a stretched input, %.4f on the prefix of a random continuation\n",
          static_cast<long>(r), static_cast<long>(max_len), static_cast<long>(max_len * r), kind,
          stretched, continued);
      EXPECT_TRUE(std::isfinite(stretched) && std::isfinite(continued));
      if (std::string(kind) == "smooth") {
        // What interpolation is right for: smooth projections, a stretched input.
        EXPECT_LT(stretched, 0.05);
        EXPECT_LT(stretched, 0.25 * continued);
      }
    }
  }
}

TEST(LinformerTest, CannotStream) {
  const MixerConfig config = LinformerConfig(2, 16, 8, 64);
  auto mixer = MakeMixer(config, RandomWeights(config, 4));
  ASSERT_NE(mixer, nullptr);
  EXPECT_FALSE(mixer->can_stream());
  EXPECT_EQ(mixer->StateBytesPerSequence(10), 0);
  const std::string why = "linformer attention cannot stream";
  ExpectError(mixer->InitialState(1), absl::StatusCode::kFailedPrecondition, why);
  MixerState state;
  ExpectError(mixer->Step(at::zeros({1, 32}), &state), absl::StatusCode::kFailedPrecondition,
              "cannot stream (Step): it is not causal");
  ExpectError(mixer->Prefill(at::zeros({1, 3, 32}), &state), absl::StatusCode::kFailedPrecondition,
              "use standard (causal), linear or mamba");
}

TEST(LinformerTest, RejectsBadInputs) {
  const MixerConfig config = LinformerConfig(2, 16, 8, 64);
  auto mixer = MakeMixer(config, RandomWeights(config, 5));
  ASSERT_NE(mixer, nullptr);
  ExpectError(mixer->Prefill(at::zeros({1, 4, 32}, at::kDouble), nullptr),
              absl::StatusCode::kInvalidArgument,
              "x: expected float32 cpu tensor of shape (?, ?, 32), got float64");
  ExpectError(mixer->Prefill(at::zeros({1, 2, 4, 32}), nullptr), absl::StatusCode::kInvalidArgument,
              "got float32 cpu (1, 2, 4, 32)");
  ExpectError(mixer->Prefill(at::zeros({1, 4, 31}), nullptr), absl::StatusCode::kInvalidArgument,
              "got float32 cpu (1, 4, 31)");
}

TEST(LinformerTest, CreateMixerRejectsMissingAndMisshapenWeights) {
  const MixerConfig config = LinformerConfig(2, 16, 8, 64);
  WeightMap missing = RandomWeights(config, 1);
  missing.erase("F");
  ExpectError(CreateMixer(config, missing), absl::StatusCode::kInvalidArgument,
              "linformer mixer: missing tensor 'F' of shape (64, 8)");
  WeightMap misshapen = RandomWeights(config, 1);
  misshapen["E"] = at::zeros({32, 8});
  ExpectError(CreateMixer(config, misshapen), absl::StatusCode::kInvalidArgument,
              "tensor 'E' expected float32 (64, 8), got float32 (32, 8)");
  MixerConfig causal = config;
  causal.causal = true;
  ExpectError(CreateMixer(causal, RandomWeights(config, 1)), absl::StatusCode::kInvalidArgument,
              "linformer is not causal");
}

}  // namespace
}  // namespace attnserve::kernels
