// The Mamba-1 mixer, from in_proj to out_proj, with Hugging Face MambaMixer's weights:
//   in_proj.weight (2·d_inner, d_model)          conv1d.weight (d_inner, 1, d_conv)
//   conv1d.bias (d_inner)                        x_proj.weight (dt_rank + 2·d_state, d_inner)
//   dt_proj.weight (d_inner, dt_rank)            dt_proj.bias (d_inner)
//   A_log (d_inner, d_state)                     D (d_inner)
//   out_proj.weight (d_model, d_inner)
// and with bcdt_norm_weights (Jamba): dt_layernorm.weight (dt_rank), b_layernorm.weight and
// c_layernorm.weight (d_state).
// With mamba_heads H > 1, Zamba's multi-head Mamba-1 (transformers' ZambaMambaMixer): the
// d_inner channels in H heads of P = d_inner / H, each a Mamba-1 of its own dt, B and C, with
// Zamba's weights: in_proj.weight (2·d_inner, d_model) interleaved (row 2i is x's channel i,
// row 2i + 1 the gate's), conv1d as above, x_proj_weight (H, dt_rank + 2·d_state, P),
// dt_proj_weight (H, P, dt_rank), dt_proj_bias (H, P), A_log (H, P, d_state), D (H, P),
// out_proj.weight. The CPU scans head by head; not on CUDA.
// State (MixerState.tensors): {conv_state (B, d_inner, d_conv), ssm_state (B, d_inner,
// d_state)}, fixed size, laid out as Hugging Face's MambaCache.
// Declared in kernels/common/mixer_registry.h: ExpectedMambaWeights, RandomMambaWeights,
// CreateMambaMixer.
#pragma once

#include "kernels/common/mixer_registry.h"
