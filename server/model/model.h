// A served model: embedding [-> norm] -> N x (norm -> mixer -> residual [-> norm -> gated MLP
// (SiLU or GeLU-tanh, biases optional), or a mixture of such experts (kernels/moe/) -> residual])
// -> norm -> lm_head, the norms RMSNorm or
// LayerNorm (config.norm). A layer marked in config.shared_block_layers first runs Zamba's shared
// attention + MLP block on concat(x, input embeddings) and feeds x + its shared_linear of that
// to its mixer (shared_block.h; the block's KV cache of each such layer is a slot of its own in
// ModelState::layers, after the layers'). A layer whose mixer is a whole block with its norms
// inside (kernels::MixerOwnsNorms: rwkv) is x + mixer(x), with no norm or MLP of the model's. A
// layer whose mixer is "none" is x + MLP(mlp_norm(x)) alone, and a layer may have no MLP
// (config.mlp_layers: Nemotron-H's one-part blocks). A layer with a parallel mixer
// (config.parallel_layers: Falcon-H1) adds both mixers' outputs of the same normed input; the
// parallel mixer's state is a slot of its own in ModelState::layers, after the shared blocks'
// (layer_layout.h). Each layer names its mixer, so hybrids are ordinary configs. A Model is
// immutable after Create and safe to call from many threads at once with distinct states; a
// ModelState belongs to one caller at a time.
//
// Checkpoint names (Hugging Face MambaForCausalLM's, extended for MLPs and attention; a
// LayerNorm has a .bias next to each .weight):
//   backbone.embeddings.weight (vocab, hidden)   (backbone.embedding.weight is accepted too)
//   backbone.embeddings_norm.weight              (config.embedding_norm)
//   backbone.layers.{i}.norm.weight              backbone.layers.{i}.mixer.<mixer tensor>
//   (parallel_layers)                            backbone.layers.{i}.parallel_mixer.<tensor>
//   backbone.layers.{i}.mlp_norm.weight          backbone.layers.{i}.mlp.{gate,up,down}_proj.weight
//                                                (and .bias each with mlp_bias)
//   with experts (config.expert_layers):         backbone.layers.{i}.mlp.router.weight,
//                                                backbone.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight
//   backbone.norm_f.weight                       lm_head.weight (absent when tied)
// Hugging Face checkpoints' names map onto these (server/model/architectures/: Llama's
// model.layers.{i}.self_attn.q_proj.weight is backbone.layers.{i}.mixer.q_proj.weight, ...).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "kernels/common/linear.h"
#include "kernels/common/mixer.h"
#include "kernels/moe/gated_mlp.h"
#include "kernels/moe/moe_mlp.h"
#include "server/model/model_text.h"

namespace attnserve::model {

class SharedBlock;  // server/model/shared_block.h

// What Forward returns.
enum class OutputKind {
  kLastLogits,  // (B, vocab) at the last position
  kAllLogits,   // (B, L, vocab)
  kHidden,      // (B, L, hidden) after the final norm
};

// kInt8PerRow is kInt8 with one scale per weight row instead of per block of 32: compared in
// bench/int8_accuracy.cc, not served (no flag value).
enum class WeightPrecision { kFloat32, kBfloat16, kBfloat16Dot, kInt8, kInt8PerRow };

// How a model is made ready to serve; none of it changes the checkpoint format.
struct ModelOptions {
  // CUDA: the weights move there, the mixers run their CUDA kernels, states live there too.
  at::Device device = at::kCPU;
  // kBfloat16: every weight is rounded to bfloat16 at load (the values a bf16 checkpoint would
  // hold) and weight matrices are kept only as bfloat16 panels, which every product reads: half
  // the bytes per token (kernels/common/linear.h). Outputs then differ from the float32 model by
  // bfloat16 weight rounding (~0.4% relative per weight).
  // kBfloat16Dot (--activation_precision=bf16): kBfloat16, and the products also round their
  // activations to bfloat16 and multiply on the CPU's vdpbf16ps where it has it
  // (kernels/common/bf16_dot_gemm.h; llama.cpp's BF16 arithmetic). CPU only.
  // kInt8: every weight matrix whose width is a multiple of 32 is quantized at load to int8 with a
  // float32 scale per block of 32 (llama.cpp's Q8_0 granularity) and every product multiplies it
  // by activations quantized the same way, in integers (kernels/common/int8_gemm.h; a quarter of
  // the bytes). Embedding lookups, norms and the mixers' other tensors stay float32. CPU only.
  WeightPrecision precision = WeightPrecision::kFloat32;
  // The standard attention layers' KV caches: at::kFloat, or at::kBFloat16 (keys and values
  // rounded to bfloat16 as they are written, half a session's cache bytes; CPU only;
  // kernels/standard/kv_cache_mixer.h). Its states are not the float32 cache's (the fingerprint
  // says so, and a snapshot of one does not load into the other).
  at::ScalarType kv_cache_dtype = at::kFloat;
  // Whether a float32 model keeps its tensors as loaded, for NamedWeights (WriteModelFolder):
  // on the CPU its weight matrices are otherwise kept only as the products' panels. The server
  // never writes a model folder and sets it false, so it holds each matrix once.
  bool exportable = true;
};

// Every layer's mixer state for a batch of sequences, and how many tokens it has consumed.
struct ModelState {
  std::vector<kernels::MixerState> layers;
  int64_t position = 0;

  int64_t Bytes() const;
  ModelState Clone() const;
};

class Model {
 public:
  ~Model();  // model.cc: SharedBlock is complete there
  // Checks `weights` against ExpectedTensors(config): a missing, extra or misshapen tensor is
  // an error naming it and both shapes. `config` must pass ValidateModelConfig.
  // Forward takes and returns CPU tensors whatever options.device.
  static absl::StatusOr<std::unique_ptr<Model>> Create(std::string name, v1::ModelConfig config,
                                                       std::map<std::string, at::Tensor> weights,
                                                       const ModelOptions& options = {});

  // The tensors a model with `config` is made of, in checkpoint order, with their shapes.
  static std::vector<kernels::WeightSpec> ExpectedTensors(const v1::ModelConfig& config);

  // Weights drawn from `seed` (the same seed gives the same model on every machine).
  static std::map<std::string, at::Tensor> RandomWeights(const v1::ModelConfig& config,
                                                         uint64_t seed);

  const std::string& name() const { return name_; }
  const v1::ModelConfig& config() const { return config_; }
  at::Device device() const { return lm_head_.device(); }
  int64_t vocab_size() const { return config_.vocab_size(); }
  // The longest sequence the model takes: config.max_sequence_length, or less where a layer
  // is bounded (a Linformer layer's E and F have linformer_max_len rows).
  int64_t max_sequence_length() const { return max_sequence_length_; }
  // A note for a response when a request of `length` tokens takes a layer past what it was
  // trained for (a Linformer layer with linformer_extend "interpolate": its E and F
  // interpolated), else empty.
  std::string LengthNote(int64_t length) const;
  // Whether every layer can stream (a session can continue from a state and step).
  bool can_stream() const { return can_stream_; }
  // Bytes of state one sequence holds after `position` tokens.
  int64_t StateBytesPerSequence(int64_t position) const;
  // Keys the decode step of the token at `position` reads, over all layers (Mixer::StepKeysRead).
  int64_t StepKeysRead(int64_t position) const;
  // Identifies config and weights; a serialized state carries it and is refused by another model.
  uint64_t fingerprint() const { return fingerprint_; }

  // A fresh state for `batch` sequences; FailedPrecondition when the model cannot stream.
  absl::StatusOr<ModelState> NewState(int64_t batch = 1) const;

  // [layer][tensor]: which tensors of this model's states are growing KV caches, those empty
  // along dim 2 in a fresh state, of which only the first `position` entries along dim 2 are
  // valid (kernels/standard/kv_cache.h); empty for a model that cannot stream.
  const std::vector<std::vector<bool>>& growing_caches() const { return growing_caches_; }
  // A deep copy of `state` (one of this model's) whose growing caches have a capacity of their
  // valid entries plus `reserve` (the room uninitialised, never read), shared segments copied in
  // too (a flat state): a KV cache that grew by
  // doubling keeps up to half its capacity spare, which a plain Clone copies and pages in, and a
  // copy about to take `reserve` tokens does not regrow (a copy of all of it) on the way. Other
  // tensors are cloned whole.
  ModelState CompactClone(const ModelState& state, int64_t reserve = 0) const;
  // Gives each growing cache of `state` room for `tokens` more entries past its valid ones, in
  // one new buffer where it has less (the valid entries copied; the state's other tensors and a
  // cache with room are left alone). The scheduler calls it before a prompt's first chunk with
  // the prompt's length: a cache that grew by doubling copied its prefix at every doubling, and
  // where a prefix-cache entry holds the old buffer, paged in fresh memory each time. An
  // allocation that fails is an Internal status (the state is then as it was, or with some
  // caches already given room: valid either way).
  absl::Status ReserveCaches(ModelState& state, int64_t tokens) const;
  // A state at `state`'s position that reads its KV caches' valid entries from `state`'s buffers
  // instead of copying them (their first `position` entries never change: kv_cache.h's
  // SharePrefix, as shared segments), each with own room for `reserve` tokens; the other tensors
  // are cloned. `state` is not modified and may go on appending. For a prefix-cache hit and a
  // fork: no 8 MB copy into fresh memory before the first computation (3-14 ms a hit on a
  // 4000-token prefix measured in the server; docs/benchmarks.md, issue
  // #24). Bytes() of the result counts the shared entries as its own. An allocation that
  // fails is an Internal status.
  absl::StatusOr<ModelState> CloneSharingPrefix(const ModelState& state, int64_t reserve) const;
  // A copy of `state` that shares its growing caches instead of copying them: their first
  // `position` entries never change (new tokens are written past `position`, in place or into a
  // new buffer: kernels/standard/kv_cache.h), so a state that is only read, and copied with
  // CompactClone before anything computes on it (a prefix-cache entry), can share them with the
  // live session that goes on appending. It keeps their whole buffers alive: Bytes() counts
  // them. Every other tensor is copied: cloned, or with `block`, into views of one block it
  // returns (a 1-D uint8 CPU tensor of at least the bytes asked for; each copy 64-byte aligned
  // in it), which the copies keep alive together: the prefix cache's entries take blocks faulted
  // in ahead (server/prefix_cache/prefaulted_blocks.h).
  using BlockSource = std::function<at::Tensor(int64_t bytes)>;
  ModelState CloneSharingCaches(const ModelState& state, const BlockSource& block = nullptr) const;

  // tokens: (B, L) int64 ids in [0, vocab_size), on the CPU; the result is on the CPU. With a
  // state, continues it (a chunk of a stream) and updates it; without, runs the whole sequence (the
  // only form a non-streaming model takes). A single token with a state takes the mixers' Step
  // path. Input errors are found before any state changes; after an internal error the state must
  // be discarded.
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& tokens, ModelState* state,
                                     OutputKind output) const;

  // One token for each of B sequences with separate states, decoded together (B sessions in
  // one batch of the scheduler): tokens[i] continues *states[i], each a batch-1 state of this
  // model, updated where it lives. Returns (B, vocab) last-token logits on the CPU. Each weight
  // matrix is read once for all B rows; row i equals Forward of tokens[i] on states[i] alone, to
  // float32 rounding. Input errors (a token outside the vocabulary, a state of another model or
  // at max_sequence_length) are found before any state changes.
  // parts > 1 (data-parallel decode): the rows are cut into `parts` contiguous slices, each run
  // as a StepBatch of its own on one of the kernels' threads (its kernels then single-threaded),
  // concurrently: no barrier inside the step, each weight matrix read once per part. Each row's
  // logits are the same bits as with parts = 1 (the kernels are row- and thread-count-invariant;
  // tested). Use it where a step's parallel regions cost more than re-reading the weights
  // (the scheduler's DecodeParts). parts is clamped to [1, B].
  absl::StatusOr<at::Tensor> StepBatch(const std::vector<int64_t>& tokens,
                                       const std::vector<ModelState*>& states, int parts = 1) const;
  // Bytes of weights one decode step reads: all but the embedding table (of which it reads B
  // rows), at their stored precision's bytes per element (int8's scales left out).
  int64_t DecodeWeightBytes() const { return decode_weight_bytes_; }

  // All weights under their checkpoint names, in checkpoint order (lm_head omitted when tied).
  // Only for a float32 model (WeightPrecision::kFloat32): the others keep their matrices only in
  // their own format (FailedPrecondition).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> NamedWeights() const;

  // The tokenizer and end-of-text ids (model_text.h); null for a model of token ids only.
  // Set once, when the model is loaded, before it is shared.
  const ModelText* text() const { return text_ ? &*text_ : nullptr; }
  void set_text(std::optional<ModelText> text) { text_ = std::move(text); }
  // Without text: why (MissingTokenizerReason), for the messages of text requests.
  const std::string& missing_text_reason() const { return missing_text_reason_; }
  void set_missing_text_reason(std::string reason) { missing_text_reason_ = std::move(reason); }

 private:
  // RMSNorm (no bias) or LayerNorm (with one); undefined weight: no norm.
  struct NormWeights {
    at::Tensor weight, bias;
    double epsilon = 0;  // norm_epsilon, or FinalNormEpsilon for the final norm
  };
  struct Layer {
    NormWeights norm;  // undefined for a mixer that owns its norms, or none
    std::unique_ptr<kernels::Mixer> mixer;
    bool mixes = true;  // false for "none": the norm and mixer are skipped
    // A second mixer reading the same normed input (Falcon-H1's attention beside Mamba-2), and
    // its state's slot in ModelState::layers; null / -1: none.
    std::unique_ptr<kernels::Mixer> parallel;
    int64_t parallel_slot = -1;
    NormWeights mlp_norm;
    kernels::GatedMlp mlp;                 // the dense MLP; undefined without one
    std::unique_ptr<kernels::MoeMlp> moe;  // instead, on a layer with experts
    // A layer using a shared block (shared_block.h): its use of the block (owned by
    // shared_uses_), its shared_linear and the index of its KV cache's slot in
    // ModelState::layers (after the layers' own); -1: none.
    const SharedBlock* shared = nullptr;
    kernels::LinearWeight shared_linear;
    int64_t shared_slot = -1;
  };
  Model() = default;
  absl::Status CheckTokens(const at::Tensor& tokens, const ModelState* state) const;
  at::Tensor Norm(const at::Tensor& x, const NormWeights& norm) const;
  // The embeddings of `ids` (any shape), times embedding_multiplier, normed when the config has
  // an embedding norm.
  at::Tensor Embed(const at::Tensor& ids) const;
  // A mixer's or MLP's output as it joins the residual stream: times residual_multiplier.
  at::Tensor Residual(at::Tensor output) const;
  // The CPU logits of normed hidden states: lm_head, divided by logits_divisor.
  at::Tensor Logits(const at::Tensor& normed) const;
  absl::StatusOr<at::Tensor> RunLayers(at::Tensor x, ModelState* state) const;
  // StepBatch's computation for rows [begin, end), inputs already checked: (end - begin, vocab);
  // a mixer's error is returned as it came (the rows' states then to be discarded).
  absl::StatusOr<at::Tensor> StepRows(const std::vector<int64_t>& tokens,
                                      const std::vector<ModelState*>& states, size_t begin,
                                      size_t end) const;
  // x + MLP(norm(x)) for a layer with an MLP, else x.
  at::Tensor AddMlp(const Layer& layer, const at::Tensor& x) const;

  std::string name_;
  v1::ModelConfig config_;
  at::Tensor embedding_;  // (vocab, hidden); undefined when embeddings_in_lm_head_
  bool embeddings_in_lm_head_ =
      false;  // tied, float32 or bfloat16 on the CPU: Embed reads lm_head_
  NormWeights embedding_norm_, norm_f_;
  kernels::LinearWeight lm_head_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<SharedBlock>> shared_uses_;  // Zamba's: a use per marked layer
  int64_t state_slots_ = 0;                    // ModelState::layers' size: the layers, their
                                               // shared-block KV slots, their parallel mixers'
  std::map<std::string, at::Tensor> weights_;  // as loaded, for NamedWeights; float32 only
  std::vector<std::vector<bool>> growing_caches_;
  bool can_stream_ = true;
  int64_t max_sequence_length_ = 0;
  double embedding_multiplier_ = 1, residual_multiplier_ = 1, logits_divisor_ = 1;  // Granite's
  uint64_t fingerprint_ = 0;
  int64_t decode_weight_bytes_ = 0;
  int64_t interpolates_past_ = 0;  // the shortest interpolating Linformer's max_len; 0: none
  std::optional<ModelText> text_;
  std::string missing_text_reason_ = "no tokenizer.json in its folder";
};

}  // namespace attnserve::model
