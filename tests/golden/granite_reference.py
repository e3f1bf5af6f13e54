#!/usr/bin/env python3
"""attnserve's own float64 reference of GraniteMoeHybridForCausalLM (Granite-4.0-H) and
BambaForCausalLM, and its check of the golden folders' stored references.

A port of transformers' upstream files, function by function, in float64 throughout, with the
Mamba-2 scan as its token-by-token recurrence (tests/golden/zamba2_reference.py's, which checks its
chunked form against it):
  granitemoehybrid  src/transformers/models/granitemoehybrid/modeling_granitemoehybrid.py at
                    commit 00511f5df3b63c48b31496072ec35d6ff3ffa6c6: GraniteMoeHybridRMSNorm,
                    GraniteMoeHybridRMSNormGated (gate first, one RMS over all of d_inner),
                    GraniteMoeHybridMambaLayer, GraniteMoeHybridAttention (scaling =
                    attention_multiplier; rotary positions only with position_embedding_type
                    "rope"), GraniteMoeHybridTopKGating (the top k logits, softmax over them),
                    GraniteMoeHybridMoE (input_linear = gate || up per expert), the shared MLP,
                    GraniteMoeHybridDecoderLayer (residual_multiplier on both branches),
                    GraniteMoeHybridModel (embedding_multiplier), the logits / logits_scaling;
  bamba             src/transformers/models/bamba/modular_bamba.py (BambaDecoderLayer,
                    BambaModel, apply_rotary_pos_emb: rotate_half over the first rotary_dim dims
                    of a head, the rest passed through; BambaMLP = LlamaMLP).

    /usr/bin/python3 tests/golden/granite_reference.py DIR [DIR ...] [--tolerance 1e-5]

For each folder (config.json, model.safetensors, reference.json's `tokens`, logits_all.npy and
greedy_step_logits.npy), computes the float64 logits of the prompt and of generate's steps
(greedy_tokens) and prints how far the stored references are from them (relative to max |logit|);
exits 1 where that is over --tolerance. The stored references are llama.cpp's (granitemoehybrid)
and ../shared/hf_reference/hybrid_ref.py's port (bamba): this is the check by an implementation of
our own, from the upstream files, that they follow upstream.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zamba2_reference import rms_norm, rms_norm_gated, rotate_half, ssd_recurrent  # noqa: E402

torch.set_default_dtype(torch.float64)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", entry["dtype"]
        begin, end = entry["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(blob[begin:end], dtype="<f4").reshape(entry["shape"]).copy()).double()
    return out


def rotary(positions, dim, theta):
    """The default RoPE's cos, sin (L, dim) of a rotary width `dim` (LlamaRotaryEmbedding)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).double() / dim))
    freqs = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rotary(x, cos, sin):
    """apply_rotary_pos_emb over the first cos.shape[-1] dims of each head (all of them for
    Granite's, half for Bamba's); x (heads, L, head_dim)."""
    d = cos.shape[-1]
    rot, rest = x[..., :d], x[..., d:]
    return torch.cat([rot * cos + rotate_half(rot) * sin, rest], dim=-1)


def attention(w, p, h, cfg, scaling, rope, positions):
    """GraniteMoeHybridAttention / BambaAttention (LlamaAttention) with eager_attention_forward,
    the whole sequence causal."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    q = (h @ w[p + "q_proj.weight"].T).view(-1, heads, hd).transpose(0, 1)
    k = (h @ w[p + "k_proj.weight"].T).view(-1, kv, hd).transpose(0, 1)
    v = (h @ w[p + "v_proj.weight"].T).view(-1, kv, hd).transpose(0, 1)
    if rope is not None:
        cos, sin = rotary(positions, *rope)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    k = k.repeat_interleave(heads // kv, dim=0)
    v = v.repeat_interleave(heads // kv, dim=0)
    scores = q @ k.transpose(1, 2) * scaling
    n = q.shape[1]
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    out = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(n, heads * hd)
    return out @ w[p + "o_proj.weight"].T


def mamba(w, p, h, cfg):
    """GraniteMoeHybridMambaLayer.torch_forward / BambaMixer (Mamba2Mixer) without a cache:
    in_proj to [gate, x·B·C, dt], causal conv + silu, dt = softplus(dt + dt_bias), the scan,
    y + D·x, the gated norm over all of d_inner, out_proj."""
    heads, groups, n = cfg["mamba_n_heads"], cfg["mamba_n_groups"], cfg["mamba_d_state"]
    d_inner = cfg["mamba_expand"] * cfg["hidden_size"]
    hd = d_inner // heads
    conv_dim = d_inner + 2 * groups * n
    gate, xbc, dt = (h @ w[p + "in_proj.weight"].T).split([d_inner, conv_dim, heads], dim=-1)
    k = cfg["mamba_d_conv"]
    xbc = F.silu(F.conv1d(xbc.T[None], w[p + "conv1d.weight"], w.get(p + "conv1d.bias"),
                          padding=k - 1, groups=conv_dim)[0, :, :xbc.shape[0]].T)
    x, B, C = xbc.split([d_inner, groups * n, groups * n], dim=-1)
    dt = F.softplus(dt + w[p + "dt_bias"])
    A = -torch.exp(w[p + "A_log"])
    B = B.reshape(-1, groups, n).repeat_interleave(heads // groups, dim=1)
    C = C.reshape(-1, groups, n).repeat_interleave(heads // groups, dim=1)
    y, _ = ssd_recurrent(x.reshape(-1, heads, hd), dt, A, B, C, w[p + "D"])
    y = rms_norm_gated(y.reshape(-1, d_inner), gate, w[p + "norm.weight"], d_inner,
                       cfg["rms_norm_eps"])
    return y @ w[p + "out_proj.weight"].T


def swiglu(x, gate_up, down):
    gate, up = (x @ gate_up.T).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ down.T


def granite_mlp(w, p, h, cfg):
    """GraniteMoeHybridMoE (GraniteMoeHybridTopKGating: softmax over the top k logits) beside
    the shared MLP, or the shared MLP alone (num_local_experts 0)."""
    out = swiglu(h, w[p + "shared_mlp.input_linear.weight"], w[p + "shared_mlp.output_linear.weight"])
    if cfg.get("num_local_experts", 0) > 0:
        logits = h @ w[p + "block_sparse_moe.router.layer.weight"].T
        top, index = logits.topk(cfg["num_experts_per_tok"], dim=1)
        gates = torch.softmax(top, dim=1)
        wi = w[p + "block_sparse_moe.input_linear.weight"]
        wo = w[p + "block_sparse_moe.output_linear.weight"]
        moe = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(index.shape[1]):
                e = int(index[t, j])
                moe[t] += gates[t, j] * swiglu(h[t:t + 1], wi[e], wo[e])[0]
        out = moe + out
    return out


def forward(cfg, w, tokens):
    """The logits (L, V) of the whole sequence."""
    bamba = cfg["model_type"] == "bamba"
    L = cfg["num_hidden_layers"]
    eps = cfg["rms_norm_eps"]
    positions = torch.arange(len(tokens))
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if bamba:
        attention_layers = set(cfg.get("attn_layer_indices") or [])
        types = ["attention" if i in attention_layers else "mamba" for i in range(L)]
        rope = (int(hd * cfg.get("partial_rotary_factor", 0.5)), cfg.get("rope_theta", 10000.0))
        scaling, embedding_m, residual_m, logits_div = hd ** -0.5, 1.0, 1.0, 1.0
    else:
        types = cfg.get("layer_types") or ["mamba"] * L
        rope = (hd, cfg.get("rope_theta", 10000.0)) \
            if cfg.get("position_embedding_type") == "rope" else None
        scaling = cfg["attention_multiplier"]
        embedding_m = cfg["embedding_multiplier"]
        residual_m, logits_div = cfg["residual_multiplier"], cfg["logits_scaling"]
    h = w["model.embed_tokens.weight"][torch.tensor(tokens)] * embedding_m
    for i in range(L):
        p = f"model.layers.{i}."
        n = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        if types[i] == "mamba":
            m = mamba(w, p + "mamba.", n, cfg)
        else:
            m = attention(w, p + "self_attn.", n, cfg, scaling, rope, positions)
        h = h + m * residual_m
        if bamba:
            n = rms_norm(h, w[p + "pre_ff_layernorm.weight"], eps)
            f = p + "feed_forward."
            ff = (F.silu(n @ w[f + "gate_proj.weight"].T) * (n @ w[f + "up_proj.weight"].T)) \
                @ w[f + "down_proj.weight"].T
        else:
            n = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
            ff = granite_mlp(w, p, n, cfg)
        h = h + ff * residual_m
    h = rms_norm(h, w["model.final_layernorm.weight" if bamba else "model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return (h @ head.T) / logits_div


def check(folder, tolerance, forward=forward):
    """Prints how far the folder's stored references are from `forward`'s float64 logits;
    whether within `tolerance` with the same greedy tokens."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    ref = json.load(open(os.path.join(folder, "reference.json")))
    w = load_safetensors(os.path.join(folder, "model.safetensors"))
    tokens, greedy = ref["tokens"], ref["greedy_tokens"]
    ours = forward(cfg, w, tokens + greedy[:-1])
    worst = 0.0
    for name, rows in (("logits_all.npy", ours[:len(tokens)]),
                       ("greedy_step_logits.npy", ours[len(tokens) - 1:])):
        stored = torch.from_numpy(np.load(os.path.join(folder, name)))
        err = float((stored - rows).abs().max() / rows.abs().max())
        worst = max(worst, err)
        print(f"{os.path.basename(folder)} {name} ({ref.get('reference_is', 'stored')}): "
              f"{err:.3g} of max |logit| from attnserve's float64 port")
    own_greedy = [int(r.argmax()) for r in ours[len(tokens) - 1:]]
    if own_greedy != greedy:
        print(f"{os.path.basename(folder)}: greedy tokens differ: {own_greedy} vs {greedy}")
        return False
    return worst <= tolerance


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    ok = all([check(f, args.tolerance) for f in args.folders])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
