// The one interface every sequence mixer implements (standard, linformer, linear, mamba,
// sliding_window, performer, rwkv, sparse, mamba2, and none: a layer with only an MLP).
//
// Contract (held by tests/unit/mixer_contract_test.cc for every streaming mixer):
//   * Prefill(x, state): x is (B, L, d_model) float32 on the CPU. With a state, it continues
//     from it and leaves the state after the last token in it (state_in -> state_out).
//   * Step(x_t, state): x_t is (B, d_model); one token, same result as Prefill with L = 1.
//   * Feeding a sequence in chunks of any sizes gives the whole-sequence output (to float32
//     rounding), and L calls of Step equal one Prefill.
// Errors come back as absl::Status with what was expected and what came; no exception
// escapes. A Mixer is immutable after creation and safe to call from many threads at once
// with distinct states. A MixerState is owned by its caller and used by one thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/linear.h"
#include "kernels/common/rotary_positions.h"

namespace attnserve::kernels {

enum class MixerKind {
  kStandard,
  kLinformer,
  kLinear,
  kMamba,
  kSlidingWindow,
  kPerformer,
  kRwkv,
  kSparse,
  kMamba2,
  kShortConv,  // LFM2's gated short convolution (kernels/short_conv/)
  kNone        // no mixing: y = 0 (kernels/common/no_mixer.h); a model skips such a layer's mixer
};

// "standard", "linformer", "linear", "mamba", "sliding_window", "performer", "rwkv", "sparse",
// "mamba2", "short_conv", "none".
const char* MixerKindName(MixerKind kind);
absl::StatusOr<MixerKind> ParseMixerKind(const std::string& name);

// Whether the mixer is a whole block with its own norms and feed-forward (rwkv: its LayerNorms
// and channel mixing carry token-shift state): a model applies no norm or MLP of its own
// around such a layer, only the outer residual (y = x + mixer(x)).
bool MixerOwnsNorms(MixerKind kind);

struct MixerConfig {
  MixerKind kind = MixerKind::kStandard;
  int64_t d_model = 256;
  // standard, linformer, linear, sliding_window, performer, sparse: d_model = num_heads *
  // head_dim.
  int64_t num_heads = 8;
  // sliding_window: the tokens each query attends to, its own included (W >= 1).
  int64_t window = 1024;
  // sliding_window: the first `sinks` tokens, which every later query attends to as well
  // (attention sinks; 0: none).
  int64_t sinks = 0;
  // sparse (Sparse Transformer attention): the pattern, "strided" or "fixed"; the stride l
  // (the local band or block, and the step of the strided part) and, fixed only, the summary
  // columns c (1 <= c <= l) of each block (kernels/sparse/sparse_key_tiles.h).
  std::string sparse_pattern = "strided";
  int64_t sparse_stride = 128;
  int64_t sparse_summary = 8;
  // performer: the seed its random features are drawn from (part of the model).
  uint64_t performer_seed = 0;
  // standard, linear, sparse: causal (can stream) or bidirectional. Linformer is never causal.
  bool causal = true;
  // linformer: projected length k and the longest input (E, F are (max_len, k)).
  int64_t linformer_k = 64;
  int64_t max_len = 4096;
  // linformer: an input longer than max_len gets E and F interpolated to its length (else it
  // is refused). kernels/linformer/linformer_attention.h.
  bool linformer_interpolate = false;
  // mamba (Mamba-1): d_inner = expand * d_model; dt_rank 0 means ceil(d_model / 16).
  int64_t d_state = 16;
  // mamba: > 0: RMSNorms without weights of dt, B and C right after x_proj, with this epsilon
  // (Falcon-Mamba's mixer_rms_eps; 0: none, Mamba's).
  double bcdt_rms_epsilon = 0;
  // mamba, with bcdt_rms_epsilon > 0: the norms have weights (Jamba's dt_layernorm.weight
  // (dt_rank), b_layernorm.weight and c_layernorm.weight (d_state)); false: none (Falcon-Mamba).
  bool bcdt_norm_weights = false;
  // mamba: > 1: Zamba's multi-head Mamba-1 (mamba_mixer.h): the d_inner channels in this many
  // heads, each with its own x_proj (so its own dt, B and C), dt_proj, A and D; Zamba's layout.
  int64_t mamba_heads = 1;
  int64_t d_conv = 4;
  int64_t expand = 2;
  int64_t dt_rank = 0;
  // mamba2 (Mamba-2, SSD; kernels/mamba2/): d_inner = expand · d_model in ssm_heads heads of
  // ssm_head_dim() = d_inner / ssm_heads; B and C in ssm_groups groups (each shared by
  // ssm_heads / ssm_groups heads); a sequence scanned in chunks of ssm_chunk_size tokens (the
  // result does not depend on it but for rounding); dt clamped to [dt_min, dt_max]
  // (time_step_limit); the gated norm's epsilon is norm_epsilon. d_state and d_conv as mamba's.
  int64_t ssm_heads = 0;
  int64_t ssm_groups = 1;
  int64_t ssm_chunk_size = 256;
  double dt_min = 0.0;
  double dt_max = std::numeric_limits<double>::infinity();
  // short_conv: biases on in_proj, the conv and out_proj (its width is d_conv).
  bool conv_bias = false;
  // mamba2: d_inner when it is not expand · d_model (Falcon-H1's mamba_d_ssm, Nemotron-H's
  // heads · head_dim); 0: expand · d_model.
  int64_t inner_dim = 0;
  // mamba2: how the scan's y meets the gate z (kernels/mamba2/gated_rms_norm_cpu.h).
  enum class SsmNorm { kGateThenNorm, kNormThenGate, kGateOnly };
  SsmNorm ssm_norm = SsmNorm::kGateThenNorm;
  // rwkv (RWKV-4 block): channel-mixing width (0: 4 * d_model), the width of k, v, r and the
  // WKV state (0: d_model), and its LayerNorms' epsilon.
  int64_t ffn_dim = 0;
  int64_t rwkv_attention_dim = 0;
  double norm_epsilon = 1e-5;
  // How each weight matrix is kept for the few-row products (kernels/common/linear.h):
  // kBfloat16 when the weights are bfloat16-exact (rounded at load): kept as bfloat16 panels;
  // kInt8, int8 with a scale per block of 32 (linear.h). A serving option, not part of the model.
  WeightFormat weight_format = WeightFormat::kFloat32;
  // standard: the KV cache's element type, at::kFloat or at::kBFloat16 (keys and values rounded
  // to bfloat16 as they are written, half the bytes a token; CPU only). A serving option, not
  // part of the model; the other KV-cache mixers keep float32.
  at::ScalarType kv_cache_dtype = at::kFloat;

  // standard only, as trained transformers have them (Hugging Face's names):
  // key/value heads (num_key_value_heads; grouped-query attention, num_heads a multiple of it;
  // 1: multi-query; 0: num_heads), a head's width (head_dim; 0: d_model / num_heads, else q_proj
  // is (num_heads * head_dim, d_model)), biases of q/k/v (Qwen2's; Llama's attention_bias sets
  // both) and of o_proj, rotary positions (rope, none by default: NoPE) and a window (each query
  // attends to its `attention_window` latest positions, its own included; 0: all, Mistral's
  // sliding_window).
  int64_t num_kv_heads = 0;
  int64_t attention_head_dim = 0;
  // standard: RMSNorms of each head's q and k (q_norm.weight, k_norm.weight: head_dim; epsilon
  // norm_epsilon) before the rotary positions (LFM2's).
  bool qk_norm = false;
  bool qkv_bias = false;
  bool o_bias = false;
  RotaryConfig rope;
  int64_t attention_window = 0;
  // standard: the scores' scale, softmax(scale · q·k); 0: head_dim^-1/2. Folded into q_proj's
  // rows (and bias) at load: every kernel keeps its head_dim^-1/2 (Zamba's (head_dim / 2)^-1/2,
  // Granite's attention_multiplier).
  double attention_scale = 0;
  // standard: o_proj's output width (0: d_model): an attention reading a wider input than it
  // writes (Zamba's shared block reads concat(hidden, embeddings), 2·hidden, and writes hidden).
  int64_t out_dim = 0;

  int64_t head_dim() const {
    return attention_head_dim > 0 ? attention_head_dim : d_model / num_heads;
  }
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t output_dim() const { return out_dim > 0 ? out_dim : d_model; }
  int64_t d_inner() const { return inner_dim > 0 ? inner_dim : expand * d_model; }
  int64_t ssm_head_dim() const { return ssm_heads > 0 ? d_inner() / ssm_heads : 0; }
  int64_t resolved_dt_rank() const { return dt_rank > 0 ? dt_rank : (d_model + 15) / 16; }
  int64_t resolved_ffn_dim() const { return ffn_dim > 0 ? ffn_dim : 4 * d_model; }
  int64_t resolved_rwkv_attention_dim() const {
    return rwkv_attention_dim > 0 ? rwkv_attention_dim : d_model;
  }
};

// Checks sizes and their consistency; the message names the field and the allowed values.
absl::Status ValidateMixerConfig(const MixerConfig& config);

// Weights of one mixer: float32 CPU tensors named as in Hugging Face checkpoints, e.g.
// "q_proj.weight" or, for mamba, "in_proj.weight", "conv1d.weight", "A_log", ...
using WeightMap = std::map<std::string, at::Tensor>;

struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// The tensors a mixer with this config needs, with their shapes (for loaders to validate).
std::vector<WeightSpec> ExpectedWeights(const MixerConfig& config);

// Weights drawn from a fixed seed with the usual initialisations (the same seed gives the
// same weights on every machine).
WeightMap RandomWeights(const MixerConfig& config, uint64_t seed);

// A read-only run of a KV cache's positions that states share (kernels/standard/kv_cache.h):
// k and v (B, H, >= length, d) hold `length` consecutive positions at indices [0, length).
// Nothing writes them while any state holds them.
struct KvSegment {
  at::Tensor k, v;
  int64_t length = 0;
};

// Recurrent state of one mixer for a batch of sequences. Each mixer documents its tensors
// (KV cache, S and z, conv_state and ssm_state). Tensors are owned by the state.
struct MixerState {
  std::vector<at::Tensor> tensors;
  int64_t position = 0;  // tokens consumed so far
  // KV caches only: the cache's first positions, in order, held in buffers shared with other
  // states (a prefix-cache hit's or a fork's prefix: kv_cache.h); `tensors` then hold the
  // positions from SharedLength() on. Empty for every other state.
  std::vector<KvSegment> shared;

  int64_t SharedLength() const;
  // The tensors' bytes, and the shared segments' buffers, whole (counted in every state that
  // holds them: an upper bound on what the state keeps alive).
  int64_t Bytes() const;
  // A deep copy of the tensors; the shared segments, read-only, stay shared.
  MixerState Clone() const;
};

class Mixer {
 public:
  virtual ~Mixer() = default;

  virtual const MixerConfig& config() const = 0;
  // True when the mixer is causal and so can continue from a state and step.
  virtual bool can_stream() const = 0;

  // A fresh state for `batch` sequences. FailedPrecondition when the mixer cannot stream.
  virtual absl::StatusOr<MixerState> InitialState(int64_t batch) const = 0;

  // y (B, L, d_model) for x (B, L, d_model). `state` may be null (a whole sequence, the only
  // form a non-streaming mixer accepts); otherwise it is continued and updated.
  virtual absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const = 0;

  // y_t (B, d_model) for one token x_t (B, d_model); `state` is updated.
  virtual absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const = 0;

  // One token for each of B separate sequences decoded together (B sessions in one batch):
  // x_t (B, d_model); states[i] is row i's own state of batch 1, continued in place where it
  // lives (no gather into a batch tensor). Row i's result equals Step on that row alone, to
  // float32 rounding, whatever the other rows; the weights are read once for all B rows. Every
  // state is checked before any changes. The default gathers stacking states into one batch
  // (StepBatchByGather) or else runs Step row by row; the streaming mixers override it on the
  // CPU.
  virtual absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                               const std::vector<MixerState*>& states) const;

  // Whether Step computes with the state's position (a KV cache's length) rather than only its
  // tensors. Recurrent mixers return false: states at different positions stack into a batch.
  virtual bool StepReadsPosition() const { return true; }

  // Bytes of state that one sequence holds after `position` tokens (a KV cache grows, a
  // recurrent state does not; 0 for a mixer that cannot stream).
  virtual int64_t StateBytesPerSequence(int64_t position) const = 0;

  // Keys (per head) that the decode step of the token at `position` reads: a step's cost that
  // grows with the context (standard: all position + 1; sliding_window: the window and sinks;
  // sparse: the pattern's). 0 for a fixed-size recurrent state, whose step reads no keys.
  virtual int64_t StepKeysRead(int64_t /*position*/) const { return 0; }
};

// StepBatch's shared argument check: x_t (B, d_model) and B non-null states.
absl::Status CheckStepBatch(const at::Tensor& x_t, const std::vector<MixerState*>& states,
                            int64_t d_model, at::Device device);

// Whether every state holds tensors of one shape with a leading batch of 1 (and, with
// equal_positions, one position), so that B of them stack into one batch state: recurrent
// states (mamba's, linear's) always; KV caches only of one capacity and length, with no shared
// segments.
bool StatesStack(const std::vector<MixerState*>& states, bool equal_positions);

// StepBatch by gathering stacking states into one batch state, one Step of B rows (one launch
// of the device's step kernels), and copying each row back into its own state. The default
// StepBatch takes it where the states stack (CUDA states; on the CPU the mixers' own StepBatch
// updates the states in place instead); states that do not stack (KV caches of different
// lengths) go row by row.
absl::StatusOr<at::Tensor> StepBatchByGather(const Mixer& mixer, const at::Tensor& x_t,
                                             const std::vector<MixerState*>& states);

// Builds the mixer named by config.kind from its weights. Every expected tensor must be
// present with its shape and float32, all on one device (the CPU, or the CUDA device a model
// moved them to); a missing, extra, misshapen or misplaced one is an error that names the
// tensor and both shapes.
absl::StatusOr<std::unique_ptr<Mixer>> CreateMixer(const MixerConfig& config, WeightMap weights);

}  // namespace attnserve::kernels
