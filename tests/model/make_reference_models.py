#!/usr/bin/python3
"""Writes random model folders and the logits a plain PyTorch implementation computes for them.

Run by tests/unit/model_test.cc with Debian's python3-torch (/usr/bin/python3). For each model
it writes <out>/<name>/config.json, <out>/<name>/model.safetensors (written by hand: an 8-byte
header length, the JSON header, the raw data) and <out>/<name>.expected.safetensors holding
"tokens" (int64 as F32 values) and "logits" (float32, all positions), computed in float64.

  hf_mamba:  a Hugging Face MambaForCausalLM folder (model_type "mamba", backbone.embeddings,
             tied lm_head), its forward written here from the Mamba-1 equations.
  attention: an attnserve config of causal softmax attention layers with gated-SiLU MLPs and
             an untied lm_head.
  hf_rwkv*:  Hugging Face RwkvForCausalLM folders (model_type "rwkv", rwkv.blocks.N....,
             head.weight), their forward written here as transformers' modeling_rwkv.py
             computes it in inference mode: pre_ln, ln1 and ln2 with layer_norm_epsilon, ln_out
             with nn.LayerNorm's default 1e-5 whatever the config says,
             rwkv_linear_attention_cpu's stable WKV loop, and RwkvModel._rescale_layers: block
             i's attention.output and feed_forward.value weights divided by
             2 ** (i // rescale_every), the hidden state halved after every rescale_every-th
             block (rescale_every 0: never). One folder per (layer_norm_epsilon, rescale_every)
             of RWKV_CASES; with epsilon 1e-3 both the rescaling and ln_out's epsilon change
             the logits far beyond the tests' 1e-4.
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        if dtype == "F32":
            data = t.to(torch.float32).numpy().tobytes()
        elif dtype == "BF16":
            data = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        else:
            data = t.to(torch.float16).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def mamba_mixer(x, p, cfg):
    """Mamba-1 mixer, a loop over time, as Hugging Face's slow path computes it."""
    d_inner = cfg["expand"] * cfg["hidden_size"]
    n, r, k = cfg["state_size"], cfg["time_step_rank"], cfg["conv_kernel"]
    xz = x @ p["in_proj.weight"].T
    xs, z = xz[..., :d_inner], xz[..., d_inner:]
    u = F.conv1d(xs.transpose(1, 2), p["conv1d.weight"], p["conv1d.bias"],
                 padding=k - 1, groups=d_inner)[..., : x.shape[1]].transpose(1, 2)
    u = F.silu(u)
    x_dbl = u @ p["x_proj.weight"].T
    dt = F.softplus(x_dbl[..., :r] @ p["dt_proj.weight"].T + p["dt_proj.bias"])
    b_mat, c_mat = x_dbl[..., r:r + n], x_dbl[..., r + n:]
    a = -torch.exp(p["A_log"])
    h = torch.zeros(x.shape[0], d_inner, n, dtype=x.dtype)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(dt[:, t, :, None] * a) * h + dt[:, t, :, None] * b_mat[:, t, None, :] * u[:, t, :, None]
        ys.append((h * c_mat[:, t, None, :]).sum(-1))
    y = torch.stack(ys, 1) + u * p["D"]
    y = y * F.silu(z)
    return y @ p["out_proj.weight"].T


def attention_mixer(x, p, cfg):
    b, l, d = x.shape
    h = cfg["num_heads"]
    hd = d // h

    def heads(w):
        return (x @ w.T).view(b, l, h, hd).transpose(1, 2)

    q, k, v = heads(p["q_proj.weight"]), heads(p["k_proj.weight"]), heads(p["v_proj.weight"])
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(l, l, dtype=torch.bool), 1), float("-inf"))
    o = torch.softmax(s, -1) @ v
    return o.transpose(1, 2).reshape(b, l, d) @ p["o_proj.weight"].T


def forward(tokens, w, cfg, mixer, eps, mlp):
    x = w["backbone.embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"] if "num_hidden_layers" in cfg else len(cfg["layers"])):
        pre = f"backbone.layers.{i}."
        p = {k[len(pre) + len("mixer."):]: v for k, v in w.items() if k.startswith(pre + "mixer.")}
        x = x + mixer(rms_norm(x, w[pre + "norm.weight"], eps), p, cfg)
        if mlp:
            hn = rms_norm(x, w[pre + "mlp_norm.weight"], eps)
            x = x + (F.silu(hn @ w[pre + "mlp.gate_proj.weight"].T) * (hn @ w[pre + "mlp.up_proj.weight"].T)) @ w[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["backbone.norm_f.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["backbone.embeddings.weight"]
    return x @ head.T


def make_hf_mamba(out, g, weight_dtype):
    cfg = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "vocab_size": 300,
           "hidden_size": 48, "num_hidden_layers": 3, "state_size": 16, "conv_kernel": 4,
           "expand": 2, "intermediate_size": 96, "time_step_rank": 3,
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "use_bias": False,
           "use_conv_bias": True, "residual_in_fp32": True}
    d, di, n, r = cfg["hidden_size"], 96, 16, 3
    w = {"backbone.embeddings.weight": torch.randn(300, d, generator=g)}
    for i in range(3):
        pre = f"backbone.layers.{i}."
        w[pre + "norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        w[pre + "mixer.A_log"] = torch.log(torch.arange(1, n + 1).float()).repeat(di, 1) + 0.1 * torch.randn(di, n, generator=g)
        w[pre + "mixer.D"] = torch.ones(di) + 0.1 * torch.randn(di, generator=g)
        w[pre + "mixer.conv1d.bias"] = 0.1 * torch.randn(di, generator=g)
        w[pre + "mixer.conv1d.weight"] = 0.5 * torch.randn(di, 1, 4, generator=g)
        w[pre + "mixer.dt_proj.bias"] = torch.log(torch.expm1(torch.rand(di, generator=g) * 0.09 + 0.01))
        w[pre + "mixer.dt_proj.weight"] = torch.randn(di, r, generator=g) / math.sqrt(r)
        w[pre + "mixer.in_proj.weight"] = torch.randn(2 * di, d, generator=g) / math.sqrt(d)
        w[pre + "mixer.out_proj.weight"] = torch.randn(d, di, generator=g) / math.sqrt(di)
        w[pre + "mixer.x_proj.weight"] = torch.randn(r + 2 * n, di, generator=g) / math.sqrt(di)
    w["backbone.norm_f.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
    # The values the C++ side will see after conversion to float32.
    w = {k: v.to(getattr(torch, {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[weight_dtype])).double() for k, v in w.items()}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # mamba_ssm's spelling of the embedding, to check that it loads too.
    stored = {("backbone.embedding.weight" if k == "backbone.embeddings.weight" else k): v for k, v in w.items()}
    write_safetensors(os.path.join(out, "model.safetensors"), stored, weight_dtype)
    tokens = torch.randint(0, 300, (1, 37), generator=g)
    return tokens, forward(tokens, w, cfg, mamba_mixer, 1e-5, mlp=False)


def make_attention(out, g):
    cfg = {"model_type": "attnserve", "vocab_size": 200, "hidden_size": 64, "num_heads": 4,
           "layers": ["standard", "standard"], "intermediate_size": 96, "norm_epsilon": 1e-6,
           "tie_word_embeddings": False, "max_sequence_length": 512, "some_unknown_field": 1}
    d, m = 64, 96
    w = {"backbone.embeddings.weight": torch.randn(200, d, generator=g)}
    for i in range(2):
        pre = f"backbone.layers.{i}."
        w[pre + "norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        for name in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            w[pre + f"mixer.{name}.weight"] = torch.randn(d, d, generator=g) / math.sqrt(d)
        w[pre + "mlp_norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        w[pre + "mlp.gate_proj.weight"] = torch.randn(m, d, generator=g) / math.sqrt(d)
        w[pre + "mlp.up_proj.weight"] = torch.randn(m, d, generator=g) / math.sqrt(d)
        w[pre + "mlp.down_proj.weight"] = torch.randn(d, m, generator=g) / math.sqrt(m)
    w["backbone.norm_f.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
    w["lm_head.weight"] = torch.randn(200, d, generator=g) / math.sqrt(d)
    w = {k: v.double() for k, v in w.items()}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"), w)
    tokens = torch.randint(0, 200, (1, 45), generator=g)
    return tokens, forward(tokens, w, cfg, attention_mixer, 1e-6, mlp=True)


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def rwkv_time_shift(x):
    return F.pad(x, (0, 0, 1, -1))


def rwkv_wkv(time_decay, time_first, k, v):
    """transformers' rwkv_linear_attention_cpu."""
    num = torch.zeros_like(k[:, 0])
    den = torch.zeros_like(k[:, 0])
    mx = torch.zeros_like(k[:, 0]) - 1e38
    w = -torch.exp(time_decay)
    out = torch.zeros_like(k)
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        q = torch.maximum(mx, kt + time_first)
        e1, e2 = torch.exp(mx - q), torch.exp(kt + time_first - q)
        out[:, t] = (e1 * num + e2 * vt) / (e1 * den + e2)
        q = torch.maximum(mx + w, kt)
        e1, e2 = torch.exp(mx + w - q), torch.exp(kt - q)
        num, den, mx = e1 * num + e2 * vt, e1 * den + e2, q
    return out


def rwkv_forward(tokens, w, cfg):
    eps, every = cfg["layer_norm_epsilon"], cfg["rescale_every"]
    x = w["rwkv.embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = lambda name: w[f"rwkv.blocks.{i}.{name}"]
        scale = 2.0 ** (i // every) if every > 0 else 1.0  # RwkvModel._rescale_layers
        if i == 0:
            x = layer_norm(x, p("pre_ln.weight"), p("pre_ln.bias"), eps)
        h = layer_norm(x, p("ln1.weight"), p("ln1.bias"), eps)
        s = rwkv_time_shift(h)
        mix = lambda name: h * p(name) + s * (1 - p(name))
        k = mix("attention.time_mix_key") @ p("attention.key.weight").T
        v = mix("attention.time_mix_value") @ p("attention.value.weight").T
        r = torch.sigmoid(mix("attention.time_mix_receptance") @ p("attention.receptance.weight").T)
        wkv = rwkv_wkv(p("attention.time_decay"), p("attention.time_first"), k, v)
        x = x + (r * wkv) @ (p("attention.output.weight") / scale).T
        h = layer_norm(x, p("ln2.weight"), p("ln2.bias"), eps)
        s = rwkv_time_shift(h)
        mix = lambda name: h * p(name) + s * (1 - p(name))
        kk = torch.square(torch.relu(mix("feed_forward.time_mix_key") @ p("feed_forward.key.weight").T))
        rr = torch.sigmoid(mix("feed_forward.time_mix_receptance") @ p("feed_forward.receptance.weight").T)
        x = x + rr * (kk @ (p("feed_forward.value.weight") / scale).T)
        if every > 0 and (i + 1) % every == 0:
            x = x / 2
    x = layer_norm(x, w["rwkv.ln_out.weight"], w["rwkv.ln_out.bias"], 1e-5)  # nn.LayerNorm(hidden)
    return x @ w["head.weight"].T


# (folder, layer_norm_epsilon, rescale_every) of the RWKV folders, 4 layers each: every
# layer rescaled, none, every third (one halving inside, one before ln_out), every second.
RWKV_CASES = [("hf_rwkv", 1e-5, 2), ("hf_rwkv_eps3_rescale1", 1e-3, 1),
              ("hf_rwkv_eps3_rescale0", 1e-3, 0), ("hf_rwkv_eps3_rescale3", 1e-3, 3)]


def make_hf_rwkv(out, g, eps, rescale_every):
    # attention_hidden_size != hidden_size and an explicit intermediate_size, so that every
    # width is read from the config.
    cfg = {"model_type": "rwkv", "architectures": ["RwkvForCausalLM"], "vocab_size": 260,
           "context_length": 1024, "hidden_size": 48, "attention_hidden_size": 32,
           "intermediate_size": 112, "num_hidden_layers": 4, "layer_norm_epsilon": eps,
           "rescale_every": rescale_every, "tie_word_embeddings": False, "bos_token_id": 0,
           "eos_token_id": 0, "use_cache": True}
    d, a, f, n = 48, 32, 112, 4
    ln = lambda: (1 + 0.1 * torch.randn(d, generator=g), 0.1 * torch.randn(d, generator=g))
    w = {"rwkv.embeddings.weight": torch.randn(260, d, generator=g)}
    w["rwkv.blocks.0.pre_ln.weight"], w["rwkv.blocks.0.pre_ln.bias"] = ln()
    for i in range(n):
        pre = f"rwkv.blocks.{i}."
        w[pre + "ln1.weight"], w[pre + "ln1.bias"] = ln()
        w[pre + "ln2.weight"], w[pre + "ln2.bias"] = ln()
        w[pre + "attention.time_decay"] = torch.linspace(-5, 3, a) + 0.3 * torch.randn(a, generator=g)
        w[pre + "attention.time_first"] = math.log(0.3) + 0.5 * torch.randn(a, generator=g)
        for m in ["key", "value", "receptance"]:
            w[pre + f"attention.time_mix_{m}"] = torch.rand(1, 1, d, generator=g)
            w[pre + f"attention.{m}.weight"] = torch.randn(a, d, generator=g) / math.sqrt(d)
        w[pre + "attention.output.weight"] = torch.randn(d, a, generator=g) / math.sqrt(a)
        w[pre + "feed_forward.time_mix_key"] = torch.rand(1, 1, d, generator=g)
        w[pre + "feed_forward.time_mix_receptance"] = torch.rand(1, 1, d, generator=g)
        w[pre + "feed_forward.key.weight"] = torch.randn(f, d, generator=g) / math.sqrt(d)
        w[pre + "feed_forward.receptance.weight"] = torch.randn(d, d, generator=g) / math.sqrt(d)
        w[pre + "feed_forward.value.weight"] = torch.randn(d, f, generator=g) / math.sqrt(f)
    w["rwkv.ln_out.weight"], w["rwkv.ln_out.bias"] = ln()
    w["head.weight"] = torch.randn(260, d, generator=g) / math.sqrt(d)
    w = {k: v.float().double() for k, v in w.items()}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f_:
        json.dump(cfg, f_, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"), w)
    tokens = torch.randint(0, 260, (1, 41), generator=g)
    return tokens, rwkv_forward(tokens, w, cfg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    g = torch.Generator().manual_seed(1234)
    models = {
        "hf_mamba": make_hf_mamba(os.path.join(args.out, "hf_mamba"), g, "F32"),
        "hf_mamba_bf16": make_hf_mamba(os.path.join(args.out, "hf_mamba_bf16"), g, "BF16"),
        "attention": make_attention(os.path.join(args.out, "attention"), g),
    }
    for name, eps, rescale_every in RWKV_CASES:
        models[name] = make_hf_rwkv(os.path.join(args.out, name), g, eps, rescale_every)
    for name, (tokens, logits) in models.items():
        write_safetensors(os.path.join(args.out, name + ".expected.safetensors"),
                          {"tokens": tokens.double(), "logits": logits})
    print("wrote", args.out)


if __name__ == "__main__":
    main()
