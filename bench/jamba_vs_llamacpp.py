#!/usr/bin/python3
"""A Jamba model (Mamba-1 + GQA attention + mixture of experts) served by attnserve against
llama.cpp on the same folder, in one run.

One random-weight JambaForCausalLM folder of ai21labs/Jamba-tiny-dev's shape (its published
config.json: hidden 512, 16 layers, attention at 4 and 12 (8 query / 2 KV heads, no positions),
Mamba-1 elsewhere (d_state 16, conv 4, expand 2, dt_rank 32), 8 experts of 2048 top-2 on the odd
layers and dense SwiGLU 2048 on the even ones, vocab 65536, untied: 318,688,640 parameters),
written by transformers v4.47.1 itself (../shared/hf_reference/make_ref.py --arch jamba --set
...: float32, with its float64 logits of a 16-token prompt, which this checks attnserve against
first) and converted by llama.cpp's own converter. For each precision, the measurement of
hf_folder_vs_llamacpp.py (pp512, tg128, 16 sessions against llama.cpp; 64 sessions on our own),
then each figure as a share of its bound: prefill at the active products' FLOPs (2 of 8 experts
a token) at the instruction's measured peak, decode at the bytes a step reads (every dense
matrix once, each MoE layer's experts that the step's rows chose: E·(1 - (1 - k/E)^n) expected
of E for n rows routed uniformly, the sessions' Mamba states read and written) at the measured
read bandwidth. Prints the CPU and the memory of a session.

  /usr/bin/python3 bench/jamba_vs_llamacpp.py --build-dir build [--workdir DIR] [--reps 3]
      [--precisions fp32,bf16,bf16dot,int8] [--json FILE]
"""

import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from batched_decode import (GGUF_TYPE, PRODUCT_PEAK,  # noqa: E402
                            cpu_description, cpu_peaks, run)
from bench_server import attnserve_stubs  # noqa: E402
from hf_folder_vs_llamacpp import (argument_parser, measure_precision,  # noqa: E402
                                   print_comparison, served_logits)
from llama_vs_llamacpp import LLAMA_PEAK  # noqa: E402

MODEL = "jamba-tiny-dev"
BYTES = {"fp32": 4.0, "bf16": 2.0, "bf16dot": 2.0, "int8": 1.0 + 4.0 / 32}
# Jamba-tiny-dev's config.json, as the keys make_ref.py sets (its tiny config otherwise).
SHAPE = {"vocab_size": 65536, "hidden_size": 512, "intermediate_size": 2048,
         "num_hidden_layers": 16, "num_attention_heads": 8, "num_key_value_heads": 2,
         "num_experts": 8, "num_experts_per_tok": 2, "expert_layer_period": 2,
         "expert_layer_offset": 1, "attn_layer_period": 8, "attn_layer_offset": 4,
         "mamba_dt_rank": 32, "max_position_embeddings": 262144}


def parse_args():
    p = argument_parser(__doc__)
    return p.parse_args()


def shape(c):
    """Elements of the products a token runs (dense ones, one expert's, the head), the MoE layer
    count, and the state bytes of a session (the Mamba layers'; KV grows by kv_bytes a token)."""
    h, layers, ff = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    attn = [i for i in range(layers) if i % c["attn_layer_period"] == c["attn_layer_offset"]]
    moe = [i for i in range(layers) if i % c["expert_layer_period"] == c["expert_layer_offset"]]
    di, n, r = c.get("mamba_expand", 2) * h, c.get("mamba_d_state", 16), c["mamba_dt_rank"]
    hd, kv = h // c["num_attention_heads"], c["num_key_value_heads"]
    mamba = h * 2 * di + di * (r + 2 * n) + r * di + di * h
    attention = h * h + 2 * h * kv * hd + h * h
    dense = (len(attn) * attention + (layers - len(attn)) * mamba
             + (layers - len(moe)) * 3 * h * ff + len(moe) * h * c["num_experts"])
    expert = 3 * h * ff
    state = (layers - len(attn)) * di * (c.get("mamba_d_conv", 4) + n) * 4
    kv_bytes = len(attn) * 2 * kv * hd * 4
    return dense, expert, len(moe), c["vocab_size"] * h, state, kv_bytes


def check_logits(build, repo, folder, grpc, pb, pb_grpc):
    """attnserve's logits of the folder's prompt against transformers' float64 ones."""
    ref = json.loads((folder / "reference.json").read_text())
    want = np.load(folder / "logits_all.npy")
    got = served_logits(build, repo, MODEL, ref["tokens"], grpc, pb, pb_grpc)
    return float(np.abs(got - want).max() / np.abs(want).max())


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-jamba-")
    work = Path(args.workdir or tmp.name)
    repo = work / "repo"
    folder = repo / MODEL
    if not (folder / "config.json").exists():
        sets = [a for k, v in SHAPE.items() for a in ("--set", f"{k}={json.dumps(v)}")]
        run(["/usr/bin/python3", Path(args.hf_reference) / "make_ref.py", "--arch", "jamba",
             "--out", folder, "--tokens", "16", "--gen", "2", *sets])
    config = json.loads((folder / "config.json").read_text())
    dense, expert, moe_layers, head, state, kv_bytes = shape(config)
    e, k = config["num_experts"], config["num_experts_per_tok"]
    vocab = config["vocab_size"]
    grpc, pb, pb_grpc = attnserve_stubs()
    cpu, peaks = cpu_description(), cpu_peaks(build) or {}
    read_gbs = peaks.get("read", {}).get("gbs_all")
    err = check_logits(build, repo, folder, grpc, pb, pb_grpc)
    print(f"{MODEL} (random weights; {config['num_hidden_layers']} layers, {e} experts top-{k} on "
          f"{moe_layers}); CPU: {cpu['model']}, {cpu['cores']} cores; has "
          f"{' '.join(cpu['flags'])}; read bandwidth {read_gbs} GB/s\n"
          f"fp32 logits of the 16-token prompt against transformers' float64: {err:.2e} of max "
          f"|logit|\nstate of a session: {state / 2**20:.2f} MiB (Mamba layers) + "
          f"{kv_bytes} bytes a token (KV, 2 KV heads); at 136 tokens x 1 / 16 / 64 sessions: "
          + " / ".join(f"{n * (state + 136 * kv_bytes) / 2**20:.1f} MiB" for n in (1, 16, 64))
          + "\n")
    report = {"cpu": cpu, "peaks": peaks, "config": config, "logit_error": err, "rows": []}
    rng = random.Random(5)
    for precision in args.precisions.split(","):
        med, lmed, raw = measure_precision(
            build, script, repo, MODEL, folder, work, precision, args.reps, rng,
            lambda server: (grpc, pb, pb_grpc, server.target), vocab)
        report["rows"].append(raw)
        b = BYTES[precision]
        flops = 2 * (dense + k * moe_layers * expert) + 2 * head / 512
        peak = peaks.get(PRODUCT_PEAK[precision], {}).get("gops_all")
        lpeak = peaks.get(LLAMA_PEAK[precision], {}).get("gops_all")

        def decode_bound(n):
            experts_read = e * (1 - (1 - k / e) ** n)
            step = (dense + head + moe_layers * experts_read * expert) * b + 2 * n * state
            return read_gbs * 1e9 / step * n if read_gbs else None
        print(f"## {precision} / {GGUF_TYPE[precision].upper()}: a step reads "
              f"{(dense + head + moe_layers * k * expert) * b / 1e6:.0f} MB of weights at one "
              f"session, {(dense + head + moe_layers * e * expert) * b / 1e6:.0f} MB with every "
              f"expert")
        bounds = {"pp512": (peak * 1e9 / flops if peak else None,
                            lpeak * 1e9 / flops if lpeak else None),
                  "tg128": (decode_bound(1), decode_bound(1)),
                  "16": (decode_bound(16), decode_bound(16)), "64": (decode_bound(64), None)}
        print_comparison(med, lmed, {"pp512": 2.0, "tg128": 1.3, "16": 3.0}, bounds)
        print(flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
