// The tiled attention kernel and the `standard` mixer against their float64 references, the
// streaming contract (chunks, steps, the KV cache) and the error cases.
#include "kernels/standard/standard_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/kv_cache.h"
#include "kernels/standard/standard_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using ::attnserve::testing::MaxRelativeError;
using ::attnserve::testing::RandomTensor;

constexpr double kTolerance = 1e-5;

MixerConfig StandardConfig(int64_t heads, int64_t head_dim, bool causal) {
  MixerConfig c;
  c.kind = MixerKind::kStandard;
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

// Expects `status` to have `code` and a message containing `text`.
template <typename T>
void ExpectError(const absl::StatusOr<T>& result, absl::StatusCode code, const std::string& text) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), text))
      << "message: " << result.status().message() << "\nexpected to contain: " << text;
}

// Chunk sizes from 1 to max_chunk, summing to `length`, drawn from `rng`.
std::vector<int64_t> RandomSplit(int64_t length, int64_t max_chunk, std::mt19937& rng) {
  std::vector<int64_t> sizes;
  for (int64_t pos = 0; pos < length;) {
    const int64_t n = std::min<int64_t>(length - pos, 1 + static_cast<int64_t>(rng() % max_chunk));
    sizes.push_back(n);
    pos += n;
  }
  return sizes;
}

struct KernelCase {
  int64_t batch, heads, lq, lk, d;
  bool causal;
  FlashAttentionTiles tiles;
};

// Tile sizes from 5 to the default 256, square and not, so that short sequences also meet
// several query and key tiles, diagonal tiles, tiles skipped whole and ragged last tiles.
TEST(StandardFlashAttentionTest, MatchesNaiveReference) {
  const std::vector<KernelCase> cases = {
      {1, 1, 1, 1, 16, true, {}},           {1, 1, 1, 1, 16, false, {}},
      {2, 3, 63, 63, 32, true, {16, 16}},   {1, 2, 65, 65, 64, true, {32, 32}},
      {1, 8, 200, 200, 16, true, {64, 16}}, {2, 2, 200, 200, 128, false, {64, 32}},
      {1, 4, 300, 300, 64, true, {}},       {1, 2, 300, 300, 32, false, {}},
      {1, 2, 97, 97, 16, true, {7, 13}},    {1, 1, 97, 97, 16, true, {13, 7}},
      {2, 1, 65, 65, 48, false, {5, 64}},
  };
  uint64_t seed = 1;
  for (const KernelCase& c : cases) {
    const at::Tensor q = RandomTensor({c.batch, c.heads, c.lq, c.d}, seed++);
    const at::Tensor k = RandomTensor({c.batch, c.heads, c.lk, c.d}, seed++);
    const at::Tensor v = RandomTensor({c.batch, c.heads, c.lk, c.d}, seed++);
    auto got = FlashAttentionCpu(q, k, v, c.causal, c.tiles);
    auto want = NaiveAttentionReference(q, k, v, c.causal);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->sizes(), q.sizes());
    EXPECT_LE(MaxRelativeError(*got, *want), kTolerance)
        << "B=" << c.batch << " H=" << c.heads << " L=" << c.lq << " d=" << c.d
        << " causal=" << c.causal << " tiles=" << c.tiles.query << "x" << c.tiles.key;
  }
}

// Streaming: the queries are the last Lq of Lk positions (a chunk after a KV prefix), and the
// keys may be a strided view (the valid part of a larger cache).
TEST(StandardFlashAttentionTest, KvPrefixMatchesNaiveReference) {
  const std::vector<KernelCase> cases = {
      {1, 2, 1, 50, 16, true, {}},         {1, 2, 1, 50, 16, true, {8, 8}},
      {2, 2, 17, 100, 32, true, {16, 16}}, {1, 4, 37, 101, 64, true, {32, 16}},
      {1, 1, 100, 300, 16, true, {7, 13}}, {1, 2, 64, 64, 16, true, {16, 16}},
      {1, 2, 30, 90, 16, false, {16, 32}},
  };
  uint64_t seed = 100;
  for (const KernelCase& c : cases) {
    const at::Tensor q = RandomTensor({c.batch, c.heads, c.lq, c.d}, seed++);
    // Valid part of a cache with spare capacity, as the standard mixer passes it.
    const at::Tensor k =
        RandomTensor({c.batch, c.heads, c.lk + 11, c.d}, seed++).narrow(2, 0, c.lk);
    const at::Tensor v =
        RandomTensor({c.batch, c.heads, c.lk + 11, c.d}, seed++).narrow(2, 0, c.lk);
    auto got = FlashAttentionCpu(q, k, v, c.causal, c.tiles);
    auto want = NaiveAttentionReference(q, k, v, c.causal);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_LE(MaxRelativeError(*got, *want), kTolerance)
        << "Lq=" << c.lq << " Lk=" << c.lk << " tiles=" << c.tiles.query << "x" << c.tiles.key;
  }
}

// One moderate shape with the default tiles: several query and key tiles of 256.
TEST(StandardFlashAttentionTest, ModerateShapeMatchesNaiveReference) {
  const at::Tensor q = RandomTensor({1, 4, 700, 64}, 7);
  const at::Tensor k = RandomTensor({1, 4, 900, 64}, 8);
  const at::Tensor v = RandomTensor({1, 4, 900, 64}, 9);
  for (bool causal : {true, false}) {
    auto got = FlashAttentionCpu(q, k, v, causal);
    auto want = NaiveAttentionReference(q, k, v, causal);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_LE(MaxRelativeError(*got, *want), kTolerance) << "causal=" << causal;
  }
}

TEST(StandardFlashAttentionTest, RejectsBadInputs) {
  const at::Tensor q = RandomTensor({1, 2, 8, 16}, 1);
  const at::Tensor k = RandomTensor({1, 2, 8, 16}, 2);
  ExpectError(FlashAttentionCpu(q.to(at::kDouble), k, k, true), absl::StatusCode::kInvalidArgument,
              "q: expected float32");
  ExpectError(FlashAttentionCpu(q, k.narrow(2, 0, 4), k.narrow(2, 0, 4), true),
              absl::StatusCode::kInvalidArgument, "Lq = 8, Lk = 4");
  ExpectError(FlashAttentionCpu(q, RandomTensor({1, 2, 8, 32}, 3), k, false),
              absl::StatusCode::kInvalidArgument,
              "k: expected float32 cpu tensor of shape (1, 2, ?, 16)");
  ExpectError(FlashAttentionCpu(q, k, k, true, {0, 16}), absl::StatusCode::kInvalidArgument,
              "tiles must be > 0");
}

struct MixerCase {
  int64_t batch, heads, head_dim, length;
  bool causal;
};

TEST(StandardAttentionTest, MatchesFloat64Reference) {
  const std::vector<MixerCase> cases = {
      {1, 1, 16, 1, true},   {2, 2, 32, 1, false},   {1, 4, 16, 63, true},
      {2, 1, 128, 65, true}, {1, 8, 16, 65, false},  {2, 2, 64, 200, true},
      {1, 3, 32, 300, true}, {1, 4, 32, 300, false}, {1, 8, 64, 257, true},
  };
  uint64_t seed = 10;
  for (const MixerCase& c : cases) {
    const MixerConfig config = StandardConfig(c.heads, c.head_dim, c.causal);
    const WeightMap weights = RandomWeights(config, seed++);
    auto mixer = MakeMixer(config, weights);
    ASSERT_NE(mixer, nullptr);
    const at::Tensor x = RandomTensor({c.batch, c.length, config.d_model}, seed++);
    auto got = mixer->Prefill(x, nullptr);
    auto want = StandardAttentionReference(weights, x, c.heads, c.causal);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->sizes(), x.sizes());
    EXPECT_LE(MaxRelativeError(*got, *want), kTolerance)
        << "B=" << c.batch << " H=" << c.heads << " d=" << c.head_dim << " L=" << c.length
        << " causal=" << c.causal;
  }
}

TEST(StandardAttentionTest, RandomChunkSplitsEqualOneWholePass) {
  const MixerConfig config = StandardConfig(4, 16, true);
  const WeightMap weights = RandomWeights(config, 3);
  auto mixer = MakeMixer(config, weights);
  ASSERT_NE(mixer, nullptr);
  const int64_t batch = 2, length = 300;
  const at::Tensor x = RandomTensor({batch, length, config.d_model}, 4);
  auto whole = mixer->Prefill(x, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto want = StandardAttentionReference(weights, x, config.num_heads, true);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LE(MaxRelativeError(*whole, *want), kTolerance);

  std::mt19937 rng(5);
  for (int64_t max_chunk : {3, 70, 280}) {
    auto state = mixer->InitialState(batch);
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<at::Tensor> pieces;
    int64_t pos = 0;
    for (int64_t n : RandomSplit(length, max_chunk, rng)) {
      auto y = mixer->Prefill(x.narrow(1, pos, n), &*state);
      ASSERT_TRUE(y.ok()) << y.status();
      pieces.push_back(*y);
      pos += n;
      ASSERT_EQ(state->position, pos);
      ASSERT_GE(state->tensors[0].size(2), pos);
    }
    EXPECT_LE(MaxRelativeError(at::cat(pieces, 1), *whole), kTolerance)
        << "chunks of at most " << max_chunk;
  }
}

TEST(StandardAttentionTest, StepsEqualOnePrefill) {
  const MixerConfig config = StandardConfig(2, 32, true);
  auto mixer = MakeMixer(config, RandomWeights(config, 6));
  ASSERT_NE(mixer, nullptr);
  const int64_t batch = 2, length = 150;
  const at::Tensor x = RandomTensor({batch, length, config.d_model}, 7);
  auto whole = mixer->Prefill(x, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status();

  auto state = mixer->InitialState(batch);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<at::Tensor> steps;
  std::vector<int64_t> capacities;
  for (int64_t t = 0; t < length; ++t) {
    auto y = mixer->Step(x.select(1, t), &*state);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->sizes(), at::IntArrayRef({batch, config.d_model}));
    steps.push_back(y->unsqueeze(1));
    if (capacities.empty() || capacities.back() != state->tensors[0].size(2)) {
      capacities.push_back(state->tensors[0].size(2));
    }
  }
  EXPECT_LE(MaxRelativeError(at::cat(steps, 1), *whole), kTolerance);
  EXPECT_EQ(state->position, length);
  // The cache doubles: 150 steps reallocate it only a few times (64, 128, 256).
  EXPECT_EQ(capacities, (std::vector<int64_t>{64, 128, 256}));
  // The reported size is the valid part; Bytes() also counts the spare capacity.
  EXPECT_EQ(mixer->StateBytesPerSequence(length), 2 * 2 * length * 32 * 4);
  EXPECT_EQ(state->Bytes(), batch * 2 * 2 * 256 * 32 * 4);
}

TEST(StandardAttentionTest, ShallowCopyOfAStateKeepsItsPrefix) {
  // Appends write beyond the valid prefix only, so an earlier shallow copy stays usable.
  const MixerConfig config = StandardConfig(2, 16, true);
  auto mixer = MakeMixer(config, RandomWeights(config, 8));
  ASSERT_NE(mixer, nullptr);
  const at::Tensor x = RandomTensor({1, 12, config.d_model}, 9);
  auto state = mixer->InitialState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(mixer->Prefill(x.narrow(1, 0, 6), &*state).ok());
  MixerState snapshot = *state;  // shares the cache tensors
  auto a = mixer->Prefill(x.narrow(1, 6, 6), &*state);
  auto b = mixer->Prefill(x.narrow(1, 6, 6), &snapshot);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(*a, *b));
}

// A state sharing its prefix (kv_cache.h's SharePrefix) streams like the state it came from,
// in chunks and steps, while that one goes on appending past the shared entries; a state whose
// segments are not a KV cache's (a length past the buffer, a position the pieces do not cover)
// is refused with InvalidArgument, before anything changes.
TEST(StandardAttentionTest, AStateSharingItsPrefixStreamsLikeItsSource) {
  const MixerConfig config = StandardConfig(2, 16, true);
  auto mixer = MakeMixer(config, RandomWeights(config, 8));
  ASSERT_NE(mixer, nullptr);
  const at::Tensor x = RandomTensor({1, 40, config.d_model}, 9);
  auto state = mixer->InitialState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(mixer->Prefill(x.narrow(1, 0, 20), &*state).ok());
  MixerState sharing = SharePrefix(*state, 4);
  ASSERT_EQ(sharing.shared.size(), 1u);
  EXPECT_EQ(sharing.SharedLength(), 20);
  MixerState plain = state->Clone();
  ASSERT_TRUE(mixer->Prefill(x.narrow(1, 30, 10), &*state).ok());  // the source goes on
  auto a = mixer->Prefill(x.narrow(1, 20, 10), &sharing);
  auto b = mixer->Prefill(x.narrow(1, 20, 10), &plain);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status();
  EXPECT_TRUE(at::equal(*a, *b));
  for (int t = 0; t < 3; ++t) {
    auto sa = mixer->Step(x[0][t].unsqueeze(0), &sharing);
    auto sb = mixer->Step(x[0][t].unsqueeze(0), &plain);
    ASSERT_TRUE(sa.ok() && sb.ok()) << sa.status();
    EXPECT_TRUE(at::equal(*sa, *sb));
  }
  MixerState bad = SharePrefix(plain, 0);
  bad.shared[0].length = bad.shared[0].k.size(2) + 1;
  ExpectError(mixer->Prefill(x.narrow(1, 0, 2), &bad), absl::StatusCode::kInvalidArgument,
              "shared segment 0");
  MixerState short_of = SharePrefix(plain, 0);
  short_of.position += 5;  // more than the segments and the own cache hold
  ExpectError(mixer->Step(x[0][0].unsqueeze(0), &short_of), absl::StatusCode::kInvalidArgument,
              "outside the KV cache capacity");
}

TEST(StandardAttentionTest, RejectsBadInputs) {
  const MixerConfig config = StandardConfig(2, 16, true);
  auto mixer = MakeMixer(config, RandomWeights(config, 1));
  ASSERT_NE(mixer, nullptr);
  ExpectError(mixer->Prefill(at::zeros({1, 4, 32}, at::kDouble), nullptr),
              absl::StatusCode::kInvalidArgument,
              "x: expected float32 cpu tensor of shape (?, ?, 32), got float64");
  ExpectError(mixer->Prefill(at::zeros({4, 32}), nullptr), absl::StatusCode::kInvalidArgument,
              "got float32 cpu (4, 32)");
  ExpectError(mixer->Prefill(at::zeros({1, 4, 48}), nullptr), absl::StatusCode::kInvalidArgument,
              "shape (?, ?, 32), got float32 cpu (1, 4, 48)");
  ExpectError(mixer->Step(at::zeros({1, 1, 32}), nullptr), absl::StatusCode::kInvalidArgument,
              "x_t: expected float32 cpu tensor of shape (?, 32)");
  auto state = mixer->InitialState(2);
  ASSERT_TRUE(state.ok());
  ExpectError(mixer->Prefill(at::zeros({3, 4, 32}), &*state), absl::StatusCode::kInvalidArgument,
              "batch of 2 sequences, but x has 3");
  ExpectError(mixer->Step(at::zeros({1, 32}), &*state), absl::StatusCode::kInvalidArgument,
              "batch of 2 sequences, but x has 1");
  MixerState broken;
  ExpectError(mixer->Step(at::zeros({1, 32}), &broken), absl::StatusCode::kInvalidArgument,
              "expected 2 tensors (k_cache, v_cache), got 0");
  ExpectError(mixer->InitialState(0), absl::StatusCode::kInvalidArgument, "batch must be > 0");
}

TEST(StandardAttentionTest, BidirectionalCannotStream) {
  const MixerConfig config = StandardConfig(2, 16, false);
  auto mixer = MakeMixer(config, RandomWeights(config, 1));
  ASSERT_NE(mixer, nullptr);
  EXPECT_FALSE(mixer->can_stream());
  EXPECT_EQ(mixer->StateBytesPerSequence(100), 0);
  const std::string why = "standard attention is bidirectional (causal=false): it cannot stream";
  ExpectError(mixer->InitialState(1), absl::StatusCode::kFailedPrecondition, why);
  MixerState state;
  ExpectError(mixer->Step(at::zeros({1, 32}), &state), absl::StatusCode::kFailedPrecondition, why);
  ExpectError(mixer->Prefill(at::zeros({1, 3, 32}), &state), absl::StatusCode::kFailedPrecondition,
              why);
  EXPECT_TRUE(mixer->Prefill(at::zeros({1, 3, 32}), nullptr).ok());
}

TEST(StandardAttentionTest, CreateMixerRejectsMissingAndMisshapenWeights) {
  const MixerConfig config = StandardConfig(2, 16, true);
  WeightMap missing = RandomWeights(config, 1);
  missing.erase("k_proj.weight");
  ExpectError(CreateMixer(config, missing), absl::StatusCode::kInvalidArgument,
              "standard mixer: missing tensor 'k_proj.weight' of shape (32, 32)");
  WeightMap misshapen = RandomWeights(config, 1);
  misshapen["o_proj.weight"] = at::zeros({32, 16});
  ExpectError(CreateMixer(config, misshapen), absl::StatusCode::kInvalidArgument,
              "tensor 'o_proj.weight' expected float32 (32, 32), got float32 (32, 16)");
  WeightMap wrong_dtype = RandomWeights(config, 1);
  wrong_dtype["q_proj.weight"] = wrong_dtype["q_proj.weight"].to(at::kDouble);
  ExpectError(CreateMixer(config, wrong_dtype), absl::StatusCode::kInvalidArgument,
              "'q_proj.weight' expected float32 (32, 32), got float64");
}

}  // namespace
}  // namespace attnserve::kernels
