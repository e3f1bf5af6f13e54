#!/usr/bin/env python3
"""attnserve's own float64 reference of FalconH1ForCausalLM and NemotronHForCausalLM, and its
check of the golden folders' stored references (llama.cpp's logits).

A port of the upstream files, function by function, in float64, the Mamba-2 scan as its
token-by-token recurrence (tests/golden/zamba2_reference.py's ssd_recurrent):
  falcon_h1   transformers' src/transformers/models/falcon_h1/modeling_falcon_h1.py at commit
              68c08116ff67bbc0b9a72179d72da9dc2355a4dc: FalconH1Mixer.torch_forward (in_proj of
              x · ssm_in_multiplier, times mup_vector: ssm_multipliers over the z, x, B, C, dt
              rows; dt clamped to time_step_limit (0, inf)), FalconH1RMSNormGated (per group of
              d_ssm / n_groups; the norm before the gate with mamba_norm_before_gate) or y ·
              silu(z) without mamba_rms_norm, FalconH1Attention (keys times key_multiplier before
              the rotary positions, head_dim^-1/2), FalconH1DecoderLayer (mamba · ssm_out_multiplier
              + attention(n · attention_in_multiplier) · attention_out_multiplier), FalconH1MLP
              (gate · mlp_multipliers[0], down · mlp_multipliers[1]), FalconH1Model
              (embedding_multiplier), the logits · lm_head_multiplier;
  nemotron_h  transformers' src/transformers/models/nemotron_h/modeling_nemotron_h.py at commit
              897753a012bfa6dac8c0ae3281f23a2fc1e72db6: NemotronHBlock (norm, one mixer,
              residual), NemotronHMamba2Mixer (d_inner = mamba_num_heads · mamba_head_dim, the
              gated norm gate first, per group of d_inner / n_groups), NemotronHAttention (no
              positions, head_dim^-1/2), NemotronHMoE with NemotronHTopkRouter (sigmoid scores;
              scores + e_score_correction_bias choose the top k; weights the scores, divided by
              their sum + 1e-20 with norm_topk_prob, times routed_scaling_factor) and the shared
              experts, experts down(relu(up x)^2); the dense "-" block is NVIDIA's remote-code
              NemotronHMLP (the same down(relu(up x)^2)), which the upstream file lacks.

    /usr/bin/python3 tests/golden/falcon_nemotron_reference.py DIR [DIR ...] [--tolerance 1e-5]
    /usr/bin/python3 tests/golden/falcon_nemotron_reference.py --rewrite DIR

Prints how far each folder's stored logits (prompt and generate's steps) are from this port,
relative to max |logit|; exits 1 over --tolerance or where the greedy tokens differ. --rewrite
makes this port the folder's reference (where llama.cpp is wrong: a Falcon-H1 with tied
embeddings, whose lm_head llama.cpp c9ced49 scales by the embedding multiplier): its logits and
greedy tokens replace the stored ones, which are kept as llamacpp_*.npy.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from granite_reference import apply_rotary, check, load_safetensors, rotary  # noqa: E402
from zamba2_reference import rms_norm, ssd_recurrent  # noqa: E402

torch.set_default_dtype(torch.float64)


def grouped_rms(x, weight, groups, eps):
    """An RMSNorm of each of `groups` equal spans of the last dim, then times weight."""
    *prefix, last = x.shape
    g = x.view(*prefix, groups, last // groups)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return weight * g.view(*prefix, last)


def mamba2(w, p, x, heads, head_dim, groups, n, conv_k, eps, norm, mup=None):
    """The Mamba-2 mixer without a cache: in_proj (times mup), [z, x·B·C, dt], the causal conv +
    silu, dt = softplus(dt + dt_bias), the scan, y + D·x, the gate and norm, out_proj.
    norm: "gate_then_norm", "norm_then_gate" or "gate"."""
    d_inner = heads * head_dim
    conv_dim = d_inner + 2 * groups * n
    proj = x @ w[p + "in_proj.weight"].T
    if mup is not None:
        proj = proj * mup
    z, xbc, dt = proj.split([d_inner, conv_dim, heads], dim=-1)
    xbc = F.silu(F.conv1d(xbc.T[None], w[p + "conv1d.weight"], w.get(p + "conv1d.bias"),
                          padding=conv_k - 1, groups=conv_dim)[0, :, :xbc.shape[0]].T)
    xs, B, C = xbc.split([d_inner, groups * n, groups * n], dim=-1)
    dt = F.softplus(dt + w[p + "dt_bias"])
    A = -torch.exp(w[p + "A_log"])
    B = B.reshape(-1, groups, n).repeat_interleave(heads // groups, dim=1)
    C = C.reshape(-1, groups, n).repeat_interleave(heads // groups, dim=1)
    y, _ = ssd_recurrent(xs.reshape(-1, heads, head_dim), dt, A, B, C, w[p + "D"])
    y = y.reshape(-1, d_inner)
    if norm == "gate_then_norm":
        y = grouped_rms(y * F.silu(z), w[p + "norm.weight"], groups, eps)
    elif norm == "norm_then_gate":
        y = grouped_rms(y, w[p + "norm.weight"], groups, eps) * F.silu(z)
    else:
        y = y * F.silu(z)
    return y @ w[p + "out_proj.weight"].T


def attention(w, p, x, heads, kv, hd, rope=None, key_multiplier=1.0, out="o_proj"):
    """Causal GQA attention, head_dim^-1/2, keys times key_multiplier before the rotary
    positions (rope: (dim, theta) or None)."""
    q = (x @ w[p + "q_proj.weight"].T).view(-1, heads, hd).transpose(0, 1)
    k = (x @ w[p + "k_proj.weight"].T).view(-1, kv, hd).transpose(0, 1) * key_multiplier
    v = (x @ w[p + "v_proj.weight"].T).view(-1, kv, hd).transpose(0, 1)
    if rope is not None:
        cos, sin = rotary(torch.arange(x.shape[0]), *rope)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    k = k.repeat_interleave(heads // kv, dim=0)
    v = v.repeat_interleave(heads // kv, dim=0)
    scores = q @ k.transpose(1, 2) * hd ** -0.5
    L = x.shape[0]
    scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    o = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(L, heads * hd)
    return o @ w[p + out + ".weight"].T


def falcon_h1(cfg, w, tokens):
    H, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // heads
    d_ssm = cfg.get("mamba_d_ssm", 1024)
    d_ssm = d_ssm if d_ssm is not None else cfg["mamba_expand"] * H
    mh, groups, n = cfg["mamba_n_heads"], cfg["mamba_n_groups"], cfg["mamba_d_state"]
    mhd = cfg.get("mamba_d_head", "auto")
    mhd = d_ssm // mh if mhd in (None, "auto") else mhd
    gn = groups * n
    m = cfg.get("ssm_multipliers", [1.0] * 5)
    mup = torch.cat([torch.full((size,), float(v)) for size, v in
                     zip([d_ssm, d_ssm, gn, gn, mh], m)])
    norm = "gate"
    if cfg.get("mamba_rms_norm", False):
        norm = "norm_then_gate" if cfg.get("mamba_norm_before_gate", True) else "gate_then_norm"
    gate_m, down_m = cfg.get("mlp_multipliers", [1.0, 1.0])
    rope = (hd, cfg.get("rope_theta", 1e5))
    h = w["model.embed_tokens.weight"][torch.tensor(tokens)] * cfg.get("embedding_multiplier", 1.0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        mamba_out = mamba2(w, p + "mamba.", x * cfg.get("ssm_in_multiplier", 1.0), mh, mhd, groups,
                           n, cfg["mamba_d_conv"], eps, norm, mup)
        attn_out = attention(w, p + "self_attn.", x * cfg.get("attention_in_multiplier", 1.0),
                             heads, kv, hd, rope, cfg.get("key_multiplier", 1.0))
        h = h + mamba_out * cfg.get("ssm_out_multiplier", 1.0) + \
            attn_out * cfg.get("attention_out_multiplier", 1.0)
        x = rms_norm(h, w[p + "pre_ff_layernorm.weight"], eps)
        f = p + "feed_forward."
        y = (x @ w[f + "up_proj.weight"].T) * F.silu((x @ w[f + "gate_proj.weight"].T) * gate_m)
        h = h + (y @ w[f + "down_proj.weight"].T) * down_m
    h = rms_norm(h, w["model.final_layernorm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return (h @ head.T) * cfg.get("lm_head_multiplier", 1.0)


def relu2_mlp(x, up, down):
    return torch.relu(x @ up.T).pow(2) @ down.T


def nemotron_moe(cfg, w, p, x):
    """NemotronHMoE: NemotronHTopkRouter's choice (n_group 1), the experts, the shared experts."""
    scores = torch.sigmoid(x @ w[p + "gate.weight"].T)
    choice = scores + w[p + "gate.e_score_correction_bias"]
    index = choice.topk(cfg["num_experts_per_tok"], dim=-1)[1]
    weights = scores.gather(1, index)
    if cfg.get("norm_topk_prob", True):
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    weights = weights * cfg.get("routed_scaling_factor", 1.0)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(index.shape[1]):
            e = f"{p}experts.{int(index[t, j])}."
            out[t] += weights[t, j] * relu2_mlp(x[t:t + 1], w[e + "up_proj.weight"],
                                                w[e + "down_proj.weight"])[0]
    s = p + "shared_experts."
    return out + relu2_mlp(x, w[s + "up_proj.weight"], w[s + "down_proj.weight"])


def nemotron_h(cfg, w, tokens):
    assert cfg.get("n_group", 1) == 1, "grouped routing is not ported"
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    blocks = cfg.get("layers_block_type") or [kinds[c] for c in cfg["hybrid_override_pattern"]]
    eps = cfg["layer_norm_epsilon"]
    h = w["backbone.embeddings.weight"][torch.tensor(tokens)]
    for i, block in enumerate(blocks):
        p = f"backbone.layers.{i}."
        x = rms_norm(h, w[p + "norm.weight"], eps)
        mx = p + "mixer."
        if block == "mamba":
            out = mamba2(w, mx, x, cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["n_groups"],
                         cfg["ssm_state_size"], cfg.get("conv_kernel", 4), eps, "gate_then_norm")
        elif block == "attention":
            out = attention(w, mx, x, cfg["num_attention_heads"], cfg["num_key_value_heads"],
                            cfg["head_dim"])
        elif block == "mlp":
            out = relu2_mlp(x, w[mx + "up_proj.weight"], w[mx + "down_proj.weight"])
        else:
            out = nemotron_moe(cfg, w, mx, x)
        h = h + out
    h = rms_norm(h, w["backbone.norm_f.weight"], eps)
    return h @ w.get("lm_head.weight", w["backbone.embeddings.weight"]).T


def forward(cfg, w, tokens):
    return {"falcon_h1": falcon_h1, "nemotron_h": nemotron_h}[cfg["model_type"]](cfg, w, tokens)


def rewrite(folder):
    """This port's logits (prompt, then generate's steps from its own greedy tokens) as the
    folder's reference; llama.cpp's kept beside them."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    ref = json.load(open(os.path.join(folder, "reference.json")))
    w = load_safetensors(os.path.join(folder, "model.safetensors"))
    tokens, greedy = ref["tokens"], []
    for _ in range(len(ref["greedy_tokens"])):
        greedy.append(int(forward(cfg, w, tokens + greedy)[-1].argmax()))
    logits = forward(cfg, w, tokens + greedy[:-1])
    for name in ("logits_all.npy", "greedy_step_logits.npy"):
        os.replace(os.path.join(folder, name), os.path.join(folder, "llamacpp_" + name))
    np.save(os.path.join(folder, "logits_all.npy"), logits[:len(tokens)].numpy())
    np.save(os.path.join(folder, "greedy_step_logits.npy"), logits[len(tokens) - 1:].numpy())
    llama = np.load(os.path.join(folder, "llamacpp_logits_all.npy"))
    ours = logits[:len(tokens)].numpy()
    ref.update({"reference_is": "tests/golden/falcon_nemotron_reference.py (float64), NOT llama.cpp",
                "greedy_tokens": greedy, "llamacpp_logits_all_npy": "llamacpp_logits_all.npy",
                "llamacpp_vs_reference_rel": float(np.abs(llama - ours).max() / np.abs(ours).max())})
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{folder}: reference rewritten; llama.cpp's logits are "
          f"{ref['llamacpp_vs_reference_rel']:.3g} of max |logit| from it")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--rewrite", action="store_true")
    args = parser.parse_args()
    if args.rewrite:
        for folder in args.folders:
            rewrite(folder)
        return
    ok = all([check(f, args.tolerance, forward) for f in args.folders])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
