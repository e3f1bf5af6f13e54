// The streaming contract of kernels/common/mixer.h, held for every mixer that can stream:
// chunks of any sizes equal one whole pass, L steps equal one prefill, states are independent
// values, their sizes are what the mixer reports, and a decode row is bit-identical alone or in
// any batch (docs/architecture.md, "Batched state").
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/common/mixer.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

struct ContractCase {
  const char* name;
  MixerConfig config;
};

MixerConfig Config(MixerKind kind, int64_t d_model, int64_t heads) {
  MixerConfig c;
  c.kind = kind;
  c.d_model = d_model;
  c.num_heads = heads;
  return c;
}

MixerConfig SlidingWindow(int64_t d_model, int64_t heads, int64_t window, int64_t sinks = 0) {
  MixerConfig c = Config(MixerKind::kSlidingWindow, d_model, heads);
  c.window = window;
  c.sinks = sinks;
  return c;
}

MixerConfig Performer(int64_t d_model, int64_t heads) {
  MixerConfig c = Config(MixerKind::kPerformer, d_model, heads);
  c.performer_seed = 11;
  return c;
}

MixerConfig Sparse(const char* pattern, int64_t stride, int64_t summary) {
  MixerConfig c = Config(MixerKind::kSparse, 64, 4);
  c.sparse_pattern = pattern;
  c.sparse_stride = stride;
  c.sparse_summary = summary;
  return c;
}

// d_model 36: d_inner 72, a partial block of 8 channels in the decode step's scan; d_state 32:
// two vectors of state per channel (the step path), 12: a state the step runs as a sequence.
// d_model 21 at d_state 16: d_inner 42, a partial block of 10 channels, whose exponentials the
// step takes 4 channels at a time (4 + 4 + 2).
MixerConfig Mamba(int64_t d_model, int64_t d_state) {
  MixerConfig c = Config(MixerKind::kMamba, d_model, 1);
  c.d_state = d_state;
  return c;
}

MixerConfig FalconMamba(int64_t d_model, int64_t d_state) {
  MixerConfig c = Mamba(d_model, d_state);
  c.bcdt_rms_epsilon = 1e-6;
  return c;
}

MixerConfig ZambaMamba(int64_t d_model, int64_t d_state, int64_t heads) {
  MixerConfig c = Mamba(d_model, d_state);
  c.mamba_heads = heads;
  return c;
}

MixerConfig JambaMamba(int64_t d_model, int64_t d_state) {
  MixerConfig c = FalconMamba(d_model, d_state);
  c.bcdt_norm_weights = true;
  return c;
}

// Mamba-2: heads of head_dim = 2·d_model / heads, groups sharing B and C, chunks of the scan
// shorter than the contract's pieces (so pieces cross chunk edges and end mid-chunk), d_state
// not a multiple of 16 (the step's partial vector) and head_dim not one either (the padded
// columns of the chunk's products).
MixerConfig Mamba2(int64_t d_model, int64_t heads, int64_t groups, int64_t d_state, int64_t chunk) {
  MixerConfig c = Config(MixerKind::kMamba2, d_model, 1);
  c.ssm_heads = heads;
  c.ssm_groups = groups;
  c.d_state = d_state;
  c.ssm_chunk_size = chunk;
  return c;
}

// LFM2's gated short convolution: widths 3 (its conv_L_cache) and 4 (the conv kernel's own
// decode path), with and without biases, a width not a multiple of 16.
MixerConfig ShortConv(int64_t d_model, int64_t width, bool bias) {
  MixerConfig c = Config(MixerKind::kShortConv, d_model, 1);
  c.d_conv = width;
  c.conv_bias = bias;
  return c;
}

MixerConfig Rwkv(int64_t d_model, int64_t attention_dim) {
  MixerConfig c = Config(MixerKind::kRwkv, d_model, 1);
  c.rwkv_attention_dim = attention_dim;
  return c;
}

// Standard attention as trained checkpoints have it: key/value groups, a head width of its own
// (48 per head: the tiled ATen kernel for the prefill, 16 and 32: the fused one), biases,
// rotary positions of a scaling type, a window shorter than the contract's sequences.
MixerConfig TrainedAttention(int64_t heads, int64_t kv_heads, int64_t head_dim,
                             const char* rope_type, int64_t window) {
  MixerConfig c = Config(MixerKind::kStandard, 64, heads);
  c.num_kv_heads = kv_heads;
  c.attention_head_dim = head_dim;
  c.qkv_bias = true;
  c.o_bias = true;
  c.rope.type = rope_type;
  c.rope.theta = 10000.0;
  c.rope.max_position_embeddings = 16;
  c.rope.factor = 4.0;
  c.rope.original_max_position_embeddings = 8;
  c.attention_window = window;
  return c;
}

// LFM2's attention: q and k RMSNormed per head before the rotary positions.
MixerConfig Lfm2Attention() {
  MixerConfig c = TrainedAttention(4, 2, 16, "default", 0);
  c.qkv_bias = c.o_bias = false;
  c.qk_norm = true;
  return c;
}

std::vector<ContractCase> StreamingCases() {
  return {{"standard", Config(MixerKind::kStandard, 64, 4)},
          {"standard_wide_heads", Config(MixerKind::kStandard, 128, 1)},
          {"standard_gqa_rope", TrainedAttention(4, 2, 16, "default", 0)},
          {"standard_mqa_yarn_head_dim_48", TrainedAttention(6, 1, 48, "yarn", 0)},
          {"standard_gqa_llama3_window_5", TrainedAttention(8, 2, 32, "llama3", 5)},
          {"linear", Config(MixerKind::kLinear, 64, 2)},
          {"linear_many_heads", Config(MixerKind::kLinear, 128, 8)},
          {"mamba", Config(MixerKind::kMamba, 40, 1)},
          {"mamba_partial_block_wide_state", Mamba(36, 32)},
          {"mamba_ragged_block", Mamba(21, 16)},
          {"mamba_narrow_state", Mamba(40, 12)},
          {"falcon_mamba_norms", FalconMamba(40, 16)},
          {"jamba_mamba_norm_weights", JambaMamba(36, 16)},
          {"zamba_multi_head_mamba", ZambaMamba(40, 16, 2)},
          {"mamba2", Mamba2(64, 8, 1, 16, 16)},
          {"mamba2_groups_wide_state", Mamba2(64, 4, 2, 32, 7)},
          {"mamba2_odd_head_dim_and_state", Mamba2(36, 3, 3, 12, 64)},
          {"short_conv", ShortConv(64, 3, false)},
          {"short_conv_width4_biases_ragged", ShortConv(40, 4, true)},
          {"lfm2_attention_qk_norm", Lfm2Attention()},
          {"sliding_window", SlidingWindow(64, 4, 37)},
          {"sliding_window_of_one", SlidingWindow(32, 2, 1)},
          {"sliding_window_with_sinks", SlidingWindow(64, 4, 29, 5)},
          {"performer", Performer(64, 4)},
          {"rwkv", Rwkv(48, 0)},
          {"rwkv_narrow_attention", Rwkv(32, 24)},
          {"sparse_strided", Sparse("strided", 13, 1)},
          {"sparse_fixed", Sparse("fixed", 16, 3)}};
}

class StreamingContractTest : public ::testing::TestWithParam<ContractCase> {
 protected:
  void SetUp() override {
    auto mixer = CreateMixer(GetParam().config, RandomWeights(GetParam().config, 42));
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    mixer_ = std::move(*mixer);
  }
  std::unique_ptr<Mixer> mixer_;
};

TEST_P(StreamingContractTest, RandomChunkSplitsEqualOneWholePass) {
  const int64_t batch = 2, len = 203, d = GetParam().config.d_model;
  at::Tensor x = testing::RandomTensor({batch, len, d}, 3);
  auto whole = mixer_->Prefill(x, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status();

  std::mt19937 rng(17);
  for (int trial = 0; trial < 4; ++trial) {
    auto state = mixer_->InitialState(batch);
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<at::Tensor> pieces;
    std::vector<int64_t> sizes;
    for (int64_t pos = 0; pos < len;) {
      // Chunks of 1 token up to past the 64-token chunk of the kernels.
      int64_t n = std::min<int64_t>(len - pos, 1 + rng() % (trial == 0 ? 3 : 90));
      auto y = mixer_->Prefill(x.narrow(1, pos, n), &*state);
      ASSERT_TRUE(y.ok()) << y.status();
      pieces.push_back(*y);
      sizes.push_back(n);
      pos += n;
    }
    EXPECT_EQ(state->position, len);
    EXPECT_LE(testing::MaxRelativeError(at::cat(pieces, 1), *whole), 1e-5)
        << "split into " << sizes.size() << " chunks";
  }
}

TEST_P(StreamingContractTest, StepsEqualOnePrefillAndContinueIt) {
  const int64_t batch = 2, len = 70, d = GetParam().config.d_model;
  at::Tensor x = testing::RandomTensor({batch, len, d}, 4);
  auto whole = mixer_->Prefill(x, nullptr);
  ASSERT_TRUE(whole.ok());

  // Prefill 30 tokens, then step through the rest.
  auto state = mixer_->InitialState(batch);
  ASSERT_TRUE(state.ok());
  auto head = mixer_->Prefill(x.narrow(1, 0, 30), &*state);
  ASSERT_TRUE(head.ok());
  std::vector<at::Tensor> outs = {*head};
  for (int64_t t = 30; t < len; ++t) {
    auto y = mixer_->Step(x.select(1, t), &*state);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->sizes(), at::IntArrayRef({batch, d}));
    outs.push_back(y->unsqueeze(1));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(outs, 1), *whole), 1e-5);

  // Only steps, from the start.
  auto fresh = mixer_->InitialState(batch);
  ASSERT_TRUE(fresh.ok());
  std::vector<at::Tensor> steps;
  for (int64_t t = 0; t < len; ++t)
    steps.push_back(mixer_->Step(x.select(1, t), &*fresh)->unsqueeze(1));
  EXPECT_LE(testing::MaxRelativeError(at::cat(steps, 1), *whole), 1e-5);
}

TEST_P(StreamingContractTest, ClonedStatesAreIndependent) {
  const int64_t d = GetParam().config.d_model;
  at::Tensor x = testing::RandomTensor({1, 20, d}, 5);
  auto state = mixer_->InitialState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(mixer_->Prefill(x.narrow(1, 0, 10), &*state).ok());
  MixerState copy = state->Clone();
  auto a = mixer_->Prefill(x.narrow(1, 10, 10), &*state);
  auto b = mixer_->Prefill(x.narrow(1, 10, 10), &copy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(*a, *b));
  EXPECT_EQ(copy.position, 20);
}

TEST_P(StreamingContractTest, ReportedStateSizeMatchesTheState) {
  const int64_t d = GetParam().config.d_model;
  auto state = mixer_->InitialState(1);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(mixer_->Prefill(testing::RandomTensor({1, 33, d}, 6), &*state).ok());
  // A growing cache may hold spare capacity; it never holds less than it reports.
  EXPECT_GE(state->Bytes(), mixer_->StateBytesPerSequence(33));
  EXPECT_LE(state->Bytes(), 2 * mixer_->StateBytesPerSequence(33) + 4096);
  EXPECT_GT(mixer_->StateBytesPerSequence(33), 0);
}

// Sessions at different positions (a standard KV cache of its own length each) decoded
// together, with rows joining and leaving between steps, equal each row stepped alone.
TEST_P(StreamingContractTest, StepBatchEqualsEveryRowSteppedAlone) {
  const int64_t d = GetParam().config.d_model, sessions = 9, steps = 12;
  std::mt19937 rng(23);
  std::vector<MixerState> batched, alone;
  for (int64_t i = 0; i < sessions; ++i) {
    auto state = mixer_->InitialState(1);
    ASSERT_TRUE(state.ok());
    const int64_t prefix = rng() % 40;  // 0: a fresh state
    if (prefix > 0) {
      ASSERT_TRUE(mixer_->Prefill(testing::RandomTensor({1, prefix, d}, 100 + i), &*state).ok());
    }
    alone.push_back(state->Clone());
    batched.push_back(*std::move(state));
  }
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < sessions; ++i) {
      if (rng() % 3 != 0) rows.push_back(i);
    }
    if (rows.empty()) rows.push_back(step % sessions);
    if (step == 0) rows.assign(1, 3);  // a batch of one session (the scheduler's commonest)
    std::shuffle(rows.begin(), rows.end(), rng);
    at::Tensor x = testing::RandomTensor({static_cast<int64_t>(rows.size()), d}, 200 + step);
    std::vector<MixerState*> states;
    for (int64_t i : rows) states.push_back(&batched[i]);
    auto together = mixer_->StepBatch(x, states);
    ASSERT_TRUE(together.ok()) << together.status();
    ASSERT_EQ(together->sizes(), at::IntArrayRef({static_cast<int64_t>(rows.size()), d}));
    for (size_t r = 0; r < rows.size(); ++r) {
      auto one = mixer_->Step(x.narrow(0, static_cast<int64_t>(r), 1), &alone[rows[r]]);
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_LE(testing::MaxRelativeError(together->narrow(0, static_cast<int64_t>(r), 1), *one),
                1e-5)
          << "row " << r << " (session " << rows[r] << ") at step " << step;
      EXPECT_EQ(batched[rows[r]].position, alone[rows[r]].position);
    }
  }
}

// The gathered form (what CUDA states take) equals every row stepped alone too, where the
// states stack: recurrent states at any positions, KV caches of one length.
TEST_P(StreamingContractTest, GatheredStepBatchEqualsEveryRowSteppedAlone) {
  const int64_t d = GetParam().config.d_model, sessions = 5;
  std::vector<MixerState> batched, alone;
  for (int64_t i = 0; i < sessions; ++i) {
    auto state = mixer_->InitialState(1);
    ASSERT_TRUE(state.ok());
    // Recurrent states at different positions; KV caches all at 12 tokens (so they stack).
    const int64_t prefix = mixer_->StepReadsPosition() ? 12 : 3 + 4 * i;
    ASSERT_TRUE(mixer_->Prefill(testing::RandomTensor({1, prefix, d}, 300 + i), &*state).ok());
    alone.push_back(state->Clone());
    batched.push_back(*std::move(state));
  }
  std::vector<MixerState*> states;
  for (MixerState& s : batched) states.push_back(&s);
  if (!StatesStack(states, mixer_->StepReadsPosition())) {
    // A KV cache's capacity depends on how it grew; give every row the same one.
    for (MixerState& s : batched) s = alone.front().Clone();
    for (MixerState& s : alone) s = batched.front().Clone();
  }
  ASSERT_TRUE(StatesStack(states, mixer_->StepReadsPosition()));
  for (int step = 0; step < 3; ++step) {
    at::Tensor x = testing::RandomTensor({sessions, d}, 400 + step);
    auto together = StepBatchByGather(*mixer_, x, states);
    ASSERT_TRUE(together.ok()) << together.status();
    for (int64_t i = 0; i < sessions; ++i) {
      auto one = mixer_->Step(x.narrow(0, i, 1), &alone[i]);
      ASSERT_TRUE(one.ok());
      EXPECT_LE(testing::MaxRelativeError(together->narrow(0, i, 1), *one), 1e-5) << "row " << i;
      EXPECT_EQ(batched[i].position, alone[i].position);
    }
  }
}

// A session's decode step gives the same bits (output and state) whether it is stepped alone,
// as a batch of one, or among up to 64 sessions (the scheduler's --max_batch_sessions default,
// the rows of skinny_gemm.h), whatever the others' states and positions.
TEST_P(StreamingContractTest, DecodeRowsAreBitIdenticalAloneOrInAnyBatch) {
  const int64_t d = GetParam().config.d_model, sessions = 64;
  std::mt19937 rng(29);
  std::vector<MixerState> batched, alone;
  for (int64_t i = 0; i < sessions; ++i) {
    auto state = mixer_->InitialState(1);
    ASSERT_TRUE(state.ok());
    const int64_t prefix = rng() % 20;
    if (prefix > 0) {
      ASSERT_TRUE(mixer_->Prefill(testing::RandomTensor({1, prefix, d}, 500 + i), &*state).ok());
    }
    alone.push_back(state->Clone());
    batched.push_back(*std::move(state));
  }
  for (int64_t rows : {sessions, int64_t{9}, int64_t{2}, int64_t{33}}) {
    std::vector<int64_t> picked(sessions);
    for (int64_t i = 0; i < sessions; ++i) picked[i] = i;
    std::shuffle(picked.begin(), picked.end(), rng);
    picked.resize(rows);
    const at::Tensor x = testing::RandomTensor({rows, d}, 600 + rows);
    std::vector<MixerState*> states;
    for (int64_t i : picked) states.push_back(&batched[i]);
    auto together = mixer_->StepBatch(x, states);
    ASSERT_TRUE(together.ok()) << together.status();
    for (int64_t r = 0; r < rows; ++r) {
      MixerState& own = alone[picked[r]];
      auto one = mixer_->StepBatch(x.narrow(0, r, 1), {&own});
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_TRUE(at::equal(together->narrow(0, r, 1), *one))
          << "row " << r << " of " << rows << ": differs by "
          << (together->narrow(0, r, 1) - *one).abs().max().item<float>();
      const MixerState& mine = batched[picked[r]];
      ASSERT_EQ(mine.tensors.size(), own.tensors.size());
      for (size_t j = 0; j < own.tensors.size(); ++j) {
        at::Tensor a = mine.tensors[j], b = own.tensors[j];
        if (mixer_->StepReadsPosition() && a.dim() == 4) {  // a KV cache: its valid slots
          const int64_t valid = std::min(own.position, std::min(a.size(2), b.size(2)));
          a = a.narrow(2, 0, valid);
          b = b.narrow(2, 0, valid);
        }
        EXPECT_TRUE(at::equal(a, b)) << "state tensor " << j << " of row " << r << " of " << rows;
      }
    }
  }
}

TEST_P(StreamingContractTest, StepBatchRefusesABadStateBeforeChangingAny) {
  const int64_t d = GetParam().config.d_model;
  auto good = mixer_->InitialState(1);
  auto pair = mixer_->InitialState(2);  // a batch of 2 where each row needs its own state
  ASSERT_TRUE(good.ok() && pair.ok());
  MixerState before = good->Clone();
  std::vector<MixerState*> states = {&*good, &*pair};
  auto result = mixer_->StepBatch(testing::RandomTensor({2, d}, 9), states);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(good->position, before.position);
  for (size_t i = 0; i < before.tensors.size(); ++i) {
    EXPECT_TRUE(at::equal(good->tensors[i], before.tensors[i]));
  }
  std::vector<MixerState*> too_few = {&*good};
  EXPECT_EQ(mixer_->StepBatch(testing::RandomTensor({2, d}, 9), too_few).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Mixers, StreamingContractTest, ::testing::ValuesIn(StreamingCases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(NonStreamingContractTest, RefuseStatesWithFailedPrecondition) {
  MixerConfig linformer = Config(MixerKind::kLinformer, 64, 4);
  linformer.causal = false;
  linformer.max_len = 128;
  MixerConfig bidirectional = Config(MixerKind::kStandard, 64, 4);
  bidirectional.causal = false;
  MixerConfig linear_bidirectional = Config(MixerKind::kLinear, 64, 4);
  linear_bidirectional.causal = false;
  for (const MixerConfig& c : {linformer, bidirectional, linear_bidirectional}) {
    auto mixer = CreateMixer(c, RandomWeights(c, 1));
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    EXPECT_FALSE((*mixer)->can_stream());
    EXPECT_EQ((*mixer)->InitialState(1).status().code(), absl::StatusCode::kFailedPrecondition)
        << MixerKindName(c.kind);
    MixerState empty;
    EXPECT_EQ((*mixer)->Step(at::zeros({1, 64}), &empty).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*mixer)->Prefill(at::zeros({1, 3, 64}), &empty).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE((*mixer)->Prefill(at::zeros({1, 3, 64}), nullptr).ok());
  }
}

}  // namespace
}  // namespace attnserve::kernels
