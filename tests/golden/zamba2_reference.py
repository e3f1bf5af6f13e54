#!/usr/bin/env python3
"""A float64 reference of Zamba2ForCausalLM, and tiny random Zamba2 folders for the golden tests.

transformers 4.47.1 (tests/golden/hf/make.sh's reference) has no Zamba2, so this file is a port of
transformers' src/transformers/models/zamba2/modeling_zamba2.py at commit
00511f5df3b63c48b31496072ec35d6ff3ffa6c6, function by function (each function names the one it
follows), in float64 throughout (upstream upcasts norms, A and RoPE to float32; here every step is
float64). Rotary positions span attention_head_dim = 2 * hidden / heads, as transformers v4.48's
Zamba2RotaryEmbedding passed dim=config.attention_head_dim and vLLM's zamba2.py does.

Where upstream's two paths disagree, this follows cuda_kernels_forward (mamba_ssm's kernels, what
the models were trained and are served with, vLLM too), not the pure-torch torch_forward:
- torch_forward's inter-chunk recurrence sums decay_chunk over the wrong axis (`.sum(dim=2)` over
  the target chunk instead of the source chunk, where Mamba2's and Bamba's files transpose first
  and sum dim 1): a prompt longer than chunk_size gets wrong states. `ssd_chunked(...,
  literal_torch_forward=True)` runs that form; the script prints how far it lands from the
  token-by-token recurrence (reference.json keeps the figure).
- torch_forward clamps dt at time_step_min (0.001) in prefill and decode; the kernels clamp at
  time_step_limit (default none). Here dt = softplus(dt + dt_bias), clamped to time_step_limit
  where the config has one.

    /usr/bin/python3 tests/golden/zamba2_reference.py --out DIR --case NAME

writes DIR/config.json (Zamba2Config's keys), DIR/model.safetensors (float32, Hugging Face's
tensor names: the shared blocks under the hybrid layers that hold them), and the references
hf_golden_test.py reads: reference.json (the seeded prompt `tokens`, `greedy_tokens` from cached
greedy steps), logits_all.npy [T, V] and greedy_step_logits.npy. Before writing, it checks the
port against itself: the chunked SSD scan against a token-by-token recurrence, and the cached
steps against the whole-sequence forward.
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

# How far torch_forward's literal inter-chunk step lands from the recurrence, per Mamba layer of
# the prompt's forward (relative to max |y|).
LITERAL_ERRORS = []

# The cases tests/golden/hf/make.sh writes. Each has the Zamba2 features on: adapters, several
# hybrid layers per block, a multi-chunk scan, one head of a very small dt.
CASES = {
    # One shared block, rotary positions, attention adapters, tied embeddings.
    "zamba2": dict(num_mem_blocks=1, use_mem_rope=True, use_shared_attention_adapter=True,
                   mamba_ngroups=1, tie_word_embeddings=True,
                   layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "mamba", "hybrid",
                                      "mamba"]),
    # Two blocks used in turn (hybrid layers 0 and 2 run block 0, 1 and 3 block 1), two groups,
    # untied, and every tied tensor saved under every hybrid layer that uses it.
    "zamba2_blocks2_groups2": dict(num_mem_blocks=2, use_mem_rope=True,
                                   use_shared_attention_adapter=True, mamba_ngroups=2,
                                   tie_word_embeddings=False, save_every_copy=True,
                                   layers_block_type=["hybrid", "mamba", "hybrid", "mamba",
                                                      "hybrid", "hybrid", "mamba"]),
    # No positions and no attention adapters (the MLP's stay: Zamba2MLP always has them), grouped
    # key/value heads.
    "zamba2_nope_gqa": dict(num_mem_blocks=1, use_mem_rope=False,
                            use_shared_attention_adapter=False, num_key_value_heads=2,
                            mamba_ngroups=1, tie_word_embeddings=True,
                            layers_block_type=["mamba", "hybrid", "mamba", "mamba", "hybrid"]),
}

BASE = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_attention_heads=4,
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, n_mamba_heads=4, chunk_size=8,
            adapter_rank=6, rope_theta=10000.0, rms_norm_eps=1e-5, time_step_min=0.001,
            hidden_act="gelu", max_position_embeddings=4096)


class Config:
    """Zamba2Config (configuration_zamba2.py at commit 8adb89369451236ed02d3fb43f3c17f3e9d94aae):
    the derived fields."""

    def __init__(self, d):
        self.__dict__.update(d)
        self.num_hidden_layers = len(self.layers_block_type)
        self.attention_hidden_size = 2 * self.hidden_size
        self.attention_head_dim = 2 * self.hidden_size // self.num_attention_heads
        self.mamba_headdim = self.mamba_expand * self.hidden_size // self.n_mamba_heads
        self.num_key_value_heads = d.get("num_key_value_heads", self.num_attention_heads)
        self.hybrid_layer_ids = [i for i, t in enumerate(self.layers_block_type) if t == "hybrid"]


def rms_norm(x, weight, eps):
    """Zamba2RMSNorm.forward."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rms_norm_gated(x, gate, weight, group_size, eps=1e-5):
    """Zamba2RMSNormGated.forward (eps 1e-5, as Zamba2MambaMixer builds it)."""
    x = x * F.silu(gate)
    *prefix, last = x.shape
    g = x.view(*prefix, last // group_size, group_size)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return weight * g.view(*prefix, last)


def rotary(cfg, positions):
    """Zamba2RotaryEmbedding.forward (dim = attention_head_dim): cos, sin (L, head_dim)."""
    dim = cfg.attention_head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2).double() / dim))
    freqs = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    """rotate_half."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def attention(cfg, w, block, j, h, positions, cache):
    """Zamba2Attention.forward (eager_attention_forward, repeat_kv) for hybrid layer j on block
    `block`: h (L, 2·hidden); cache a dict holding this layer's keys and values."""
    p = f"blocks.{block}.self_attn."
    q = h @ w[p + "q_proj.weight"].T
    k = h @ w[p + "k_proj.weight"].T
    v = h @ w[p + "v_proj.weight"].T
    if cfg.use_shared_attention_adapter:
        for name, t in (("q", q), ("k", k), ("v", v)):
            a = f"{p}linear_{name}_adapter_list.{j}."
            t += (h @ w[a + "0.weight"].T) @ w[a + "1.weight"].T
    hd = cfg.attention_head_dim
    q = q.view(-1, cfg.num_attention_heads, hd).transpose(0, 1)
    k = k.view(-1, cfg.num_key_value_heads, hd).transpose(0, 1)
    v = v.view(-1, cfg.num_key_value_heads, hd).transpose(0, 1)
    if cfg.use_mem_rope:
        cos, sin = rotary(cfg, positions)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
    if "k" in cache:
        k = torch.cat([cache["k"], k], dim=1)
        v = torch.cat([cache["v"], v], dim=1)
    cache["k"], cache["v"] = k, v
    rep = cfg.num_attention_heads // cfg.num_key_value_heads
    k = k.repeat_interleave(rep, dim=0)
    v = v.repeat_interleave(rep, dim=0)
    scores = q @ k.transpose(1, 2) * (hd / 2) ** -0.5
    n_q, n_k = q.shape[1], k.shape[1]
    mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
    scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.transpose(0, 1).reshape(-1, cfg.num_attention_heads * hd)
    return out @ w[p + "o_proj.weight"].T


def mlp(cfg, w, block, j, h):
    """Zamba2MLP.forward: gate_up_proj plus hybrid layer j's adapter, chunk(2), act(gate) * up."""
    p = f"blocks.{block}.feed_forward."
    a = f"{p}gate_up_proj_adapter_list.{j}."
    gu = h @ w[p + "gate_up_proj.weight"].T + (h @ w[a + "0.weight"].T) @ w[a + "1.weight"].T
    gate, up = gu.chunk(2, dim=-1)
    act = {"gelu": F.gelu, "gelu_pytorch_tanh": lambda t: F.gelu(t, approximate="tanh"),
           "silu": F.silu}[cfg.hidden_act]
    return (act(gate) * up) @ w[p + "down_proj.weight"].T


def shared_transformer(cfg, w, j, hidden, original, positions, cache):
    """Zamba2AttentionDecoderLayer.forward for the j-th hybrid layer (block j % num_mem_blocks,
    Zamba2Model.get_layers' cycle)."""
    block = j % cfg.num_mem_blocks
    p = f"blocks.{block}."
    h = rms_norm(torch.cat([hidden, original], dim=-1), w[p + "input_layernorm.weight"],
                 cfg.rms_norm_eps)
    h = attention(cfg, w, block, j, h, positions, cache)
    h = rms_norm(h, w[p + "pre_ff_layernorm.weight"], cfg.rms_norm_eps)
    return mlp(cfg, w, block, j, h)


def segment_sum(x):
    """segment_sum."""
    n = x.size(-1)
    x = x[..., None].expand(*x.size(), n)
    x = x.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1), 0)
    s = torch.cumsum(x, dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=0), -torch.inf)


def ssd_chunked(cfg, x, dt, A, B, C, D, literal_torch_forward=False):
    """Zamba2MambaMixer.torch_forward's "ssd naive" branch, batch 1 and no previous state:
    x (L, H, P), dt (L, H) after softplus and clamp, B, C (L, H, N) repeated to the heads.
    Returns y (L, H, P) and the final state (H, P, N). The inter-chunk step sums over the source
    chunk (Mamba2's form); literal_torch_forward: over the target chunk, as torch_forward does."""
    L, cs = x.shape[0], cfg.chunk_size
    pad = (cs - L % cs) % cs
    padded = lambda t: F.pad(t, (0, 0) * (t.dim() - 1) + (0, pad))

    def chunks(t):
        t = padded(t)
        return t.reshape(-1, cs, *t.shape[1:])
    D_residual = D[:, None] * padded(x)
    x = x * dt[..., None]
    A = A * dt
    x, A, B, C = chunks(x), chunks(A), chunks(B), chunks(C)  # (c, l, H, ...)
    A = A.permute(2, 0, 1)  # (H, c, l)
    A_cumsum = torch.cumsum(A, dim=-1)
    Lmat = torch.exp(segment_sum(A))  # (H, c, l, s)
    G = (C[:, :, None, :, :] * B[:, None, :, :, :]).sum(-1)  # (c, l, s, H)
    M = G * Lmat.permute(1, 2, 3, 0)
    Y_diag = (M[..., None] * x[:, None]).sum(2)  # (c, l, H, P)
    decay_states = torch.exp(A_cumsum[:, :, -1:] - A_cumsum)  # (H, c, l)
    B_decay = B * decay_states.permute(1, 2, 0)[..., None]  # (c, l, H, N)
    states = (B_decay.permute(0, 2, 1, 3)[..., None] *
              x.permute(0, 2, 1, 3)[..., None, :]).sum(dim=2).permute(0, 1, 3, 2)  # (c, H, P, N)
    states = torch.cat([torch.zeros_like(states[:1]), states], dim=0)
    decay_chunk = torch.exp(segment_sum(F.pad(A_cumsum[:, :, -1], (1, 0))))  # (H, c+1, c+1)
    # new_states[z] = sum over c <= z of decay_chunk[z, c] * states[c]
    new_states = (decay_chunk.permute(1, 2, 0)[..., None, None] * states[None]).sum(dim=1)
    if literal_torch_forward:  # torch_forward: (decay_chunk[..., None, None] * states[:, :, None]
        # permuted to (b, h, 1, c, p, n)).sum(dim=2), over z
        new_states = (decay_chunk.permute(1, 2, 0)[..., None, None] * states[None]).sum(dim=0)
    states, final = new_states[:-1], new_states[-1]
    state_decay_out = torch.exp(A_cumsum)  # (H, c, l)
    Y_off = (C[:, :, :, None, :] * states[:, None]).sum(-1) * \
        state_decay_out.permute(1, 2, 0)[..., None]
    y = (Y_diag + Y_off).reshape(-1, *Y_diag.shape[2:]) + D_residual
    return y[:L], final


def ssd_recurrent(x, dt, A, B, C, D):
    """The same scan token by token (the port's own check)."""
    H, P = x.shape[1], x.shape[2]
    state = torch.zeros(H, P, B.shape[-1])
    ys = []
    for t in range(x.shape[0]):
        state = state * torch.exp(dt[t] * A)[:, None, None] + \
            (dt[t][:, None, None] * x[t][:, :, None] * B[t][:, None, :])
        ys.append((state * C[t][:, None, :]).sum(-1) + D[:, None] * x[t])
    return torch.stack(ys), state


def mamba_mixer(cfg, w, layer, h, cache, check=False):
    """Zamba2MambaMixer.torch_forward: the whole-sequence branch when `cache` is empty (saving
    conv_states and ssm_states), the cached decode branch for one token otherwise."""
    p = f"layers.{layer}.mamba."
    d_inner = cfg.mamba_expand * cfg.hidden_size
    H, P, N, G = cfg.n_mamba_heads, cfg.mamba_headdim, cfg.mamba_d_state, cfg.mamba_ngroups
    conv_dim = d_inner + 2 * G * N
    proj = h @ w[p + "in_proj.weight"].T
    gate, xBC, dt = proj.split([d_inner, conv_dim, H], dim=-1)
    conv_w, conv_b = w[p + "conv1d.weight"][:, 0, :], w[p + "conv1d.bias"]
    K = cfg.mamba_d_conv
    A = -torch.exp(w[p + "A_log"])
    D = w[p + "D"]
    dt = F.softplus(dt + w[p + "dt_bias"])
    if getattr(cfg, "time_step_limit", None):
        dt = torch.clamp(dt, *cfg.time_step_limit)
    if "conv" not in cache:  # prefill
        cache["conv"] = F.pad(xBC.T, (K - xBC.shape[0], 0))[:, -K:] if xBC.shape[0] < K else \
            xBC.T[:, -K:]
        xBC = F.silu(F.conv1d(xBC.T[None], w[p + "conv1d.weight"], conv_b, padding=K - 1,
                              groups=conv_dim)[0, :, :xBC.shape[0]].T)
        x, B, C = xBC.split([d_inner, G * N, G * N], dim=-1)
        x = x.reshape(-1, H, P)
        B = B.reshape(-1, G, N).repeat_interleave(H // G, dim=1)
        C = C.reshape(-1, G, N).repeat_interleave(H // G, dim=1)
        y, state = ssd_chunked(cfg, x, dt, A, B, C, D)
        if check:
            y2, state2 = ssd_recurrent(x, dt, A, B, C, D)
            assert torch.allclose(y, y2, rtol=1e-9, atol=1e-9), (y - y2).abs().max()
            assert torch.allclose(state, state2, rtol=1e-9, atol=1e-9)
            y3, _ = ssd_chunked(cfg, x, dt, A, B, C, D, literal_torch_forward=True)
            LITERAL_ERRORS.append(float((y3 - y2).abs().max() / y2.abs().max()))
        cache["ssm"] = state
    else:  # one token: roll the conv state, then the state update
        conv = torch.roll(cache["conv"], shifts=-1, dims=-1)
        conv[:, -1] = xBC[0]
        cache["conv"] = conv
        xBC = F.silu((conv * conv_w).sum(-1) + conv_b)[None]
        x, B, C = xBC.split([d_inner, G * N, G * N], dim=-1)
        x = x.reshape(H, P)
        B = B.reshape(G, N).repeat_interleave(H // G, dim=0)
        C = C.reshape(G, N).repeat_interleave(H // G, dim=0)
        dA = torch.exp(dt[0][:, None, None] * A[:, None, None])
        cache["ssm"] = cache["ssm"] * dA + dt[0][:, None, None] * B[:, None, :] * x[:, :, None]
        y = ((cache["ssm"] * C[:, None, :]).sum(-1) + D[:, None] * x)[None]
    y = y.reshape(y.shape[0], -1)
    y = rms_norm_gated(y, gate, w[p + "norm.weight"], d_inner // G)
    return y @ w[p + "out_proj.weight"].T


def forward(cfg, w, tokens, caches, start, check=False):
    """Zamba2Model.forward + Zamba2ForCausalLM's lm_head for `tokens` at positions start..;
    caches: one dict per layer (mamba) and per hybrid layer (attention), filled as it goes."""
    hidden = w["embed_tokens.weight"][torch.tensor(tokens)]
    original = hidden.clone()
    positions = torch.arange(start, start + len(tokens))
    for layer, kind in enumerate(cfg.layers_block_type):
        residual = hidden
        h = hidden
        if kind == "hybrid":  # Zamba2HybridLayer.forward
            j = cfg.hybrid_layer_ids.index(layer)
            t = shared_transformer(cfg, w, j, hidden, original, positions, caches[("attn", layer)])
            h = h + t @ w[f"layers.{layer}.linear.weight"].T
        # Zamba2MambaDecoderLayer.forward
        h = rms_norm(h, w[f"layers.{layer}.input_layernorm.weight"], cfg.rms_norm_eps)
        hidden = residual + mamba_mixer(cfg, w, layer, h, caches[("mamba", layer)], check)
    hidden = rms_norm(hidden, w["final_layernorm.weight"], cfg.rms_norm_eps)
    head = w["embed_tokens.weight"] if cfg.tie_word_embeddings else w["lm_head.weight"]
    return hidden @ head.T


def new_caches(cfg):
    return {(kind, i): {} for i in range(cfg.num_hidden_layers) for kind in ("mamba", "attn")}


def random_weights(cfg, gen, dtype=torch.float64):
    """Weights in the module tree's own names (blocks.{b}. for the shared blocks), float32
    values (held as `dtype`): each (out, in) matrix N(0, 1/in), norms 1 + N(0, 0.1), Mamba-2's dt_bias the inverse
    softplus of dt log-uniform in [1e-3, 1e-1], head 0's far below (dt ~ 1e-4: torch_forward
    would clamp it at time_step_min)."""
    def normal(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen) * std).float().to(dtype)

    def linear(out, inp):
        return normal(out, inp, std=inp ** -0.5)

    def norm(n):
        return (1 + normal(n, std=0.1))
    hs, I, r = cfg.hidden_size, cfg.intermediate_size, cfg.adapter_rank
    ahs, hd = cfg.attention_hidden_size, cfg.attention_head_dim
    d_inner = cfg.mamba_expand * hs
    H, N, G, K = cfg.n_mamba_heads, cfg.mamba_d_state, cfg.mamba_ngroups, cfg.mamba_d_conv
    conv_dim = d_inner + 2 * G * N
    w = {"embed_tokens.weight": normal(cfg.vocab_size, hs),
         "final_layernorm.weight": norm(hs)}
    if not cfg.tie_word_embeddings:
        w["lm_head.weight"] = linear(cfg.vocab_size, hs)
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}.mamba."
        w[f"layers.{i}.input_layernorm.weight"] = norm(hs)
        w[p + "in_proj.weight"] = linear(d_inner + conv_dim + H, hs)
        w[p + "conv1d.weight"] = normal(conv_dim, 1, K, std=K ** -0.5)
        w[p + "conv1d.bias"] = normal(conv_dim, std=0.1)
        dt = torch.exp(torch.rand(H, generator=gen) * (math.log(0.1) - math.log(1e-3)) +
                       math.log(1e-3))
        dt_bias = dt + torch.log(-torch.expm1(-dt))
        dt_bias[0] = -9.0
        w[p + "dt_bias"] = dt_bias.float().to(dtype)
        w[p + "A_log"] = torch.log(torch.arange(1, H + 1).double()).float().to(dtype)
        w[p + "D"] = norm(H)
        w[p + "norm.weight"] = norm(d_inner)
        w[p + "out_proj.weight"] = linear(hs, d_inner)
        if cfg.layers_block_type[i] == "hybrid":
            w[f"layers.{i}.linear.weight"] = linear(hs, hs)
    hybrid = len(cfg.hybrid_layer_ids)
    for b in range(cfg.num_mem_blocks):
        p = f"blocks.{b}."
        w[p + "input_layernorm.weight"] = norm(ahs)
        w[p + "pre_ff_layernorm.weight"] = norm(hs)
        w[p + "self_attn.q_proj.weight"] = linear(cfg.num_attention_heads * hd, ahs)
        w[p + "self_attn.k_proj.weight"] = linear(cfg.num_key_value_heads * hd, ahs)
        w[p + "self_attn.v_proj.weight"] = linear(cfg.num_key_value_heads * hd, ahs)
        w[p + "self_attn.o_proj.weight"] = linear(hs, cfg.num_attention_heads * hd)
        w[p + "feed_forward.gate_up_proj.weight"] = linear(2 * I, hs)
        w[p + "feed_forward.down_proj.weight"] = linear(hs, I)
        for j in range(hybrid):
            if j % cfg.num_mem_blocks != b:  # nn.Identity there
                continue
            if cfg.use_shared_attention_adapter:
                for name in ("q", "k", "v"):
                    a = f"{p}self_attn.linear_{name}_adapter_list.{j}."
                    w[a + "0.weight"] = linear(r, ahs)
                    w[a + "1.weight"] = linear(ahs, r)
            a = f"{p}feed_forward.gate_up_proj_adapter_list.{j}."
            w[a + "0.weight"] = linear(r, hs)
            w[a + "1.weight"] = linear(2 * I, r)
    return w


def stored_names(cfg, w, every_copy):
    """Hugging Face's names: model.layers.{i}.mamba.* (mamba_decoder.mamba.* in a hybrid layer),
    and a block's tensors under the first hybrid layer that runs it (every one with
    every_copy, as a save that keeps tied copies writes them)."""
    out = {}
    for name, t in w.items():
        if name.startswith("blocks."):
            b, rest = name[len("blocks."):].split(".", 1)
            holders = [l for j, l in enumerate(cfg.hybrid_layer_ids)
                       if j % cfg.num_mem_blocks == int(b)]
            for l in holders if every_copy else holders[:1]:
                out[f"model.layers.{l}.shared_transformer.{rest}"] = t
        elif name.startswith("layers."):
            i, rest = name[len("layers."):].split(".", 1)
            if cfg.layers_block_type[int(i)] == "hybrid" and rest != "linear.weight":
                rest = "mamba_decoder." + rest
            out[f"model.layers.{i}.{rest}"] = t
        elif name == "lm_head.weight":
            out[name] = t
        else:
            out["model." + name] = t
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        data = tensors[name].float().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def clear_prompt(generate, vocab, length, gen, before=None):
    """The first of up to 50 random prompts of `length` tokens (drawn from `gen`) whose greedy
    steps are each clear by 2e-3 of the largest logit: (attempt, prompt, tokens, step logits),
    `generate(prompt)` giving the tokens and step logits; `before` runs before each attempt."""
    for attempt in range(50):
        if before is not None:
            before()
        prompt = torch.randint(0, vocab, (length,), generator=gen).tolist()
        tokens, step_logits = generate(prompt)
        if min(margin(r) for r in step_logits) >= 2e-3:
            return attempt, prompt, tokens, step_logits
    raise SystemExit("no prompt with clear greedy margins in 50 attempts")


def write_golden_folder(out, config, tensors, logits_all, step_logits, reference):
    """A golden folder as tests/integration/hf_golden_test.py reads it: config.json,
    model.safetensors (float32), logits_all.npy, greedy_step_logits.npy, reference.json."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1, sort_keys=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    np.save(os.path.join(out, "logits_all.npy"), logits_all.numpy())
    np.save(os.path.join(out, "greedy_step_logits.npy"), step_logits.numpy())
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)


def greedy(cfg, w, prompt, steps):
    """generate(do_sample=False) through the cached path: the prompt, then one token at a time.
    Returns the tokens and each step's logits (the prompt's last row first)."""
    caches = new_caches(cfg)
    logits = forward(cfg, w, prompt, caches, 0, check=True)
    rows, tokens = [logits[-1]], []
    for s in range(steps):
        tokens.append(int(rows[-1].argmax()))
        if s + 1 < steps:
            rows.append(forward(cfg, w, [tokens[-1]], caches, len(prompt) + s)[-1])
    return tokens, torch.stack(rows)


def margin(row):
    top = torch.topk(row, 2).values
    return float((top[0] - top[1]) / row.abs().max())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=37)
    parser.add_argument("--gen", type=int, default=8)
    args = parser.parse_args()
    case = dict(BASE, **CASES[args.case])
    every_copy = case.pop("save_every_copy", False)
    cfg = Config(case)
    gen = torch.Generator().manual_seed(args.seed)
    w = random_weights(cfg, gen)
    attempt, prompt, tokens, step_logits = clear_prompt(
        lambda p: greedy(cfg, w, p, args.gen), cfg.vocab_size, args.tokens, gen,
        before=LITERAL_ERRORS.clear)
    whole = forward(cfg, w, prompt + tokens[:-1], new_caches(cfg), 0)
    assert torch.allclose(whole[len(prompt) - 1:], step_logits, rtol=1e-9, atol=1e-9), \
        "cached steps disagree with the whole-sequence forward"
    logits_all = forward(cfg, w, prompt, new_caches(cfg), 0)

    config = {"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2",
              "num_hidden_layers": cfg.num_hidden_layers, "num_key_value_heads":
              cfg.num_key_value_heads, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
              **{k: v for k, v in case.items()}}
    write_golden_folder(args.out, config, stored_names(cfg, w, every_copy), logits_all,
                        step_logits,
                        {"arch": "zamba2", "model_class": "Zamba2ForCausalLM",
                         "model_source": "tests/golden/zamba2_reference.py: a float64 port of "
                                         "transformers' modeling_zamba2.py at commit "
                                         "00511f5df3b63c48b31496072ec35d6ff3ffa6c6",
                         "case": args.case, "seed": args.seed, "prompt_attempt": attempt,
                         "tokens": prompt, "greedy_tokens": tokens,
                         "greedy_margins": [margin(r) for r in step_logits],
                         "torch_forward_literal_interchunk_error": max(LITERAL_ERRORS),
                         "reference_dtype": "float64", "weights_file_dtype": "float32"})
    print(f"{args.case}: {cfg.num_hidden_layers} layers {cfg.layers_block_type}, "
          f"{cfg.num_mem_blocks} block(s), greedy {tokens}, "
          f"min margin {min(margin(r) for r in step_logits):.3g}; torch_forward's literal "
          f"inter-chunk sum: {max(LITERAL_ERRORS):.3g} of max |y| off the recurrence")


if __name__ == "__main__":
    main()
