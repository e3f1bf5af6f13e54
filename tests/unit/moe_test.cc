// Mixture-of-experts MLPs (kernels/moe/): the router's variants, MoeMlp against a float64
// reference written from transformers' JambaSparseMoeBlock (and Mixtral's renormalised form) on
// random shapes, a token's result independent of the batch to the bit (float32, bfloat16, int8
// experts), and a model with experts: config, refusals, chunks and steps = one whole pass,
// batched steps = alone.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/moe/moe_mlp.h"
#include "kernels/moe/moe_router.h"
#include "server/model/model.h"
#include "server/model/model_config.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

// transformers' JambaSparseMoeBlock in float64: softmax over all experts, top k (as they are,
// or renormalised to sum 1: Mixtral's, equal to the softmax over the top k logits), each
// chosen expert's down(silu(gate x) * up x) times its weight, summed. sigmoid_topk as
// NemotronHMOE (the float64 port in ../shared/hf_reference/hybrid_ref.py, written from
// upstream's modeling_nemotron_h.py): sigmoid scores, the top k of scores + correction bias,
// the scores as weights (divided by their sum + 1e-20 when normalised) times the scaling
// factor; plain experts down(relu(up x)²); a shared expert added.
at::Tensor MoeReference(const MoeConfig& c, const WeightMap& w, const at::Tensor& x) {
  auto d = [&](const std::string& name) { return w.at(name).to(at::kDouble); };
  const at::Tensor rows = x.reshape({-1, c.d_model}).to(at::kDouble);
  const at::Tensor logits = at::matmul(rows, d("router.weight").t());
  const bool sigmoid = c.router == RouterKind::kSigmoidTopK;
  const at::Tensor probs = sigmoid ? at::sigmoid(logits) : at::softmax(logits, -1);
  const at::Tensor choice = sigmoid ? probs + d("router.correction_bias") : probs;
  auto mlp = [&](const std::string& prefix, const at::Tensor& xt) {
    const at::Tensor up = at::matmul(d(prefix + "up_proj.weight"), xt);
    const at::Tensor h =
        c.gated ? (c.act == MlpActivation::kRelu2
                       ? at::relu(at::matmul(d(prefix + "gate_proj.weight"), xt)).pow(2)
                       : at::silu(at::matmul(d(prefix + "gate_proj.weight"), xt))) *
                      up
                : (c.act == MlpActivation::kRelu2 ? at::relu(up).pow(2) : at::silu(up));
    return at::matmul(d(prefix + "down_proj.weight"), h);
  };
  at::Tensor out = at::zeros_like(rows);
  for (int64_t t = 0; t < rows.size(0); ++t) {
    std::vector<int64_t> order(c.num_experts);
    std::iota(order.begin(), order.end(), 0);
    const at::Tensor p = probs[t], q = choice[t];
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return q[a].item<double>() > q[b].item<double>();
    });
    double sum = 0;
    for (int64_t j = 0; j < c.top_k; ++j) sum += p[order[j]].item<double>();
    const at::Tensor xt = rows[t];
    for (int64_t j = 0; j < c.top_k; ++j) {
      double weight = p[order[j]].item<double>();
      if (c.router == RouterKind::kTopKSoftmax) weight /= sum;
      if (sigmoid && c.normalize) weight /= sum + 1e-20;
      if (sigmoid) weight *= c.scaling;
      out[t] += weight * mlp("experts." + std::to_string(order[j]) + ".", xt);
    }
    if (c.shared_d_ff > 0) out[t] += mlp("shared_expert.", xt);
  }
  return out.view(x.sizes());
}

struct MoeShape {
  int64_t tokens, d_model, d_ff, experts, top_k;
  RouterKind router;
  // Nemotron-H's form: sigmoid_topk normalised and scaled by 2.5, plain relu2 experts and a
  // shared expert of width 2·d_ff.
  bool nemotron = false;
};

class MoeReferenceTest : public ::testing::TestWithParam<MoeShape> {};

TEST_P(MoeReferenceTest, MatchesFloat64Reference) {
  const MoeShape s = GetParam();
  MoeConfig c{s.d_model, s.d_ff, s.experts, s.top_k, s.router, MlpActivation::kSilu};
  if (s.nemotron) {
    c.act = MlpActivation::kRelu2;
    c.gated = false;
    c.shared_d_ff = 2 * s.d_ff;
    c.normalize = true;
    c.scaling = 2.5;
  }
  const WeightMap w = MoeMlp::RandomWeights(c, 3 + s.tokens);
  const MoeMlp moe(c, w, WeightFormat::kFloat32);
  const at::Tensor x = testing::RandomTensor({1, s.tokens, s.d_model}, 5 + s.experts);
  const at::Tensor y = moe(x);
  ASSERT_EQ(y.sizes(), x.sizes());
  EXPECT_LE(testing::MaxRelativeError(y, MoeReference(c, w, x)), 1e-5);
}

// One token (a decode step), fewer tokens than experts, top-1, all experts chosen (k = E),
// widths off the 32-row panels, and a prefill-sized group.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeReferenceTest,
    ::testing::Values(MoeShape{1, 32, 64, 4, 2, RouterKind::kSoftmaxTopK},
                      MoeShape{3, 40, 72, 8, 2, RouterKind::kSoftmaxTopK},
                      MoeShape{17, 64, 96, 4, 1, RouterKind::kSoftmaxTopK},
                      MoeShape{9, 24, 40, 3, 3, RouterKind::kTopKSoftmax},
                      MoeShape{70, 64, 160, 8, 2, RouterKind::kTopKSoftmax},
                      MoeShape{33, 48, 80, 16, 4, RouterKind::kSoftmaxTopK},
                      MoeShape{1, 32, 64, 4, 2, RouterKind::kSigmoidTopK},
                      MoeShape{21, 40, 72, 8, 3, RouterKind::kSigmoidTopK, true},
                      MoeShape{70, 64, 96, 16, 6, RouterKind::kSigmoidTopK, true}));

TEST(MoeRouterTest, VariantsWeighAlike) {
  // Logits of 2 tokens over 4 experts; the second has a tie at the top.
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f, 3.0f, 0.0f, 3.0f, 1.0f};
  std::vector<int32_t> ids(4);
  std::vector<float> soft(4), renorm(4);
  RouteTokens(logits.data(), 2, 4, 2, RouterKind::kSoftmaxTopK, ids.data(), soft.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 0, 2}));  // the tie goes to the lower index
  const double z0 = std::exp(0.5) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_NEAR(soft[0], std::exp(2.0) / z0, 1e-7);
  EXPECT_NEAR(soft[1], std::exp(1.0) / z0, 1e-7);
  EXPECT_LT(soft[0] + soft[1], 1.0f);  // not renormalised
  RouteTokens(logits.data(), 2, 4, 2, RouterKind::kTopKSoftmax, ids.data(), renorm.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_NEAR(renorm[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(renorm[2] + renorm[3], 1.0, 1e-7);
  EXPECT_NEAR(renorm[2], 0.5, 1e-7);
  EXPECT_TRUE(ParseRouterKind("").ok());
  EXPECT_FALSE(ParseRouterKind("sigmoid").ok());
  EXPECT_TRUE(ParseRouterKind("sigmoid_topk").ok());
  // sigmoid_topk: the bias moves expert 3 to the top, the weights are the scores alone,
  // normalised over the chosen and scaled.
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.9f};
  std::vector<float> sig(4);
  RouteTokens(logits.data(), 2, 4, 2, RouterKind::kSigmoidTopK, ids.data(), sig.data(),
              RouterOptions{bias.data(), true, 2.0f});
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 1, 3, 0}));  // token 1: the tie 0/2 to 0
  auto s = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(sig[0], 2.0 * s(1.0) / (s(1.0) + s(2.0)), 1e-6);
  EXPECT_NEAR(sig[1], 2.0 * s(2.0) / (s(1.0) + s(2.0)), 1e-6);
  EXPECT_NEAR(sig[2] + sig[3], 2.0, 1e-6);
  RouteTokens(logits.data(), 2, 4, 2, RouterKind::kSigmoidTopK, ids.data(), sig.data(),
              RouterOptions{bias.data(), false, 1.0f});
  EXPECT_NEAR(sig[0], s(1.0), 1e-6);  // unnormalised: the score itself
}

// Each token's row of a batch is the bits of the token alone, whatever experts the others chose,
// in every weight format.
TEST(MoeMlpTest, TokenResultsDoNotDependOnTheBatch) {
  MoeConfig nemotron{64, 96, 8, 2, RouterKind::kSigmoidTopK, MlpActivation::kRelu2};
  nemotron.gated = false;
  nemotron.shared_d_ff = 64;
  nemotron.normalize = true;
  for (const MoeConfig& c :
       {MoeConfig{64, 96, 8, 2, RouterKind::kSoftmaxTopK, MlpActivation::kSilu}, nemotron}) {
    WeightMap w = MoeMlp::RandomWeights(c, 11);
    for (auto& [name, t] : w) t = t.to(at::kBFloat16).to(at::kFloat);  // bf16-exact for kBfloat16
    const at::Tensor x = testing::RandomTensor({24, 64}, 13);
    for (WeightFormat format :
         {WeightFormat::kFloat32, WeightFormat::kBfloat16, WeightFormat::kInt8}) {
      const MoeMlp moe(c, w, format);
      const at::Tensor batch = moe(x);
      std::set<int32_t> chosen;
      for (int64_t t = 0; t < x.size(0); ++t) {
        EXPECT_TRUE(at::equal(moe(x.narrow(0, t, 1)), batch.narrow(0, t, 1)))
            << "token " << t << " format " << static_cast<int>(format);
      }
      // The formats' outputs stay near float32's.
      const at::Tensor f32 = MoeMlp(c, w, WeightFormat::kFloat32)(x);
      EXPECT_LE(testing::MaxRelativeError(batch, f32), format == WeightFormat::kInt8 ? 3e-2 : 1e-6);
    }
    // The rows of this batch chose different experts: the test groups tokens for real.
    const at::Tensor logits = at::matmul(x, w.at("router.weight").t());
    const at::Tensor top = std::get<1>(logits.topk(1, -1));
    EXPECT_GE(std::get<0>(at::_unique(top)).numel(), 4);
  }
}

}  // namespace
}  // namespace attnserve::kernels

namespace attnserve::model {
namespace {

// A Jamba-like hybrid in attnserve's own format: Mamba-1 with weighted dt/B/C norms, GQA
// attention, experts on every other layer.
constexpr char kMoeHybrid[] = R"({"vocab_size": 96, "hidden_size": 64, "num_heads": 4,
  "num_key_value_heads": 2, "layers": ["mamba", "standard", "mamba", "mamba"],
  "intermediate_size": 96, "mamba_bcdt_rms_eps": 1e-6, "mamba_bcdt_norm_weights": true,
  "num_experts": 4, "num_experts_per_tok": 2, "expert_layers": [false, true, false, true]})";

TEST(MoeModelTest, ConfigAndRefusals) {
  auto config = ParseModelConfigJson(kMoeHybrid);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(LayerHasExperts(*config, 0));
  EXPECT_TRUE(LayerHasExperts(*config, 1));
  EXPECT_EQ(LayerMoeConfig(*config).router, kernels::RouterKind::kSoftmaxTopK);
  const std::vector<kernels::WeightSpec> specs = Model::ExpectedTensors(*config);
  auto has = [&](const std::string& name) {
    return std::any_of(specs.begin(), specs.end(),
                       [&](const kernels::WeightSpec& s) { return s.name == name; });
  };
  EXPECT_TRUE(has("backbone.layers.1.mlp.experts.3.down_proj.weight"));
  EXPECT_TRUE(has("backbone.layers.1.mlp.router.weight"));
  EXPECT_TRUE(has("backbone.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(has("backbone.layers.0.mixer.b_layernorm.weight"));
  EXPECT_FALSE(has("backbone.layers.1.mlp.gate_proj.weight"));
  for (const char* bad : {
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"], "intermediate_size": 8,
               "num_experts": 4, "num_experts_per_tok": 5})",
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"], "intermediate_size": 8,
               "num_experts": 4, "expert_layers": [true, false]})",
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"], "intermediate_size": 8,
               "num_experts": 4, "moe_router": "sigmoid"})",
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"], "num_experts_per_tok": 2})",
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"],
               "mamba_bcdt_norm_weights": true})"}) {
    EXPECT_FALSE(ParseModelConfigJson(bad).ok()) << bad;
  }
}

// JambaForCausalLM's config.json (architectures/jamba.cc): the periods to layers and experts,
// the Mamba norms with weights, num_experts 1 as dense MLPs, and the refusals by name.
TEST(JambaConfigTest, PeriodsAndRefusals) {
  auto c = ParseModelConfigJson(R"({"model_type": "jamba", "vocab_size": 65536,
      "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 16,
      "num_attention_heads": 8, "num_key_value_heads": 2, "num_experts": 8,
      "num_experts_per_tok": 2, "mamba_dt_rank": 32, "sliding_window": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(c->layers(i), i % 8 == 4 ? "standard" : "mamba") << i;  // attn period 8, offset 4
    EXPECT_EQ(LayerHasExperts(*c, i), i % 2 == 1) << i;               // expert period 2, offset 1
  }
  EXPECT_EQ(c->max_sequence_length(), 262144);
  EXPECT_FALSE(c->tie_word_embeddings());
  const kernels::MixerConfig mamba = LayerMixerConfig(*c, 0);
  EXPECT_TRUE(mamba.bcdt_norm_weights);
  EXPECT_DOUBLE_EQ(mamba.bcdt_rms_epsilon, 1e-6);
  EXPECT_EQ(mamba.resolved_dt_rank(), 32);
  const kernels::MixerConfig attention = LayerMixerConfig(*c, 4);
  EXPECT_EQ(attention.kv_heads(), 2);
  EXPECT_FALSE(attention.rope.enabled());
  auto dense = ParseModelConfigJson(R"({"model_type": "jamba", "num_experts": 1,
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2})");
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_FALSE(LayerHasExperts(*dense, 1));
  for (const auto& [json, message] : std::vector<std::pair<const char*, const char*>>{
           {R"({"model_type": "jamba", "sliding_window": 4096})", "'sliding_window': 4096"},
           {R"({"model_type": "jamba", "mamba_proj_bias": true})", "'mamba_proj_bias'"},
           {R"({"model_type": "jamba", "mamba_conv_bias": false})", "'mamba_conv_bias'"},
           {R"({"model_type": "jamba", "hidden_act": "gelu"})", "'hidden_act'"},
           {R"({"model_type": "jamba", "attn_layer_offset": 8})", "'attn_layer_offset'"},
           {R"({"model_type": "jamba", "num_experts": 4, "num_experts_per_tok": 5})",
            "num_experts_per_tok"}}) {
    auto bad = ParseModelConfigJson(json);
    ASSERT_FALSE(bad.ok()) << json;
    EXPECT_NE(bad.status().message().find(message), std::string::npos) << bad.status();
  }
}

TEST(MoeModelTest, ChunksStepsAndBatchedRowsEqualOneWholePass) {
  auto config = ParseModelConfigJson(kMoeHybrid);
  ASSERT_TRUE(config.ok()) << config.status();
  auto model = Model::Create("moe", *config, Model::RandomWeights(*config, 5), {});
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const at::Tensor tokens = at::randint(0, 96, {4, 30}, at::kLong);
  const at::Tensor whole = *m.Forward(tokens, nullptr, OutputKind::kAllLogits);
  std::vector<ModelState> states;
  for (int64_t b = 0; b < 4; ++b) {
    states.push_back(*m.NewState());
    ASSERT_TRUE(
        m.Forward(tokens.narrow(0, b, 1).narrow(1, 0, 20), &states[b], OutputKind::kLastLogits)
            .ok());
  }
  for (int64_t t = 20; t < 30; ++t) {
    // Rows 0-3 together; row 0 then alone on a copy of its state: the same bits.
    ModelState alone = states[0].Clone();
    std::vector<int64_t> ids;
    std::vector<ModelState*> ptrs;
    for (int64_t b = 0; b < 4; ++b) {
      ids.push_back(tokens[b][t].item<int64_t>());
      ptrs.push_back(&states[b]);
    }
    auto batch = m.StepBatch(ids, ptrs);
    ASSERT_TRUE(batch.ok()) << batch.status();
    auto single = m.StepBatch({ids[0]}, {&alone});
    ASSERT_TRUE(single.ok());
    EXPECT_TRUE(at::equal(*single, batch->narrow(0, 0, 1))) << "step " << t;
    EXPECT_LE(testing::MaxRelativeError(*batch, whole.select(1, t)), 1e-5) << "step " << t;
  }
}

}  // namespace
}  // namespace attnserve::model
