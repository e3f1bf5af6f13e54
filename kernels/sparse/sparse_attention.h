// The `sparse` mixer: multi-head Sparse Transformer attention (Child et al. 2019),
// y = o_proj(softmax(QKᵀ/√d + the pattern's mask) V), with the standard mixer's projections
// (q_proj, k_proj, v_proj, o_proj, each (d_model, d_model)) and the tiled kernel of
// sparse_attention_cpu.h (O(L·(l + L/l)·d) work, O(L·d) memory).
//
// The pattern (MixerConfig::sparse_pattern, sparse_stride l, sparse_summary c), the same in
// every layer's heads (sparse_key_tiles.h):
//   strided: query i sees key j when |i - j| < l or (i - j) mod l = 0;
//   fixed:   when ⌊j/l⌋ = ⌊i/l⌋ or j mod l >= l - c.
// Every head attends to the union of the two factorised parts (the paper's "merged" heads,
// not one part per head): every head then reaches every earlier token within two layers'
// hops, heads stay interchangeable (one kernel call covers them all), and l >= L is standard
// attention exactly, whatever the number of heads.
//
// The projections, the cache, Prefill, Step and StepBatch are kernels/standard/
// kv_cache_mixer.h's (standard's); this mixer brings the pattern's prefill and decode.
// config.causal = true: causal (and j <= i), streams with a KV cache (kv_cache.h):
//   MixerState.tensors = {k_cache, v_cache}, each (B, H, capacity, d) float32, the first
//   `position` valid. StateBytesPerSequence(position) = 2·H·position·d·4 bytes, as standard's:
//   a step may read any key of the strided or summary columns later, so none is dropped. But a
//   step reads only the keys its pattern shows it (sparse_step_cpu.h): O(l + L/l) per token.
// config.causal = false: bidirectional (encoder use); only Prefill with a null state works.
// On CUDA tensors (a build with a CUDA LibTorch, head_dim 64 or 128): prefill runs the CUDA
// kernel of sparse_attention_cuda.h (the shared FlashAttention kernel with the pattern's tile
// walk), a decode step gathers the visible keys and runs standard's split-K decode kernel.
// Neither has run on a GPU yet (compiled only; tests/gpu/gpu_check.cc checks the prefill
// kernel where a GPU is). Other head sizes, or a build without CUDA kernels: the same ATen
// calls as on the CPU, untested on a GPU.
#pragma once

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"
