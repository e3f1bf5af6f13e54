#!/usr/bin/python3
"""A Zamba2 model (Mamba-2 + shared attention blocks with adapters) served by attnserve, on its
own: no CPU peer runs Zamba2 (llama.cpp's support is an open request), so each figure is stated
against its bound instead.

One random-weight Zamba2ForCausalLM folder of Zyphra/Zamba2-1.2B's shape (its config.json at
revision 6b05bf29d1bb4ca71a36d12f7da4d3120dcde7fe: hidden 2048, 38 layers, hybrid at 5, 11, 17,
23, 29, 35 running one shared block (32 heads of 128 over 2·hidden, rotary positions, MLP 8192
GeLU), adapters of rank 128 on q, k, v and gate_up, Mamba-2 with 64 heads of 64, d_state 128,
one group, chunk 256, vocab 32000, tied: 1,215,064,704 parameters), written by
tests/golden/zamba2_reference.py's own writer in Hugging Face's names, and checked first against
that file's float64 forward on a 16-token prompt. For each precision attnserve alone, --reps
times, medians (bench/hf_folder_vs_llamacpp.py's measurement without the peer):

  pp512        a unary Infer of 512 random tokens (prefix cache off);
  tg128        one session appends 8 tokens and generates 128 greedily (attnserve_decode_bench);
  16, 64       aggregate decode tok/s of that many sessions at once.

Bounds (attnserve_cpu_peaks, measured in the same run): prefill at the products' FLOPs a token
(each Mamba layer's in_proj and out_proj, each hybrid layer's use of the block's q, k, v, o and
MLP, its adapters and linear; the lm_head for the last token only; the SSD scan and attention
scores left out, so the share is an upper estimate) at the instruction's peak; decode at the
bytes a step reads (every matrix once per use: the shared block is read again by each of the 6
hybrid layers, the adapters, the head; each session's Mamba states read and written, its KV cache
read) at the read bandwidth, or, where it takes longer, the step's rows' FLOPs (the lm_head
too) at the instruction's peak.

  /usr/bin/python3 bench/zamba2_folder.py --build-dir build [--workdir DIR] [--reps 2]
      [--precisions fp32,bf16,int8] [--json FILE]
"""

import gc
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "golden"))
from batched_decode import PRODUCT_PEAK, cpu_description, cpu_peaks  # noqa: E402
from bench_server import attnserve_stubs  # noqa: E402
from hf_folder_vs_llamacpp import (argument_parser, measure_precision,  # noqa: E402
                                   served_logits)

MODEL = "zamba2-1.2b"
BYTES = {"fp32": 4.0, "bf16": 2.0, "bf16dot": 2.0, "int8": 1.0 + 4.0 / 32}
HYBRID = (5, 11, 17, 23, 29, 35)
# Zamba2-1.2B's config.json keys (the ones its tiny golden cases set too).
SHAPE = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
             num_key_value_heads=32, mamba_d_state=128, mamba_d_conv=4, mamba_expand=2,
             n_mamba_heads=64, mamba_ngroups=1, chunk_size=256, adapter_rank=128,
             num_mem_blocks=1, use_mem_rope=True, use_shared_attention_adapter=True,
             rope_theta=10000.0, rms_norm_eps=1e-5, time_step_min=0.001, hidden_act="gelu",
             max_position_embeddings=4096, tie_word_embeddings=True,
             layers_block_type=["hybrid" if i in HYBRID else "mamba" for i in range(38)])
SESSION_TOKENS = 136  # a decode_bench session: 8 appended + 128 generated


def shape(c):
    """Elements of the products a token runs (the lm_head apart), of the head, and of what a
    step reads once per use; the state bytes of a session and its KV bytes a token."""
    h, layers, ff, r = c["hidden_size"], len(c["layers_block_type"]), c["intermediate_size"], \
        c["adapter_rank"]
    di, n, g, heads = c["mamba_expand"] * h, c["mamba_d_state"], c["mamba_ngroups"], \
        c["n_mamba_heads"]
    conv_dim = di + 2 * g * n
    hybrid = c["layers_block_type"].count("hybrid")
    mamba = h * (di + conv_dim + heads) + di * h
    block = 3 * (2 * h) * (2 * h) + 2 * h * h + 3 * h * ff  # q, k, v, o; gate, up, down
    adapters = 3 * (2 * (2 * h) * r) + (h * r + r * 2 * ff)
    products = layers * mamba + hybrid * (block + adapters + h * h)
    state = layers * (conv_dim * c["mamba_d_conv"] + di * n) * 4
    kv_bytes = hybrid * 2 * c["num_key_value_heads"] * (2 * h // c["num_attention_heads"]) * 4
    return products, c["vocab_size"] * h, state, kv_bytes


def write_folder(folder, tokens):
    """The folder (unless written already: the weights are seeded), and its float64 logits of
    `tokens` by the reference's forward."""
    import torch
    import zamba2_reference as ref
    cfg = ref.Config(dict(SHAPE))
    w = ref.random_weights(cfg, torch.Generator().manual_seed(0), dtype=torch.float64)
    if not (folder / "model.safetensors").exists():
        folder.mkdir(parents=True, exist_ok=True)
        config = {"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2",
                  "num_hidden_layers": cfg.num_hidden_layers, **SHAPE}
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        ref.write_safetensors(str(folder / "model.safetensors"), ref.stored_names(cfg, w, False))
    params = sum(t.numel() for t in w.values())
    # Chunks of the prompt's length: the same numbers as 256 (the chunking is the scan's
    # arrangement, not its result) without padding 16 tokens to a 256-token chunk.
    cfg.chunk_size = len(tokens)
    with torch.no_grad():
        logits = ref.forward(cfg, w, tokens, ref.new_caches(cfg), 0).numpy()
    np.save(folder / "reference_logits.npy", logits)
    (folder / "reference.json").write_text(json.dumps({"tokens": tokens, "parameters": params}))
    del w
    gc.collect()


def check_logits(build, repo, folder, grpc, pb, pb_grpc):
    ref = json.loads((folder / "reference.json").read_text())
    want = np.load(folder / "reference_logits.npy")
    got = served_logits(build, repo, MODEL, ref["tokens"], grpc, pb, pb_grpc)
    return float(np.abs(got - want).max() / np.abs(want).max()), ref["parameters"]


def main():
    p = argument_parser(__doc__)
    p.set_defaults(precisions="fp32,bf16,int8", reps=2)
    args = p.parse_args()
    build = Path(args.build_dir).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-zamba2-")
    work = Path(args.workdir or tmp.name)
    repo = work / "repo"
    folder = repo / MODEL
    if not (folder / "reference.json").exists():
        write_folder(folder, random.Random(3).sample(range(SHAPE["vocab_size"]), 16))
    products, head, state, kv_bytes = shape(SHAPE)
    grpc, pb, pb_grpc = attnserve_stubs()
    cpu, peaks = cpu_description(), cpu_peaks(build) or {}
    read_gbs = peaks.get("read", {}).get("gbs_all")
    err, params = check_logits(build, repo, folder, grpc, pb, pb_grpc)
    print(f"{MODEL} (random weights, {params:,} parameters; 38 layers, 6 through the shared "
          f"block); CPU: {cpu['model']}, {cpu['cores']} cores; has {' '.join(cpu['flags'])}; "
          f"read bandwidth {read_gbs} GB/s\nfp32 logits of a 16-token prompt against "
          f"tests/golden/zamba2_reference.py's float64 forward: {err:.2e} of max |logit|\n"
          f"state of a session: {state / 2**20:.2f} MiB (Mamba-2 layers) + {kv_bytes} bytes a "
          f"token (KV of the 6 hybrid layers); at {SESSION_TOKENS} tokens x 1 / 16 / 64 "
          "sessions: " + " / ".join(f"{n * (state + SESSION_TOKENS * kv_bytes) / 2**20:.0f} MiB"
                                    for n in (1, 16, 64)) + "\n")
    report = {"cpu": cpu, "peaks": peaks, "shape": SHAPE, "logit_error": err, "rows": []}
    rng = random.Random(5)
    for precision in args.precisions.split(","):
        med, _, raw = measure_precision(
            build, None, repo, MODEL, folder, work, precision, args.reps, rng,
            lambda server: (grpc, pb, pb_grpc, server.target), SHAPE["vocab_size"])
        report["rows"].append(raw)
        b = BYTES[precision]
        peak = peaks.get(PRODUCT_PEAK[precision], {}).get("gops_all")
        flops = 2 * products + 2 * head / 512

        def decode_bound(n):
            # The slower of reading a step's bytes and computing its n rows.
            kv = n * SESSION_TOKENS / 2 * kv_bytes  # an average step's caches
            step = (products + head) * b + 2 * n * state + kv
            read_s = step / (read_gbs * 1e9) if read_gbs else None
            compute_s = n * 2 * (products + head) / (peak * 1e9) if peak else 0
            return n / max(read_s, compute_s) if read_s else None
        print(f"## {precision}: a step reads {(products + head) * b / 1e6:.0f} MB of weights "
              f"({flops / 1e9:.2f} GFLOP a prefilled token)")
        print("| test | attnserve tok/s | bound tok/s | share of bound |")
        print("|---|---|---|---|")
        bounds = {"pp512": peak * 1e9 / flops if peak else None, "tg128": decode_bound(1),
                  "16": decode_bound(16), "64": decode_bound(64)}
        for test, bound in bounds.items():
            name = {"16": "16 sessions", "64": "64 sessions"}.get(test, test)
            print(f"| {name} | {med[test]:.1f} | {bound:.1f} | {med[test] / bound:.2f} |"
                  if bound else f"| {name} | {med[test]:.1f} | - | - |", flush=True)
        print()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
