#!/usr/bin/env python3
"""attnserve's own float64 reference of Lfm2ForCausalLM (Liquid AI's LFM2), and the writer of
the golden LFM2 folders (tests/golden/hf/lfm2*).

transformers 4.47.1 has no LFM2 and llama.cpp's converter in ../shared/peers is not run on it
here, so the reference is this port of transformers' upstream files, function by function, in
float64: src/transformers/models/lfm2/modeling_lfm2.py at commit
1d6b6ca61a8b640b6a5874c1eb4c154fd112a000 and configuration_lfm2.py at
4f7e1d467f2615fe8de4a089a8b90cf861bea4d7:
  Lfm2RMSNorm          x · rsqrt(mean(x²) + eps) · weight
  Lfm2MLP              w2(silu(w1 x) · w3 x), its width adjusted as Lfm2MLP.__init__ does
  Lfm2ShortConv        in_proj -> B, C, x (in that order); Bx = B · x; conv1d(groups = hidden,
                       padding L_cache - 1)[..., :seqlen]; C · conv; out_proj (slow_forward; with
                       a cache: the state rolled left, Bx written last, the sum of state · weight)
  Lfm2Attention        q_layernorm / k_layernorm per head, then rotate_half RoPE (rope_theta),
                       GQA, head_dim^-1/2, out_proj
  Lfm2DecoderLayer     h + op(operator_norm(h)); h + feed_forward(ffn_norm(h))
  Lfm2Model            embed_tokens, the layers, embedding_norm at the end (the final norm)
Before it writes a folder it checks its cached, token-by-token path (the conv state and KV cache
generate() uses) against the whole-sequence forward.

    /usr/bin/python3 tests/golden/lfm2_reference.py --out DIR --case lfm2|lfm2_conv_bias_untied
    /usr/bin/python3 tests/golden/lfm2_reference.py --adopt DIR PROMPT.npy STEPS.npy
    /usr/bin/python3 tests/golden/lfm2_reference.py --check DIR [DIR ...]

--adopt makes another implementation's logits (llama.cpp's: tests/golden/hf/make.sh) the folder's
reference when they agree with this port within 1e-5 of max |logit| and give the same greedy
tokens; this port's are kept as float64_port_*.npy. --check prints how far a folder's stored
logits are from this port (exit 1 over 1e-5 or on other greedy tokens).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zamba2_reference import (clear_prompt, margin, rms_norm, rotate_half,  # noqa: E402
                              write_golden_folder)

torch.set_default_dtype(torch.float64)

BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, block_ff_dim=128,
            num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            norm_eps=1e-5, rope_theta=10000.0, conv_L_cache=3, block_multiple_of=16,
            block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True, bos_token_id=1,
            eos_token_id=7, pad_token_id=0)
CASES = {
    # conv / attention by layer_types, no conv biases, tied.
    "lfm2": dict(conv_bias=False, tie_word_embeddings=True,
                 layer_types=["conv", "conv", "full_attention", "conv", "full_attention", "conv"]),
    # full_attn_idxs instead of layer_types, conv biases, untied, a multiplier of null (no
    # rounding), conv_L_cache 4.
    "lfm2_conv_bias_untied": dict(conv_bias=True, tie_word_embeddings=False, full_attn_idxs=[1, 4],
                                  block_ffn_dim_multiplier=None, conv_L_cache=4,
                                  num_key_value_heads=1),
}


def layer_types(cfg):
    """Lfm2Config.__init__'s layer_types."""
    if cfg.get("layer_types") is not None:
        return cfg["layer_types"]
    attention = cfg.get("full_attn_idxs")
    if attention is None:
        attention = list(range(cfg["num_hidden_layers"]))
    return ["full_attention" if i in attention else "conv" for i in range(cfg["num_hidden_layers"])]


def ff_width(cfg):
    """Lfm2MLP.__init__'s intermediate size."""
    ff = cfg.get("block_ff_dim", cfg["intermediate_size"])  # Lfm2Config reads block_ff_dim first
    if cfg["block_auto_adjust_ff_dim"]:
        ff = int(2 * ff / 3)
        if cfg["block_ffn_dim_multiplier"] is not None:
            ff = int(cfg["block_ffn_dim_multiplier"] * ff)
            ff = cfg["block_multiple_of"] * ((ff + cfg["block_multiple_of"] - 1) //
                                             cfg["block_multiple_of"])
    return ff


def short_conv(cfg, w, p, x, cache):
    """Lfm2ShortConv.slow_forward; cache["conv"] (hidden, L_cache) is the conv state."""
    H, K = cfg["hidden_size"], cfg["conv_L_cache"]
    bcx = x @ w[p + "in_proj.weight"].T
    if cfg["conv_bias"]:
        bcx = bcx + w[p + "in_proj.bias"]
    B, C, xs = bcx.T.chunk(3, dim=0)  # (H, L) each, transposed as upstream
    bx = B * xs
    weight = w[p + "conv.weight"]  # (H, 1, K)
    bias = w.get(p + "conv.bias")
    if "conv" in cache and x.shape[0] == 1:  # the cached decode step
        state = torch.roll(cache["conv"], shifts=-1, dims=-1)
        state[:, -1] = bx[:, 0]
        cache["conv"] = state
        conv = (state * weight[:, 0, :]).sum(-1, keepdim=True)
        if bias is not None:
            conv = conv + bias[:, None]
    else:
        cache["conv"] = F.pad(bx, (K - bx.shape[-1], 0)) if bx.shape[-1] < K else bx[:, -K:]
        conv = F.conv1d(bx[None], weight, bias, padding=K - 1, groups=H)[0, :, :bx.shape[-1]]
    y = (C * conv).T
    out = y @ w[p + "out_proj.weight"].T
    if cfg["conv_bias"]:
        out = out + w[p + "out_proj.bias"]
    return out


def attention(cfg, w, p, x, positions, cache):
    """Lfm2Attention.forward with eager attention; cache["k"], cache["v"] grow."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // heads
    eps = cfg["norm_eps"]
    q = rms_norm((x @ w[p + "q_proj.weight"].T).view(-1, heads, hd), w[p + "q_layernorm.weight"],
                 eps).transpose(0, 1)
    k = rms_norm((x @ w[p + "k_proj.weight"].T).view(-1, kv, hd), w[p + "k_layernorm.weight"],
                 eps).transpose(0, 1)
    v = (x @ w[p + "v_proj.weight"].T).view(-1, kv, hd).transpose(0, 1)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).double() / hd))
    freqs = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    if "k" in cache:
        k, v = torch.cat([cache["k"], k], 1), torch.cat([cache["v"], v], 1)
    cache["k"], cache["v"] = k, v
    k = k.repeat_interleave(heads // kv, dim=0)
    v = v.repeat_interleave(heads // kv, dim=0)
    scores = q @ k.transpose(1, 2) * hd ** -0.5
    n, total = q.shape[1], k.shape[1]
    mask = torch.ones(n, total, dtype=torch.bool).tril(total - n)
    scores = scores.masked_fill(~mask, float("-inf"))
    o = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(n, heads * hd)
    return o @ w[p + "out_proj.weight"].T


def forward(cfg, w, tokens, caches, start):
    """Lfm2ForCausalLM.forward for `tokens` at positions start..; `caches` (one dict a layer)
    empty for a whole sequence, else continued."""
    h = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    positions = torch.arange(start, start + len(tokens))
    eps = cfg["norm_eps"]
    for i, kind in enumerate(layer_types(cfg)):
        p = f"model.layers.{i}."
        n = rms_norm(h, w[p + "operator_norm.weight"], eps)
        if kind == "conv":
            h = h + short_conv(cfg, w, p + "conv.", n, caches[i])
        else:
            h = h + attention(cfg, w, p + "self_attn.", n, positions, caches[i])
        n = rms_norm(h, w[p + "ffn_norm.weight"], eps)
        f = p + "feed_forward."
        h = h + (F.silu(n @ w[f + "w1.weight"].T) * (n @ w[f + "w3.weight"].T)) @ w[f + "w2.weight"].T
    h = rms_norm(h, w["model.embedding_norm.weight"], eps)
    return h @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


def random_weights(cfg, gen):
    H, V, K = cfg["hidden_size"], cfg["vocab_size"], cfg["conv_L_cache"]
    hd = H // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    ff = ff_width(cfg)

    def normal(shape, std, mean=0.0):
        return (torch.randn(*shape, generator=gen) * std + mean).float().double()

    w = {"model.embed_tokens.weight": normal((V, H), 1.0),
         "model.embedding_norm.weight": normal((H,), 0.1, 1.0)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = normal((V, H), 1 / math.sqrt(H))
    for i, kind in enumerate(layer_types(cfg)):
        p = f"model.layers.{i}."
        w[p + "operator_norm.weight"] = normal((H,), 0.1, 1.0)
        w[p + "ffn_norm.weight"] = normal((H,), 0.1, 1.0)
        if kind == "conv":
            w[p + "conv.in_proj.weight"] = normal((3 * H, H), 1 / math.sqrt(H))
            w[p + "conv.conv.weight"] = normal((H, 1, K), 1 / math.sqrt(K))
            w[p + "conv.out_proj.weight"] = normal((H, H), 1.5 / math.sqrt(H))
            if cfg["conv_bias"]:
                for name, size in (("in_proj", 3 * H), ("conv", H), ("out_proj", H)):
                    w[p + f"conv.{name}.bias"] = normal((size,), 0.1)
        else:
            s = p + "self_attn."
            w[s + "q_proj.weight"] = normal((H, H), 1.5 / math.sqrt(H))
            w[s + "k_proj.weight"] = normal((kv, H), 1.5 / math.sqrt(H))
            w[s + "v_proj.weight"] = normal((kv, H), 1 / math.sqrt(H))
            w[s + "out_proj.weight"] = normal((H, H), 1.5 / math.sqrt(H))
            w[s + "q_layernorm.weight"] = normal((hd,), 0.1, 1.0)
            w[s + "k_layernorm.weight"] = normal((hd,), 0.1, 1.0)
        f = p + "feed_forward."
        w[f + "w1.weight"] = normal((ff, H), 1 / math.sqrt(H))
        w[f + "w3.weight"] = normal((ff, H), 1 / math.sqrt(H))
        w[f + "w2.weight"] = normal((H, ff), 1.5 / math.sqrt(ff))
    return w


def greedy(cfg, w, prompt, steps):
    """generate(do_sample=False) through the cached path: the tokens and each step's logits (the
    prompt's last row first)."""
    caches = [{} for _ in layer_types(cfg)]
    rows, tokens = [forward(cfg, w, prompt, caches, 0)[-1]], []
    for s in range(steps):
        tokens.append(int(rows[-1].argmax()))
        if s + 1 < steps:
            rows.append(forward(cfg, w, [tokens[-1]], caches, len(prompt) + s)[-1])
    return tokens, torch.stack(rows)


def whole_forward(cfg, w, tokens):
    return forward(cfg, w, tokens, [{} for _ in layer_types(cfg)], 0)


def adopt(folder, prompt_npy, steps_npy):
    """Another implementation's logits (prompt [T, V], generate's steps [gen, V]) as the folder's
    reference, where they agree with this port's."""
    ref = json.load(open(os.path.join(folder, "reference.json")))
    theirs = {"logits_all.npy": np.load(prompt_npy), "greedy_step_logits.npy": np.load(steps_npy)}
    agreement = {}
    for name, logits in theirs.items():
        ours = np.load(os.path.join(folder, name))
        agreement[name] = float(np.abs(logits - ours).max() / np.abs(ours).max())
        if agreement[name] > 1e-5 or logits.shape != ours.shape:
            raise SystemExit(f"{folder}: {name} is {agreement[name]:.3g} from this port")
        if name == "greedy_step_logits.npy" and \
                [int(r.argmax()) for r in logits] != ref["greedy_tokens"]:
            raise SystemExit(f"{folder}: the greedy tokens differ")
        os.replace(os.path.join(folder, name), os.path.join(folder, "float64_port_" + name))
        np.save(os.path.join(folder, name), logits.astype(np.float64))
    ref.update({"reference_is": "llama.cpp c9ced49 (its convert_hf_to_gguf.py, F32, and "
                                "../shared/peers' logits.cpp); this port's float64 logits are "
                                "float64_port_*.npy",
                "llamacpp_vs_port_rel": agreement})
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{folder}: llama.cpp's logits adopted; from this port: {agreement}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("--adopt", "--check"):
        from granite_reference import check
        if sys.argv[1] == "--adopt":
            adopt(*sys.argv[2:5])
            return
        sys.exit(0 if all([check(f, 1e-5, whole_forward) for f in sys.argv[2:]]) else 1)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=37)
    parser.add_argument("--gen", type=int, default=8)
    args = parser.parse_args()
    cfg = dict(BASE, **CASES[args.case])
    gen = torch.Generator().manual_seed(args.seed)
    w = random_weights(cfg, gen)
    attempt, prompt, tokens, step_logits = clear_prompt(
        lambda p: greedy(cfg, w, p, args.gen), cfg["vocab_size"], args.tokens, gen)
    whole = whole_forward(cfg, w, prompt + tokens[:-1])
    assert torch.allclose(whole[len(prompt) - 1:], step_logits, rtol=1e-9, atol=1e-9), \
        "cached steps disagree with the whole-sequence forward"
    logits_all = whole[:len(prompt)]

    write_golden_folder(args.out, {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", **cfg},
                        w, logits_all, step_logits,
                        {"arch": "lfm2", "model_class": "Lfm2ForCausalLM",
                         "model_source": "tests/golden/lfm2_reference.py: a float64 port of "
                                         "transformers' modeling_lfm2.py at commit "
                                         "1d6b6ca61a8b640b6a5874c1eb4c154fd112a000",
                         "case": args.case, "seed": args.seed, "prompt_attempt": attempt,
                         "tokens": prompt, "greedy_tokens": tokens,
                         "greedy_margins": [margin(r) for r in step_logits],
                         "ff_width": ff_width(cfg), "reference_dtype": "float64",
                         "weights_file_dtype": "float32"})
    print(f"{args.case}: {layer_types(cfg)}, MLP {ff_width(cfg)}, greedy {tokens}, "
          f"min margin {min(margin(r) for r in step_logits):.3g}")


if __name__ == "__main__":
    main()
