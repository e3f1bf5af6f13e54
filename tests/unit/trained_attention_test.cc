// The standard mixer with the features of trained checkpoints (grouped key/value heads, a head
// width of its own, biases, rotary positions, windows) against its float64 reference on random
// shapes, whole, in chunks and step by step; states that share their prefix (a fork, a
// prefix-cache hit) with a window that starts inside a shared segment; the rotary frequencies of
// each scaling type against their formulas; and what the config refuses.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/common/mixer.h"
#include "kernels/common/rotary_positions.h"
#include "kernels/standard/decode_attention_cpu.h"
#include "kernels/standard/kv_cache.h"
#include "kernels/standard/trained_attention_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using ::attnserve::testing::MaxRelativeError;
using ::attnserve::testing::RandomTensor;

struct Shape {
  int64_t heads, kv_heads, head_dim, window;
  bool biases, rope;
  int64_t rotary_dim;   // 0: head_dim
  double scale = 0;     // 0: head_dim^-1/2
  int64_t out_dim = 0;  // 0: d_model
  bool qk_norm = false;
};

MixerConfig ConfigOf(const Shape& s, int64_t d_model) {
  MixerConfig c;
  c.kind = MixerKind::kStandard;
  c.d_model = d_model;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.attention_head_dim = s.head_dim;
  c.qkv_bias = s.biases;
  c.o_bias = s.biases;
  c.attention_window = s.window;
  c.attention_scale = s.scale;
  c.out_dim = s.out_dim;
  c.qk_norm = s.qk_norm;
  if (s.rope) {
    c.rope.type = "default";
    c.rope.theta = 500.0;  // fast rotations: a position error would show within 40 tokens
    c.rope.rotary_dim = s.rotary_dim;
  }
  return c;
}

std::unique_ptr<Mixer> Make(const MixerConfig& c, uint64_t seed) {
  auto mixer = CreateMixer(c, RandomWeights(c, seed));
  EXPECT_TRUE(mixer.ok()) << mixer.status();
  return mixer.ok() ? std::move(*mixer) : nullptr;
}

TEST(TrainedAttentionTest, WholeChunksAndStepsMatchTheFloat64ReferenceOnRandomShapes) {
  std::mt19937 rng(7);
  const std::vector<Shape> shapes = {
      {4, 2, 16, 0, false, true, 0},
      {4, 1, 32, 0, true, true, 0},
      {6, 3, 48, 5, true, true, 0},
      {8, 2, 64, 9, false, true, 32},
      {3, 3, 24, 0, true, false, 0},
      {2, 1, 80, 3, true, true, 40},
      {9, 3, 64, 0, false, true, 0},
      // Zamba's shared attention: scale (head_dim / 2)^-1/2, output narrower than the input;
      // Granite-like: a scale of its own, with biases.
      {4, 2, 32, 0, false, false, 0, 1.0 / 4.0, 24},
      {4, 4, 16, 0, true, false, 0, 0.0078125, 0},
      // LFM2's: q and k RMSNormed per head before the rotary positions; with a scale of its own
      // (folded into q_norm's weight then).
      {4, 2, 16, 0, false, true, 0, 0, 0, true},
      {6, 2, 32, 7, true, true, 16, 0.05, 0, true},
  };
  for (const Shape& s : shapes) {
    const int64_t d_model = 8 * (1 + static_cast<int64_t>(rng() % 12));
    const MixerConfig c = ConfigOf(s, d_model);
    ASSERT_TRUE(ValidateMixerConfig(c).ok()) << ValidateMixerConfig(c);
    const WeightMap weights = RandomWeights(c, rng());
    auto mixer = CreateMixer(c, weights);
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    const int64_t length = 20 + static_cast<int64_t>(rng() % 30), batch = 1 + rng() % 2;
    const at::Tensor x = RandomTensor({batch, length, d_model}, rng());
    auto expected = TrainedAttentionReference(c, weights, x);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const std::string what = "heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) +
                             ", d " + std::to_string(s.head_dim) + ", window " +
                             std::to_string(s.window);
    auto whole = (*mixer)->Prefill(x, nullptr);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_LE(MaxRelativeError(*whole, *expected), 1e-5) << what;
    // Chunks of random sizes, then the last tokens step by step.
    auto state = (*mixer)->InitialState(batch);
    ASSERT_TRUE(state.ok());
    std::vector<at::Tensor> pieces;
    int64_t pos = 0;
    while (pos < length - 5) {
      const int64_t n = std::min<int64_t>(length - 5 - pos, 1 + rng() % 9);
      auto y = (*mixer)->Prefill(x.narrow(1, pos, n), &*state);
      ASSERT_TRUE(y.ok()) << y.status();
      pieces.push_back(*y);
      pos += n;
    }
    for (; pos < length; ++pos) {
      auto y = (*mixer)->Step(x.select(1, pos), &*state);
      ASSERT_TRUE(y.ok()) << y.status();
      pieces.push_back(y->unsqueeze(1));
    }
    EXPECT_LE(MaxRelativeError(at::cat(pieces, 1), *expected), 1e-5) << what;
    EXPECT_EQ((*mixer)->StateBytesPerSequence(length), 2 * s.kv_heads * length * s.head_dim * 4);
    EXPECT_EQ((*mixer)->StepKeysRead(length), s.window > 0 ? s.window : length + 1) << what;
  }
}

// A fork or a prefix-cache hit (SharePrefix: the source's positions as shared segments) with
// rotary positions, groups and a window that starts inside a segment, then inside the own part.
TEST(TrainedAttentionTest, AStateSharingItsPrefixStreamsLikeItsSource) {
  const MixerConfig c = ConfigOf({4, 2, 16, 6, true, true, 0}, 64);
  auto mixer = Make(c, 3);
  ASSERT_NE(mixer, nullptr);
  const at::Tensor x = RandomTensor({1, 40, 64}, 4);
  auto state = mixer->InitialState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(mixer->Prefill(x.narrow(1, 0, 10), &*state).ok());
  MixerState first = SharePrefix(*state, 2);
  ASSERT_TRUE(mixer->Prefill(x.narrow(1, 10, 3), &first).ok());  // 13 positions: 10 shared
  MixerState sharing = SharePrefix(first, 2);                    // two segments: 10 + 3
  ASSERT_EQ(sharing.shared.size(), 2u);
  MixerState plain = first.Clone();
  FlattenKvCache(plain);
  for (int t = 13; t < 24; ++t) {  // windows from inside segment 1, then segment 2, then own
    auto a = mixer->Step(x.select(1, t), &sharing);
    auto b = mixer->Step(x.select(1, t), &plain);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_TRUE(at::equal(*a, *b)) << "step at position " << t;
  }
  auto a = mixer->Prefill(x.narrow(1, 24, 7), &sharing);
  auto b = mixer->Prefill(x.narrow(1, 24, 7), &plain);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(MaxRelativeError(*a, *b), 1e-6);
}

TEST(TrainedAttentionTest, TheWindowOfADecodeRowDropsWholeSpansThenPositions) {
  // Three spans of 4, 5 and own 6 positions: (H = 1, capacity, d = 2), values = position.
  std::vector<std::vector<float>> storage;
  std::vector<DecodeAttentionRow> spans;
  int64_t position = 0;
  for (int64_t n : {4, 5}) {
    std::vector<float>& data = storage.emplace_back();
    for (int64_t t = 0; t < n; ++t) data.insert(data.end(), 2, static_cast<float>(position++));
    spans.push_back({data.data(), data.data(), n, n});
  }
  std::vector<float>& own = storage.emplace_back();
  for (int64_t t = 0; t < 8; ++t) own.insert(own.end(), 2, static_cast<float>(position + t));
  DecodeAttentionRow row{own.data(), own.data(), 6, 8, spans.data(), 2};
  std::vector<DecodeAttentionRow> kept;
  for (int64_t window : {0, 15, 20, 11, 7, 6, 2}) {
    const DecodeAttentionRow w = LastPositionsOf(row, window, 2, &kept);
    int64_t total = w.length;
    for (int64_t s = 0; s < w.shared_count; ++s) total += w.shared[s].length;
    const int64_t expect = window == 0 || window >= 15 ? 15 : window;
    EXPECT_EQ(total, expect) << "window " << window;
    const float first = w.shared_count > 0 ? w.shared[0].k[0] : w.k[0];
    EXPECT_EQ(first, static_cast<float>(15 - expect)) << "window " << window;
  }
}

// The grouped decode path (each key and value read once for the group's query heads) gives the
// bits of every query head computed alone over repeated caches, float32 and bfloat16 caches,
// with shared spans, groups above the kernel's tile of 8, d 64, 128 and 48.
TEST(TrainedAttentionTest, GroupedDecodeGivesTheBitsOfEachHeadAlone) {
  std::mt19937 rng(11);
  for (const auto& [heads, kv, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {9, 3, 64}, {16, 1, 128}, {32, 4, 48}, {20, 2, 64}}) {
    for (bool bf16 : {false, true}) {
      const int64_t batch = 3;
      std::vector<at::Tensor> keep;
      std::vector<DecodeAttentionRow> grouped_rows(batch), alone_rows(batch);
      std::vector<std::vector<DecodeAttentionRow>> grouped_spans(batch), alone_spans(batch);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t lengths[2] = {static_cast<int64_t>(1 + rng() % 150),
                                    static_cast<int64_t>(1 + rng() % 150)};
        for (int piece = 0; piece < 2; ++piece) {  // a shared span, then the own part
          const int64_t cap = lengths[piece] + static_cast<int64_t>(rng() % 5);
          at::Tensor k = RandomTensor({kv, cap, d}, rng()), v = RandomTensor({kv, cap, d}, rng());
          if (bf16) {
            k = k.to(at::kBFloat16);
            v = v.to(at::kBFloat16);
          }
          at::Tensor k_rep = k.repeat_interleave(heads / kv, 0).contiguous();
          at::Tensor v_rep = v.repeat_interleave(heads / kv, 0).contiguous();
          keep.insert(keep.end(), {k, v, k_rep, v_rep});
          const auto row_of = [&](const at::Tensor& kk, const at::Tensor& vv) {
            DecodeAttentionRow r;
            r.length = lengths[piece];
            r.capacity = cap;
            if (bf16) {
              r.k_bf16 = reinterpret_cast<const uint16_t*>(kk.data_ptr());
              r.v_bf16 = reinterpret_cast<const uint16_t*>(vv.data_ptr());
            } else {
              r.k = kk.data_ptr<float>();
              r.v = vv.data_ptr<float>();
            }
            return r;
          };
          if (piece == 0) {
            grouped_spans[b].push_back(row_of(k, v));
            alone_spans[b].push_back(row_of(k_rep, v_rep));
          } else {
            grouped_rows[b] = row_of(k, v);
            alone_rows[b] = row_of(k_rep, v_rep);
          }
        }
        grouped_rows[b].shared = grouped_spans[b].data();
        grouped_rows[b].shared_count = 1;
        alone_rows[b].shared = alone_spans[b].data();
        alone_rows[b].shared_count = 1;
      }
      const at::Tensor q = RandomTensor({batch, heads, d}, rng());
      at::Tensor grouped = at::empty_like(q), alone = at::empty_like(q);
      DecodeAttentionCpu(q.data_ptr<float>(), grouped_rows.data(), batch, heads, d,
                         grouped.data_ptr<float>(), kv);
      DecodeAttentionCpu(q.data_ptr<float>(), alone_rows.data(), batch, heads, d,
                         alone.data_ptr<float>());
      EXPECT_TRUE(at::equal(grouped, alone))
          << heads << "/" << kv << " heads, d " << d << (bf16 ? " bf16" : " fp32") << ": "
          << (grouped - alone).abs().max().item<float>();
    }
  }
}

// The frequencies against each type's formula in float64 (transformers computes them in float32:
// agreement to float32 rounding).
TEST(RotaryPositionsTest, FrequenciesFollowEachScalingTypesFormula) {
  const int64_t dim = 16;
  const auto base = [&](int64_t i, double theta) { return std::pow(theta, 2.0 * i / dim); };
  RotaryConfig c;
  c.theta = 10000.0;
  c.max_position_embeddings = 64;
  c.factor = 4.0;
  c.original_max_position_embeddings = 16;
  float attention = 0;
  for (const char* type : {"default", "linear", "dynamic", "llama3", "yarn"}) {
    c.type = type;
    ASSERT_TRUE(ValidateRotaryConfig(c, dim).ok()) << type;
    const RotaryPositions rope(c, dim);
    const std::vector<float> inv = rope.InverseFrequencies(200, &attention);
    for (int64_t i = 0; i < dim / 2; ++i) {
      double want = 1.0 / base(i, c.theta);
      if (c.type == "linear") want /= c.factor;
      if (c.type == "dynamic") {
        const double theta =
            c.theta * std::pow(c.factor * 200 / 64 - (c.factor - 1), dim / (dim - 2.0));
        want = 1.0 / base(i, theta);
      }
      if (c.type == "llama3") {
        const double wavelen = 2 * M_PI / want, low = 16 / 1.0, high = 16 / 4.0;
        if (wavelen > low) {
          want /= c.factor;
        } else if (wavelen >= high) {
          const double smooth = (16 / wavelen - 1.0) / (4.0 - 1.0);
          want = (1 - smooth) * want / c.factor + smooth * want;
        }
      }
      if (c.type == "yarn") {
        const auto corr = [&](double rotations) {
          return dim * std::log(64 / (rotations * 2 * M_PI)) / (2 * std::log(c.theta));
        };
        const double lo = std::max(std::floor(corr(32)), 0.0);
        const double hi = std::min(std::ceil(corr(1)), dim - 1.0);
        const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
        want = want / c.factor * ramp + want * (1 - ramp);
      }
      EXPECT_NEAR(inv[i], want, 3e-7 * want) << type << " i " << i;
    }
    EXPECT_FLOAT_EQ(attention, c.type == "yarn" ? 0.1 * std::log(4.0) + 1 : 1.0) << type;
  }
}

TEST(TrainedAttentionTest, TheConfigRefusesWhatItCannotCompute) {
  MixerConfig c = ConfigOf({6, 4, 16, 0, false, true, 0}, 64);
  EXPECT_TRUE(absl::StrContains(ValidateMixerConfig(c).message(), "multiple of num_key_value"));
  c = ConfigOf({4, 2, 16, 0, false, true, 0}, 64);
  c.rope.type = "su2";
  EXPECT_TRUE(absl::StrContains(ValidateMixerConfig(c).message(), "rope_type \"su2\""));
  c = ConfigOf({4, 2, 16, 0, false, true, 18}, 64);
  EXPECT_TRUE(absl::StrContains(ValidateMixerConfig(c).message(), "rotary dimension"));
  c = ConfigOf({4, 2, 16, 0, false, false, 0}, 64);
  c.kind = MixerKind::kLinear;
  EXPECT_TRUE(absl::StrContains(ValidateMixerConfig(c).message(), "only standard"));
}

}  // namespace
}  // namespace attnserve::kernels
