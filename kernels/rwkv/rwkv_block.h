// The `rwkv` mixer: a whole RWKV-4 block (Peng et al., 2023), as Hugging Face's RwkvBlock
// computes it, for one layer of a model:
//   xa = LayerNorm(x; ln1)                    xs = xa shifted one token (the state's first)
//   k, v, r = key(xs + μk(xa - xs)), value(…μv…), σ(receptance(…μr…))        (B, L, A)
//   h  = x + output(r ⊙ wkv(k, v))                     wkv: kernels/rwkv/wkv_cpu.h
//   xf = LayerNorm(h; ln2)                    xg = xf shifted one token
//   y  = h + σ(receptance_f(…μr_f…)) ⊙ value_f(relu(key_f(xg + μk_f(xf - xg)))²)
// and returns y - x: the model adds the block's outer residual, and applies no norm or MLP of
// its own around an rwkv layer (MixerOwnsNorms). The two LayerNorms and the channel mixing are
// inside the mixer because their token shifts are part of the layer's state. Both LayerNorms
// take config.norm_epsilon, which for a Hugging Face checkpoint with rescale_every is the
// layer's rescaled epsilon (RwkvLayerNormEpsilon, server/model/model_config.h).
//
// Weights, named as under Hugging Face's rwkv.blocks.N (H = d_model, A = rwkv_attention_dim,
// F = ffn_dim):
//   ln1.weight, ln1.bias, ln2.weight, ln2.bias (H)
//   attention.time_decay (A)  attention.time_first (A)
//   attention.time_mix_key, attention.time_mix_value, attention.time_mix_receptance (1, 1, H)
//   attention.key.weight, attention.value.weight, attention.receptance.weight (A, H)
//   attention.output.weight (H, A)
//   feed_forward.time_mix_key, feed_forward.time_mix_receptance (1, 1, H)
//   feed_forward.key.weight (F, H)  feed_forward.receptance.weight (H, H)
//   feed_forward.value.weight (H, F)
// State (MixerState.tensors), fixed size: {time-mixing shift (B, H): the last ln1 output;
// WKV (B, 3, A): numerator a, denominator b, running maximum p (wkv_cpu.h); channel-mixing
// shift (B, H): the last ln2 output}. A fresh state is zeros with p = -1e38.
// On CUDA (a build whose LibTorch has CUDA): the same block with the WKV CUDA kernel
// (wkv_cuda.h, checked by tests/gpu/run.sh); StepBatch stacks the states into one batch.
// Declared in kernels/common/mixer_registry.h: ExpectedRwkvWeights, RandomRwkvWeights,
// CreateRwkvMixer.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/common/mixer_registry.h"

namespace attnserve::kernels {

// The WKV kernel (wkv_cpu.h) on tensors: k, v (B, L, A) float32 CPU, last dimension
// contiguous; decay = -exp(time_decay) and first = time_first (A) contiguous; `state`
// (B, 3, A) contiguous, or, when it is null, one (3, A) state per row (`row_states`), continued
// in place. Returns wkv (B, L, A). No checks: the mixer's callers have made them.
at::Tensor WkvCpu(const at::Tensor& k, const at::Tensor& v, const at::Tensor& decay,
                  const at::Tensor& first, float* state, float* const* row_states = nullptr);

}  // namespace attnserve::kernels
