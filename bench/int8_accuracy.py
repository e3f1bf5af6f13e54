#!/usr/bin/python3
"""--weight_precision=int8's accuracy next to llama.cpp's Q8_0 on the same checkpoint.

On the random-weight mamba-130m-shaped Hugging Face folder of bench/batched_decode.py (written
by attnserve-export-model when missing) and a fixed random token sequence:

  reference   float64 in PyTorch (the Mamba-1 recurrence, one token at a time), from the folder;
  attnserve   attnserve_logits_dump in fp32, bf16, int8 (a scale per block of 32: what the flag
              serves) and int8_row (a scale per row), streamed as the server streams: the first
              --prompt ids as one chunk, then one decode step per id;
  Q8_0        llama.cpp's own Q8_0 conversion of the folder (llamacpp.sh convert ... q8_0): its
              dequantized weights read from the GGUF (Q8_0 in_proj, x_proj, out_proj and the tied
              token_embd; dt_proj F16, as the converter keeps widths that are not blocks of 32),
              run through the float64 recurrence with ggml's arithmetic for the products: the
              activations quantized to Q8_0 (float16 scale per block of 32, roundf) before each
              Q8_0 product and rounded to float16 before the F16 one. llama.cpp's logits
              themselves are not read (its tools print none); its products sum in float32,
              this in float64, a difference far below the quantization's.

Figures, over the teacher-forced positions --prompt-1 .. --tokens-1: relative logit error
||logits - reference|| / ||reference|| (Frobenius), the share of positions whose argmax equals
fp32's and the reference's, and the share of --generate greedy steps (from the prompt) whose id
equals fp32's greedy id at that step.

  /usr/bin/python3 bench/int8_accuracy.py --build-dir build [--workdir DIR] [--json FILE]
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from batched_decode import MAMBA_130M_CONFIG, MODEL, run  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--llamacpp", default=str(REPO.parent / "shared" / "peers" / "llamacpp.sh"))
    p.add_argument("--workdir", help="keep the model folder and GGUF here (default: a temp dir)")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt", type=int, default=8)
    p.add_argument("--generate", type=int, default=32)
    p.add_argument("--precisions", default="fp32,bf16,int8,int8_row")
    p.add_argument("--json", metavar="FILE")
    return p.parse_args()


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        a, b = meta["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[a:b], dtype=np.float32).reshape(meta["shape"]).copy()).double()
    return out


def gguf_weights(gguf_path, llamacpp):
    """The GGUF's quantized matrices, dequantized, under the folder's names."""
    home = Path(os.environ.get("LLAMACPP_HOME",
                               Path.home() / ".cache" / "attnserve-peers" / "llama.cpp-c9ced49"))
    sys.path.insert(0, str(home / "gguf-py"))
    from gguf import GGUFReader
    from gguf.quants import dequantize
    names = {"ssm_in": "in_proj", "ssm_x": "x_proj", "ssm_dt": "dt_proj", "ssm_out": "out_proj"}
    out, kinds = {}, {}
    for t in GGUFReader(str(gguf_path)).tensors:
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "backbone.embeddings.weight"
        elif len(parts) == 4 and parts[2] in names and parts[3] == "weight":
            name = f"backbone.layers.{parts[1]}.mixer.{names[parts[2]]}.weight"
        else:
            continue
        kinds[name] = t.tensor_type.name
        out[name] = torch.from_numpy(
            np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).copy()).double()
    return out, kinds


def roundf(v):  # C's roundf: halves away from zero (ggml's quantize_row_q8_0)
    return torch.sign(v) * torch.floor(v.abs() + 0.5)


def q8_0_activations(x):
    """ggml's quantize_row_q8_0 on a float32 row, dequantized: d = amax/127 kept as float16."""
    x32 = x.float().view(-1, 32)
    d = x32.abs().amax(-1, keepdim=True) / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = roundf(x32 * inv)
    return (q.double() * d.half().double()).view(x.shape)


class Mamba:
    """The Mamba-1 recurrence in float64, one token at a time; `lin(x, name)` does x Wᵀ."""

    def __init__(self, w, cfg, lin=None):
        self.w, self.cfg = w, cfg
        self.lin = lin or (lambda x, name: self.w[name] @ x)
        self.layers = cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_epsilon"]

    def new_state(self):
        di, n, k = self.w["backbone.layers.0.mixer.A_log"].shape + (self.cfg["conv_kernel"],)
        return [(torch.zeros(di, k, dtype=torch.float64), torch.zeros(di, n, dtype=torch.float64))
                for _ in range(self.layers)]

    def norm(self, x, name):
        return x * torch.rsqrt(x.pow(2).mean() + self.eps) * self.w[name]

    def step(self, token, state):
        w = self.w
        x = w["backbone.embeddings.weight"][token]
        r = self.cfg["time_step_rank"]
        for i in range(self.layers):
            p = f"backbone.layers.{i}.mixer."
            xz = self.lin(self.norm(x, f"backbone.layers.{i}.norm.weight"), p + "in_proj.weight")
            di = xz.shape[0] // 2
            xs, z = xz[:di], xz[di:]
            conv, h = state[i]
            conv = torch.cat([conv[:, 1:], xs[:, None]], 1)
            u = F.silu((conv * w[p + "conv1d.weight"][:, 0, :]).sum(-1) + w[p + "conv1d.bias"])
            x_dbl = self.lin(u, p + "x_proj.weight")
            dt = F.softplus(self.lin(x_dbl[:r], p + "dt_proj.weight") + w[p + "dt_proj.bias"])
            n = h.shape[1]
            b, c = x_dbl[r:r + n], x_dbl[r + n:r + 2 * n]
            a = -torch.exp(w[p + "A_log"])
            h = torch.exp(dt[:, None] * a) * h + dt[:, None] * b[None, :] * u[:, None]
            y = (h * c[None, :]).sum(-1) + u * w[p + "D"]
            x = x + self.lin(y * F.silu(z), p + "out_proj.weight")
            state[i] = (conv, h)
        x = self.norm(x, "backbone.norm_f.weight")
        return self.lin(x, "backbone.embeddings.weight")

    def run(self, tokens, prompt, generate):
        state = self.new_state()
        for t in tokens[:prompt - 1]:
            self.step(t, state)
        logits = [self.step(tokens[prompt - 1], state)]
        greedy_state = [(c.clone(), h.clone()) for c, h in state]
        for t in tokens[prompt:]:
            logits.append(self.step(t, state))
        greedy, last = [], logits[0]
        for _ in range(generate):
            greedy.append(int(last.argmax()))
            last = self.step(greedy[-1], greedy_state)
        return torch.stack(logits), greedy


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-int8-")
    work = Path(args.workdir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    folder = work / "repo" / MODEL
    if not (folder / "model.safetensors").exists():
        (work / "config.json").write_text(json.dumps(MAMBA_130M_CONFIG))
        run([build / "server" / "model" / "attnserve-export-model",
             f"--config={work / 'config.json'}", f"--name={MODEL}", f"--out={work / 'repo'}"])
    gguf = work / f"{MODEL}-q8_0.gguf"
    if not gguf.exists():
        run([args.llamacpp, "convert", folder, gguf, "q8_0"])
    cfg = json.loads((folder / "config.json").read_text())
    vocab = cfg["vocab_size"]
    tokens = torch.randint(0, vocab, (args.tokens,), generator=torch.Generator().manual_seed(25))
    tokens = tokens.tolist()
    (work / "tokens.txt").write_text(" ".join(map(str, tokens)))

    torch.set_num_threads(2)
    w = read_safetensors(folder / "model.safetensors")
    reference, ref_greedy = Mamba(w, cfg).run(tokens, args.prompt, args.generate)

    q8, kinds = gguf_weights(gguf, args.llamacpp)

    def ggml_lin(x, name):
        if kinds.get(name) == "Q8_0":
            return q8[name] @ q8_0_activations(x)
        if kinds.get(name) == "F16":
            return q8[name] @ x.half().double()
        return w[name] @ x

    results = {}
    for precision in args.precisions.split(","):
        prefix = work / f"logits-{precision}"
        run([build / "bench" / "attnserve_logits_dump", f"--folder={folder}",
             f"--precision={precision}", f"--tokens={work / 'tokens.txt'}",
             f"--prompt={args.prompt}", f"--generate={args.generate}", f"--out={prefix}"])
        logits = torch.from_numpy(np.fromfile(f"{prefix}.logits", dtype=np.float32).copy())
        greedy = [int(t) for t in Path(f"{prefix}.greedy").read_text().split()]
        results[f"attnserve {precision}"] = (logits.double().view(-1, vocab), greedy)
    results["llama.cpp Q8_0 (reproduced)"] = Mamba(w | {"backbone.embeddings.weight":
                                                        q8["backbone.embeddings.weight"]},
                                                   cfg, ggml_lin).run(tokens, args.prompt,
                                                                      args.generate)
    fp32_logits, fp32_greedy = results.get("attnserve fp32", (reference, ref_greedy))
    print(f"{MODEL} (random weights), {args.tokens} tokens (prompt {args.prompt}: "
          f"{args.tokens - args.prompt + 1} teacher-forced positions), greedy {args.generate}; "
          f"the reference is float64")
    print(f"{'':>30} {'rel. logit err':>14} {'argmax = fp32':>13} {'= ref':>6} "
          f"{'greedy = fp32':>13} {'= ref':>6}")
    report = {"tokens": args.tokens, "prompt": args.prompt, "generate": args.generate,
              "results": {}}
    for name, (logits, greedy) in results.items():
        rel = float((logits - reference).norm() / reference.norm())
        top_fp32 = float((logits.argmax(-1) == fp32_logits.argmax(-1)).double().mean())
        top_ref = float((logits.argmax(-1) == reference.argmax(-1)).double().mean())
        g_fp32 = float(np.mean([a == b for a, b in zip(greedy, fp32_greedy)]))
        g_ref = float(np.mean([a == b for a, b in zip(greedy, ref_greedy)]))
        report["results"][name] = {"relative_logit_error": rel, "argmax_equals_fp32": top_fp32,
                                   "argmax_equals_reference": top_ref,
                                   "greedy_equals_fp32": g_fp32, "greedy_equals_reference": g_ref,
                                   "greedy": greedy}
        print(f"{name:>30} {rel:>14.3e} {top_fp32:>12.1%} {top_ref:>6.1%} {g_fp32:>12.1%} "
              f"{g_ref:>6.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
