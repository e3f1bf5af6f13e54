// Models: the default repository, folders on disk (ours and Hugging Face Mamba's) against a
// plain PyTorch implementation, streaming equivalence, and session-state serialization.
#include "server/model/model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kernels/standard/kv_cache.h"
#include "server/model/default_models.h"
#include "server/model/model_config.h"
#include "server/model/model_io.h"
#include "server/model/model_repository.h"
#include "server/model/safetensors.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() /
                 ("attnserve_model_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

at::Tensor Tokens(std::vector<int64_t> ids) {
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())});
}

at::Tensor RandomTokens(int64_t len, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(0, vocab, {1, len}, gen, at::kLong);
}

// `sessions` pairs of equal states, one to step in batches and one to step alone: session i
// after a prompt of prompt_length(i) random tokens (none when 0).
void TwinStates(const Model& m, int sessions, const std::function<int64_t(int)>& prompt_length,
                std::vector<ModelState>* batched, std::vector<ModelState>* alone) {
  for (int i = 0; i < sessions; ++i) {
    auto state = m.NewState();
    ASSERT_TRUE(state.ok()) << state.status();
    if (const int64_t len = prompt_length(i); len > 0) {
      ASSERT_TRUE(
          m.Forward(RandomTokens(len, m.vocab_size(), 30 + i), &*state, OutputKind::kLastLogits)
              .ok());
    }
    alone->push_back(state->Clone());
    batched->push_back(*std::move(state));
  }
}

TEST(DefaultModelsTest, EightVariantsOfTheSameSize) {
  auto repo = ModelRepository::BuildDefault();
  ASSERT_TRUE(repo.ok()) << repo.status();
  std::vector<std::string> names;
  for (const Model* m : (*repo)->models()) {
    names.push_back(m->name());
    EXPECT_EQ(m->config().hidden_size(), 256);
    EXPECT_EQ(m->config().layers_size(), 4);
    EXPECT_EQ(m->vocab_size(), 4096);
    EXPECT_EQ(m->can_stream(), m->name() != "linformer") << m->name();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"hybrid", "linear", "linformer", "mamba", "performer",
                                             "rwkv", "sliding_window", "sparse", "standard"}));
  const Model* hybrid = (*repo)->Find("hybrid");
  EXPECT_EQ(hybrid->config().layers(3), "standard");
  EXPECT_EQ((*repo)->Find("nope"), nullptr);
  // Fixed seeds: building again gives the same model.
  auto again = BuildDefaultModel("mamba");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint(), (*repo)->Find("mamba")->fingerprint());
  EXPECT_NE((*repo)->Find("mamba")->fingerprint(), hybrid->fingerprint());
}

TEST(DefaultModelsTest, WrittenFoldersLoadBackWithTheSameLogits) {
  fs::path dir = TempDir("roundtrip");
  for (const std::string& name : DefaultModelNames()) {
    auto model = BuildDefaultModel(name);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(WriteModelFolder(**model, (dir / name).string()).ok());
  }
  std::ifstream config(dir / "mamba" / "config.json");
  std::string json((std::istreambuf_iterator<char>(config)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"model_type\": \"mamba\""), std::string::npos) << json;
  // The rwkv default is written as a Hugging Face RwkvForCausalLM folder, with its names.
  std::ifstream rwkv_config(dir / "rwkv" / "config.json");
  const std::string rwkv_json((std::istreambuf_iterator<char>(rwkv_config)),
                              std::istreambuf_iterator<char>());
  EXPECT_NE(rwkv_json.find("\"model_type\": \"rwkv\""), std::string::npos) << rwkv_json;
  auto rwkv_file = SafetensorsFile::Open((dir / "rwkv" / "model.safetensors").string());
  ASSERT_TRUE(rwkv_file.ok()) << rwkv_file.status();
  for (const char* name :
       {"rwkv.embeddings.weight", "rwkv.blocks.0.pre_ln.bias", "rwkv.blocks.3.attention.time_decay",
        "rwkv.blocks.1.feed_forward.key.weight", "rwkv.ln_out.weight"}) {
    EXPECT_NE((*rwkv_file)->Find(name), nullptr) << name;
  }
  EXPECT_EQ((*rwkv_file)->Find("backbone.embeddings.weight"), nullptr);

  auto repo = ModelRepository::LoadFolder(dir.string());
  ASSERT_TRUE(repo.ok()) << repo.status();
  at::Tensor tokens = RandomTokens(50, 4096, 1);
  for (const std::string& name : DefaultModelNames()) {
    auto built = BuildDefaultModel(name);
    const Model* loaded = (*repo)->Find(name);
    ASSERT_NE(loaded, nullptr) << name;
    EXPECT_EQ(loaded->fingerprint(), (*built)->fingerprint()) << name;
    auto a = (*built)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    auto b = loaded->Forward(tokens, nullptr, OutputKind::kAllLogits);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_TRUE(at::equal(*a, *b)) << name;
    EXPECT_GT((*repo)->load_seconds(name), 0.0);
  }
  fs::remove_all(dir);
}

class PythonReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(TempDir("python"));
    const std::string cmd = std::string("/usr/bin/python3 ") + ATTNSERVE_SOURCE_DIR +
                            "/tests/model/make_reference_models.py --out " + dir_->string() +
                            " > " + (*dir_ / "log.txt").string() + " 2>&1";
    status_ = std::system(cmd.c_str());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void Check(const std::string& name, double tolerance) {
    ASSERT_EQ(status_, 0) << "make_reference_models.py failed; see " << (*dir_ / "log.txt");
    auto model = LoadModelFolder((*dir_ / name).string(), name);
    ASSERT_TRUE(model.ok()) << model.status();
    auto expected = SafetensorsFile::Open((*dir_ / (name + ".expected.safetensors")).string());
    ASSERT_TRUE(expected.ok()) << expected.status();
    at::Tensor tokens = (*expected)->LoadFloat32("tokens").value().to(at::kLong);
    at::Tensor want = (*expected)->LoadFloat32("logits").value();
    auto got = (*model)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(testing::MaxRelativeError(*got, want), tolerance) << name;

    // The same through a session: chunks, then single steps.
    if ((*model)->can_stream()) {
      auto state = (*model)->NewState();
      ASSERT_TRUE(state.ok());
      std::vector<at::Tensor> parts;
      const int64_t len = tokens.size(1);
      parts.push_back(*(*model)->Forward(tokens.narrow(1, 0, 20), &*state, OutputKind::kAllLogits));
      for (int64_t t = 20; t < len; ++t) {
        parts.push_back(
            *(*model)->Forward(tokens.narrow(1, t, 1), &*state, OutputKind::kAllLogits));
      }
      EXPECT_LE(testing::MaxRelativeError(at::cat(parts, 1), want), tolerance) << name;
    }
  }
  static fs::path* dir_;
  static int status_;
};
fs::path* PythonReferenceTest::dir_ = nullptr;
int PythonReferenceTest::status_ = -1;

TEST_F(PythonReferenceTest, HuggingFaceMambaFolderMatchesPyTorch) { Check("hf_mamba", 1e-4); }
TEST_F(PythonReferenceTest, Bfloat16MambaFolderMatchesPyTorch) { Check("hf_mamba_bf16", 1e-4); }
TEST_F(PythonReferenceTest, AttentionFolderMatchesPyTorch) { Check("attention", 1e-4); }
// transformers' RWKV inference: ln_out with LayerNorm's default epsilon 1e-5 whatever
// layer_norm_epsilon says, and the rescaling every rescale_every blocks; with epsilon 1e-3
// each of them moves the logits by 2.5e-4 to 1.4e-2.
TEST_F(PythonReferenceTest, HuggingFaceRwkvFolderMatchesPyTorch) { Check("hf_rwkv", 1e-4); }
TEST_F(PythonReferenceTest, RwkvRescaledEveryLayerMatchesTransformers) {
  Check("hf_rwkv_eps3_rescale1", 1e-4);
}
TEST_F(PythonReferenceTest, RwkvNeverRescaledKeepsLnOutsEpsilon) {
  Check("hf_rwkv_eps3_rescale0", 1e-4);
}
TEST_F(PythonReferenceTest, RwkvRescaledEveryThirdLayerMatchesTransformers) {
  Check("hf_rwkv_eps3_rescale3", 1e-4);
}

class ModelStreamingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelStreamingTest, ChunksAndStepsEqualOneWholePass) {
  auto model = BuildDefaultModel(GetParam());
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  at::Tensor tokens = RandomTokens(90, m.vocab_size(), 2);
  at::Tensor whole = *m.Forward(tokens, nullptr, OutputKind::kAllLogits);

  auto state = m.NewState();
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<at::Tensor> parts;
  parts.push_back(*m.Forward(tokens.narrow(1, 0, 33), &*state, OutputKind::kAllLogits));
  EXPECT_EQ(state->position, 33);
  // Snapshots of a session mid-sequence: tests/unit/session_snapshot_test.cc.
  parts.push_back(*m.Forward(tokens.narrow(1, 33, 40), &*state, OutputKind::kAllLogits));
  for (int64_t t = 73; t < 90; ++t) {
    parts.push_back(*m.Forward(tokens.narrow(1, t, 1), &*state, OutputKind::kAllLogits));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(parts, 1), whole), 1e-5);

  auto last = m.Forward(tokens, nullptr, OutputKind::kLastLogits);
  ASSERT_EQ(last->sizes(), at::IntArrayRef({1, m.vocab_size()}));
  // The last position alone goes through a matrix-vector product (kernels/common/linear.h),
  // the whole sequence through a matrix product: equal up to the summation order.
  EXPECT_LE(testing::MaxRelativeError(*last, whole.select(1, 89)), 1e-5);
  auto hidden = m.Forward(tokens, nullptr, OutputKind::kHidden);
  EXPECT_EQ(hidden->sizes(), at::IntArrayRef({1, 90, 256}));
}

INSTANTIATE_TEST_SUITE_P(Defaults, ModelStreamingTest,
                         ::testing::Values("standard", "linear", "mamba", "hybrid",
                                           "sliding_window", "performer", "rwkv", "sparse"));

// B sessions of different lengths decoded in one StepBatch equal each session stepped alone
// (fp32 and bf16 weights: a batch reads the float32 matrices, one row the bfloat16 copies,
// which hold the same bfloat16-exact values; int8: a row's integer products do not depend on its
// batch).
TEST_P(ModelStreamingTest, StepBatchEqualsEverySessionAlone) {
  for (WeightPrecision precision :
       {WeightPrecision::kFloat32, WeightPrecision::kBfloat16, WeightPrecision::kInt8}) {
    auto model = BuildDefaultModel(GetParam(), {at::Device(at::kCPU), precision});
    ASSERT_TRUE(model.ok());
    const Model& m = **model;
    constexpr int kSessions = 6;
    std::vector<ModelState> batched, alone;
    const auto prompt = [](int i) -> int64_t { return 7 * i; };
    TwinStates(m, kSessions, prompt, &batched, &alone);
    ASSERT_FALSE(HasFatalFailure());
    for (int step = 0; step < 5; ++step) {
      std::vector<int64_t> tokens;
      std::vector<ModelState*> states;
      for (int i = step % 2; i < kSessions; ++i) {  // rows join and leave
        tokens.push_back((step * 131 + i * 17) % m.vocab_size());
        states.push_back(&batched[i]);
      }
      auto logits = m.StepBatch(tokens, states);
      ASSERT_TRUE(logits.ok()) << logits.status();
      ASSERT_EQ(logits->sizes(),
                at::IntArrayRef({static_cast<int64_t>(tokens.size()), m.vocab_size()}));
      for (size_t r = 0; r < tokens.size(); ++r) {
        const int i = static_cast<int>(r) + step % 2;
        auto one = m.Forward(Tokens({tokens[r]}), &alone[i], OutputKind::kLastLogits);
        ASSERT_TRUE(one.ok());
        EXPECT_LE(testing::MaxRelativeError(logits->narrow(0, static_cast<int64_t>(r), 1), *one),
                  1e-5)
            << "session " << i << " step " << step;
        EXPECT_EQ(batched[i].position, alone[i].position);
      }
    }
    // Input errors leave every state as it was.
    const int64_t before = batched[1].position;
    EXPECT_EQ(m.StepBatch({1, m.vocab_size()}, {&batched[1], &batched[2]}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(batched[1].position, before);
  }
}

// docs/architecture.md's claim for the whole model: a session's decode step (logits and
// state) is the same bits in a batch of up to 64 sessions as stepped alone (a batch of one).
TEST_P(ModelStreamingTest, StepBatchRowsAreBitIdenticalToTheSessionAlone) {
  auto model = BuildDefaultModel(GetParam());
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  constexpr int kSessions = 11;
  std::vector<ModelState> batched, alone;
  const auto prompt = [](int i) -> int64_t { return 1 + 3 * i; };
  TwinStates(m, kSessions, prompt, &batched, &alone);
  ASSERT_FALSE(HasFatalFailure());
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> tokens;
    std::vector<ModelState*> states;
    for (int i = step; i < kSessions; ++i) {
      tokens.push_back((step * 71 + i * 13) % m.vocab_size());
      states.push_back(&batched[i]);
    }
    auto logits = m.StepBatch(tokens, states);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t r = 0; r < tokens.size(); ++r) {
      const int i = static_cast<int>(r) + step;
      auto one = m.StepBatch({tokens[r]}, {&alone[i]});
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_TRUE(at::equal(logits->narrow(0, static_cast<int64_t>(r), 1), *one))
          << "session " << i << " step " << step;
    }
  }
}

// Data-parallel decode (StepBatch's `parts`, the scheduler's DecodeParts): a batch cut into
// parts, each a step of its own on one thread, gives every row the same bits as the whole batch
// in one part, over steps (so the states the parts wrote are the same too), in each precision.
TEST_P(ModelStreamingTest, StepBatchInPartsIsBitIdenticalToOnePart) {
  const int threads_before = at::get_num_threads();
  at::set_num_threads(2);  // parts run concurrently, as in the server
  for (WeightPrecision precision :
       {WeightPrecision::kFloat32, WeightPrecision::kBfloat16Dot, WeightPrecision::kInt8}) {
    auto model = BuildDefaultModel(GetParam(), {at::Device(at::kCPU), precision});
    ASSERT_TRUE(model.ok());
    const Model& m = **model;
    constexpr int kSessions = 9;
    std::vector<ModelState> whole, in_parts;
    const auto prompt = [](int i) -> int64_t { return 2 + 5 * i; };
    TwinStates(m, kSessions, prompt, &whole, &in_parts);
    ASSERT_FALSE(HasFatalFailure());
    for (int step = 0; step < 4; ++step) {
      const int parts = 2 + step % 3;  // 2, 3, 4 parts of 9 rows
      std::vector<int64_t> tokens;
      std::vector<ModelState*> one_part, many_parts;
      for (int i = 0; i < kSessions; ++i) {
        tokens.push_back((step * 97 + i * 29) % m.vocab_size());
        one_part.push_back(&whole[i]);
        many_parts.push_back(&in_parts[i]);
      }
      auto want = m.StepBatch(tokens, one_part);
      auto got = m.StepBatch(tokens, many_parts, parts);
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
      EXPECT_TRUE(at::equal(*got, *want)) << "step " << step << ", " << parts << " parts";
      for (int i = 0; i < kSessions; ++i) EXPECT_EQ(in_parts[i].position, whole[i].position);
    }
    // More parts than rows: one row a part.
    auto clamped = m.StepBatch({3, 4}, {&in_parts[0], &in_parts[1]}, 8);
    auto want = m.StepBatch({3, 4}, {&whole[0], &whole[1]});
    ASSERT_TRUE(clamped.ok() && want.ok());
    EXPECT_TRUE(at::equal(*clamped, *want));
  }
  at::set_num_threads(threads_before);
}

TEST(ModelTest, RejectsBadTokensWithMessages) {
  auto model = BuildDefaultModel("linformer");
  const Model& m = **model;
  auto out_of_vocab = m.Forward(Tokens({1, 4096}), nullptr, OutputKind::kLastLogits);
  EXPECT_NE(
      out_of_vocab.status().message().find("token id 4096 is outside the vocabulary [0, 4096)"),
      std::string::npos)
      << out_of_vocab.status();
  EXPECT_NE(m.Forward(Tokens({-1}), nullptr, OutputKind::kLastLogits)
                .status()
                .message()
                .find("token id -1"),
            std::string::npos);
  EXPECT_EQ(
      m.Forward(at::zeros({1, 0}, at::kLong), nullptr, OutputKind::kLastLogits).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.Forward(at::zeros({1, 3}), nullptr, OutputKind::kLastLogits)
                .status()
                .message()
                .find("expected int64 (batch, length), got float32 (1, 3)"),
            std::string::npos);
  auto too_long = m.Forward(at::zeros({1, 32769}, at::kLong), nullptr, OutputKind::kLastLogits);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_long.status().message().find("32769"), std::string::npos);
  EXPECT_EQ(m.NewState().status().code(), absl::StatusCode::kFailedPrecondition);
}

// A model asked for a device this LibTorch cannot reach is a status, never a crash (the
// server resolves --device first; this is the backstop behind it).
TEST(ModelTest, AnUnreachableCudaDeviceIsAnErrorNotACrash) {
  if (at::hasCUDA()) GTEST_SKIP() << "this LibTorch reaches a CUDA device";
  auto model = BuildDefaultModel("mamba", {at::Device(at::kCUDA, 0)});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("moving the weights to the device"), std::string::npos)
      << model.status();
  auto repository = ModelRepository::BuildDefault({at::Device(at::kCUDA, 0)});
  EXPECT_FALSE(repository.ok());
}

// intermediate_size 0 is 4 * hidden_size in rwkv layers; the Hugging Face layout writes it out:
// the same model, the same fingerprint (so its sessions' snapshots stay valid).
TEST(ModelTest, AnRwkvModelKeepsItsFingerprintThroughTheHuggingFaceLayout) {
  v1::ModelConfig config = *DefaultModelConfig("rwkv");
  config.set_intermediate_size(0);
  auto model = Model::Create("rwkv0", config, Model::RandomWeights(config, 3));
  ASSERT_TRUE(model.ok()) << model.status();
  const fs::path dir = TempDir("rwkv_fingerprint");
  ASSERT_TRUE(WriteModelFolder(**model, (dir / "rwkv0").string()).ok());
  auto loaded = LoadModelFolder((dir / "rwkv0").string(), "rwkv0");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().intermediate_size(), 4 * config.hidden_size());
  EXPECT_EQ((*loaded)->fingerprint(), (*model)->fingerprint());
  fs::remove_all(dir);
}

// transformers' RwkvConfig: rescale_every 6 when config.json leaves it out, ln_out at 1e-5
// whatever layer_norm_epsilon says; rescaling is carried as LayerNorm epsilons
// (model_config.h), and the Hugging Face layout writes rescale_every back: the same model,
// the same fingerprint.
TEST(ModelTest, HuggingFaceRwkvKeepsRescaleEveryAndLnOutsEpsilon) {
  auto config = ParseModelConfigJson(
      R"({"model_type": "rwkv", "hidden_size": 32, "num_hidden_layers": 13,
          "vocab_size": 50, "layer_norm_epsilon": 1e-3})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rwkv_rescale_every(), 6);
  EXPECT_EQ(config->final_norm_epsilon(), 1e-5);
  EXPECT_EQ(LayerMixerConfig(*config, 5).norm_epsilon, 1e-3);
  EXPECT_EQ(LayerMixerConfig(*config, 6).norm_epsilon, 4e-3);
  EXPECT_EQ(LayerMixerConfig(*config, 12).norm_epsilon, 16e-3);
  EXPECT_EQ(FinalNormEpsilon(*config), 16e-5);  // two halvings (13 / 6) before ln_out
  auto model = Model::Create("rwkv6", *config, Model::RandomWeights(*config, 4));
  ASSERT_TRUE(model.ok()) << model.status();
  const fs::path dir = TempDir("rwkv_rescaled");
  ASSERT_TRUE(WriteModelFolder(**model, (dir / "rwkv6").string()).ok());
  auto loaded = LoadModelFolder((dir / "rwkv6").string(), "rwkv6");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().model_type(), "rwkv");
  EXPECT_EQ((*loaded)->config().rwkv_rescale_every(), 6);
  EXPECT_EQ((*loaded)->fingerprint(), (*model)->fingerprint());
  // An attnserve config whose final norm is not ln_out's 1e-5 cannot be written in Hugging
  // Face's layout; it is written in attnserve's, and reads back the same.
  v1::ModelConfig ours = *DefaultModelConfig("rwkv");
  ours.set_norm_epsilon(1e-3);
  auto custom = Model::Create("rwkv_eps", ours, Model::RandomWeights(ours, 5));
  ASSERT_TRUE(custom.ok()) << custom.status();
  EXPECT_FALSE(IsHuggingFaceRwkv(ours));
  ASSERT_TRUE(WriteModelFolder(**custom, (dir / "rwkv_eps").string()).ok());
  auto reloaded = LoadModelFolder((dir / "rwkv_eps").string(), "rwkv_eps");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ((*reloaded)->fingerprint(), (*custom)->fingerprint());
  ours.set_layers(0, "mamba");
  ours.set_rwkv_rescale_every(2);
  const absl::Status mixed = ValidateModelConfig(ours);
  EXPECT_NE(mixed.message().find("rwkv_rescale_every"), std::string::npos) << mixed;
  fs::remove_all(dir);
}

// A CPU model takes and gives CPU tensors, and its states live on the CPU.
TEST(ModelTest, CpuModelStatesAndOutputsAreOnTheCpu) {
  auto model = BuildDefaultModel("hybrid", {at::Device(at::kCPU)});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->device().is_cpu());
  auto state = (*model)->NewState();
  ASSERT_TRUE(state.ok()) << state.status();
  for (const auto& layer : state->layers) {
    for (const at::Tensor& t : layer.tensors) EXPECT_TRUE(t.device().is_cpu());
  }
  auto logits = (*model)->Forward(Tokens({1, 2, 3}), &*state, OutputKind::kLastLogits);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_TRUE(logits->device().is_cpu());
}

// --weight_precision=bf16: the weights are rounded once at load, so prefill (float32 matrix
// products) and decode steps (bfloat16 matrix-vector products) compute with the same values and
// still agree; the model differs from the float32 one by that rounding, and says so in its
// fingerprint (a float32 model's session state is refused).
TEST(ModelTest, Bfloat16WeightsStreamConsistentlyAndDifferOnlyByRounding) {
  for (const std::string name : {"mamba", "hybrid", "standard"}) {
    SCOPED_TRACE(name);
    auto fp32 = BuildDefaultModel(name);
    auto bf16 = BuildDefaultModel(name, {at::Device(at::kCPU), WeightPrecision::kBfloat16});
    ASSERT_TRUE(fp32.ok() && bf16.ok()) << bf16.status();
    EXPECT_NE((*fp32)->fingerprint(), (*bf16)->fingerprint());
    const at::Tensor tokens = RandomTokens(40, (*bf16)->vocab_size(), 5);
    const at::Tensor whole = *(*bf16)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    const at::Tensor reference = *(*fp32)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    const double rounding = testing::MaxRelativeError(whole, reference);
    EXPECT_GT(rounding, 1e-6);  // the weights really were rounded
    EXPECT_LT(rounding, 5e-2);

    auto state = (*bf16)->NewState();
    ASSERT_TRUE(state.ok());
    std::vector<at::Tensor> parts;
    parts.push_back(*(*bf16)->Forward(tokens.narrow(1, 0, 25), &*state, OutputKind::kAllLogits));
    for (int64_t t = 25; t < 40; ++t) {  // decode steps: the bfloat16 copies
      parts.push_back(*(*bf16)->Forward(tokens.narrow(1, t, 1), &*state, OutputKind::kAllLogits));
    }
    EXPECT_LE(testing::MaxRelativeError(at::cat(parts, 1), whole), 1e-5);
    // Other weights, another fingerprint: a snapshot of one is refused by the other
    // (tests/unit/session_snapshot_test.cc).
    EXPECT_NE((*fp32)->fingerprint(), (*bf16)->fingerprint());
  }
}

// --weight_precision=int8: the matrices are quantized at load (a scale per block of 32) and
// decode steps quantize their activations too, so the model differs from the float32 one by a
// little (more than bf16's rounding, well under the logits' scale), a prompt streamed in short
// chunks (int8 products) stays close to the whole prompt at once (past 32 rows: float32 products
// of the dequantized weights), and the fingerprint differs from the float32 model's.
TEST(ModelTest, Int8WeightsStayCloseToFloat32AndStreamConsistently) {
  for (const std::string name : {"mamba", "hybrid", "standard", "rwkv"}) {
    SCOPED_TRACE(name);
    auto fp32 = BuildDefaultModel(name);
    auto int8 = BuildDefaultModel(name, {at::Device(at::kCPU), WeightPrecision::kInt8});
    auto rows = BuildDefaultModel(name, {at::Device(at::kCPU), WeightPrecision::kInt8PerRow});
    ASSERT_TRUE(fp32.ok() && int8.ok() && rows.ok()) << int8.status();
    EXPECT_NE((*fp32)->fingerprint(), (*int8)->fingerprint());
    EXPECT_NE((*int8)->fingerprint(), (*rows)->fingerprint());
    const at::Tensor tokens = RandomTokens(40, (*int8)->vocab_size(), 5);
    const at::Tensor reference = *(*fp32)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    const at::Tensor whole = *(*int8)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    const double quantization = testing::MaxRelativeError(whole, reference);
    EXPECT_GT(quantization, 1e-4);  // the weights really were quantized
    EXPECT_LT(quantization, 5e-2);

    auto state = (*int8)->NewState();
    ASSERT_TRUE(state.ok());
    std::vector<at::Tensor> parts;
    for (int64_t t = 0; t < 40; t += t < 24 ? 8 : 1) {  // chunks of 8, then decode steps
      const int64_t n = t < 24 ? 8 : 1;
      parts.push_back(*(*int8)->Forward(tokens.narrow(1, t, n), &*state, OutputKind::kAllLogits));
    }
    const at::Tensor streamed = at::cat(parts, 1);
    EXPECT_LT(testing::MaxRelativeError(streamed, whole), 5e-2);
    EXPECT_LT(testing::MaxRelativeError(streamed, reference), 5e-2);
  }
}

// A bfloat16 or int8 model keeps its matrices only in that format: it cannot be written back as a
// float32 folder, and says so.
TEST(ModelTest, NarrowWeightModelsRefuseExportWithAReason) {
  for (const WeightPrecision precision : {WeightPrecision::kBfloat16, WeightPrecision::kInt8}) {
    auto model = BuildDefaultModel("mamba", {at::Device(at::kCPU), precision});
    ASSERT_TRUE(model.ok()) << model.status();
    const absl::Status written = WriteModelFolder(**model, TempDir("narrow").string());
    EXPECT_EQ(written.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(written.message().find("float32"), std::string::npos) << written;
  }
}

TEST(ModelConfigTest, ParsesOursAndHuggingFaceAndRejectsBadConfigs) {
  auto ours = ParseModelConfigJson(
      R"({"vocab_size": 10, "hidden_size": 32, "num_heads": 2, "layers": ["linear", "mamba"],
          "future_field": {"x": 1}})");
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ(ours->state_size(), 16);
  EXPECT_EQ(ours->layers(1), "mamba");

  auto hf = ParseModelConfigJson(
      R"({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
          "vocab_size": 50280, "time_step_rank": 48, "layer_norm_epsilon": 1e-5})");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->layers_size(), 24);
  EXPECT_TRUE(hf->tie_word_embeddings());
  EXPECT_EQ(LayerMixerConfig(*hf, 0).resolved_dt_rank(), 48);

  struct Bad {
    const char* json;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"{not json", "not a JSON object"},
           {R"({"vocab_size": 10, "hidden_size": 32, "layers": ["lstm"]})",
            "layers[0]: unknown mixer 'lstm'"},
           {R"({"vocab_size": 10, "hidden_size": 30, "num_heads": 4, "layers": ["standard"]})",
            "must be a multiple of num_heads"},
           {R"({"vocab_size": 10, "hidden_size": 32})", "layers is empty"},
           {R"({"hidden_size": 32, "layers": ["mamba"]})", "vocab_size must be > 0"},
           {R"({"model_type": "mamba", "use_bias": true})", "'use_bias': true is not supported"},
           {R"({"model_type": "mamba", "hidden_size": 7.5})", "'hidden_size' must be an integer"},
       }) {
    auto parsed = ParseModelConfigJson(bad.json);
    EXPECT_FALSE(parsed.ok()) << bad.json;
    EXPECT_NE(parsed.status().message().find(bad.message), std::string::npos)
        << parsed.status() << " for " << bad.json;
  }
}

TEST(ModelIoTest, FolderErrorsNameTheTensorAndBothShapes) {
  fs::path dir = TempDir("io_errors");
  auto model = BuildDefaultModel("mamba");
  ASSERT_TRUE(WriteModelFolder(**model, (dir / "ok").string()).ok());
  std::vector<std::pair<std::string, at::Tensor>> weights = *(*model)->NamedWeights();

  auto write_variant = [&](const std::string& name,
                           std::vector<std::pair<std::string, at::Tensor>> w) {
    fs::create_directories(dir / name);
    fs::copy_file(dir / "ok" / "config.json", dir / name / "config.json");
    EXPECT_TRUE(WriteSafetensors((dir / name / "model.safetensors").string(), w, {}).ok());
    return LoadModelFolder((dir / name).string(), name).status();
  };
  auto missing = weights;
  missing.pop_back();
  EXPECT_NE(write_variant("missing", missing)
                .message()
                .find("missing tensor 'backbone.norm_f.weight' of shape (256)"),
            std::string::npos);
  auto misshapen = weights;
  misshapen[1].second = at::zeros({7});
  EXPECT_NE(
      write_variant("misshapen", misshapen)
          .message()
          .find("tensor 'backbone.layers.0.norm.weight' has shape (7), config.json implies (256)"),
      std::string::npos)
      << write_variant("misshapen2", misshapen);
  auto extra = weights;
  extra.emplace_back("backbone.layers.9.norm.weight", at::zeros({256}));
  EXPECT_NE(write_variant("extra", extra)
                .message()
                .find("unexpected tensor 'backbone.layers.9.norm.weight'"),
            std::string::npos);
  EXPECT_EQ(LoadModelFolder((dir / "absent").string(), "absent").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ModelRepository::LoadFolder((dir / "absent").string()).status().code(),
            absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attnserve::model
