#!/usr/bin/python3
"""The 2025 Mamba-2 hybrids served by attnserve against llama.cpp on the same folder, in one run:
a Granite-4.0-H-350M-shaped folder and a Falcon-H1-Tiny-90M-shaped one (issue #52).

  granite-4.0-h-350m  ../shared/hf_reference/make_hf_folder.py --shape granite-4.0-h-350m --dtype
                      f32 (GraniteMoeHybridForCausalLM: 32 layers, attention without positions at
                      10, 13, 17, 27, Mamba-2 48 heads x 32 with d_state 128 elsewhere, hidden 768,
                      12 / 4 heads, shared MLP 2048, vocab 100352, tied; the shape's sources are in
                      that script)
  falcon-h1-tiny-90m  make_hf_folder.py --arch falcon_h1 --no-ref with the issue's shape (hidden
                      512, 24 layers, 8 / 2 heads of 64, 24 Mamba heads) and, assumed (no config.json
                      of the model was found; Falcon-H1-0.5B's ratios scaled to 512 wide): Mamba heads
                      of 32 (mamba_d_ssm 768), d_state 128, one group, MLP 1024, vocab 32784, untied,
                      no gated norm (mamba_rms_norm false), the tiny golden folder's multipliers

Random float32 weights. First attnserve's fp32 logits of a 16-token prompt against attnserve's
own float64 port of the upstream file (tests/golden/granite_reference.py,
falcon_nemotron_reference.py). Then, per precision, bench/hf_folder_vs_llamacpp.py's measurement
(pp512, tg128, 16 sessions against llama-bench / llama-batched-bench S_TG; 64 sessions alone),
and the time to first token of a 4096-token prompt: one unary Infer (last logits, prefix cache
off) against 4096 / llama-bench's pp4096 tok/s. Bounds (attnserve_cpu_peaks, this run): prefill
at the products' FLOPs a token (every weight matrix once; the head for the last token only; the
scan and attention scores left out, so the share is an upper estimate) at the instruction's
peak; decode at the bytes a step reads (every matrix, each session's Mamba-2 states read and
written and its KV cache read, at 136 tokens) at the read bandwidth.

  /usr/bin/python3 bench/hybrid_vs_llamacpp.py --shape granite-4.0-h-350m --build-dir build
      [--workdir DIR] [--reps 2] [--precisions fp32,bf16,int8] [--json FILE]
"""

import json
import random
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "golden"))
from batched_decode import (GGUF_TYPE, PRECISION_FLAGS, PRODUCT_PEAK,  # noqa: E402
                            Server, cpu_description, cpu_peaks, run)
from bench_server import attnserve_stubs  # noqa: E402
from hf_folder_vs_llamacpp import (argument_parser, measure_precision,  # noqa: E402
                                   print_comparison, served_logits)
from llama_vs_llamacpp import LLAMA_PEAK  # noqa: E402
from prefill_pp512 import llama_pp  # noqa: E402

BYTES = {"fp32": 4.0, "bf16": 2.0, "bf16dot": 2.0, "int8": 1.0 + 4.0 / 32}
SESSION_TOKENS = 136  # a decode_bench session: 8 appended + 128 generated
TTFT_TOKENS = 4096
FALCON_H1_TINY = {"hidden_size": 512, "num_hidden_layers": 24, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "head_dim": 64, "mamba_n_heads": 24,
                  "mamba_d_head": 32, "mamba_d_ssm": 768, "mamba_d_state": 128,
                  "mamba_n_groups": 1, "mamba_chunk_size": 256, "intermediate_size": 1024,
                  "vocab_size": 32784, "tie_word_embeddings": False, "mamba_rms_norm": False,
                  "max_position_embeddings": 16384}


def parse_args():
    p = argument_parser(__doc__)
    p.add_argument("--shape", choices=("granite-4.0-h-350m", "falcon-h1-tiny-90m"),
                   required=True)
    p.set_defaults(reps=2, precisions="fp32,bf16,int8")
    return p.parse_args()


def write_folder(shape, folder, hf_reference):
    script = Path(hf_reference) / "make_hf_folder.py"
    if shape == "granite-4.0-h-350m":
        run(["/usr/bin/python3", script, "--shape", shape, "--dtype", "f32", "--out", folder])
    else:
        sets = [a for k, v in FALCON_H1_TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]
        run(["/usr/bin/python3", script, "--arch", "falcon_h1", "--no-ref", "--out", folder, *sets])


def matrix_elements(folder, config):
    """Elements of every weight matrix a token's products read (the embedding table apart, but
    for a tied head), and of the head."""
    with open(folder / "model.safetensors", "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    total, head = 0, 0
    for name, entry in header.items():
        if name == "__metadata__" or len(entry["shape"]) < 2:
            continue
        n = int(np.prod(entry["shape"]))
        if "embed_tokens" in name:
            head = n if config.get("tie_word_embeddings") else head
            continue
        if name == "lm_head.weight":
            head = n
            continue
        total += n
    return total, head


def own_float64_logits(config, folder, tokens):
    import torch
    from granite_reference import load_safetensors
    if config["model_type"] == "falcon_h1":
        from falcon_nemotron_reference import forward
    else:
        from granite_reference import forward
    torch.set_num_threads(2)
    w = load_safetensors(str(folder / "model.safetensors"))
    return forward(config, w, tokens).numpy()


def state_sizes(build, repo, model, grpc, pb, pb_grpc):
    server = Server(build, f"--model_repository={repo}", f"--policy={model}")
    try:
        with grpc.insecure_channel(server.target) as channel:
            info = pb_grpc.AttnServeStub(channel).GetModel(pb.GetModelRequest(name=model),
                                                           timeout=60)
            return info.state_bytes_per_session, info.state_bytes_per_token
    finally:
        server.stop()


def attnserve_ttft(build, repo, model, precision, rng, vocab, grpc, pb, pb_grpc, reps):
    server = Server(build, f"--model_repository={repo}", f"--policy={model}",
                    "--prefix_cache_bytes=0", *PRECISION_FLAGS[precision])
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.AttnServeStub(channel)
            times = []
            for _ in range(reps):
                request = pb.InferRequest(
                    model=model, tokens=[rng.randrange(1, vocab) for _ in range(TTFT_TOKENS)],
                    output=pb.OutputSpec(kind=pb.OUTPUT_KIND_TOP_K, top_k=5))
                start = time.perf_counter()
                stub.Infer(request, timeout=900)
                times.append(time.perf_counter() - start)
            return statistics.median(times)
    finally:
        server.stop()


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-hybrid-")
    work = Path(args.workdir or tmp.name)
    model = args.shape
    repo = work / "repo"
    folder = repo / model
    if not (folder / "config.json").exists():
        write_folder(args.shape, folder, args.hf_reference)
    config = json.loads((folder / "config.json").read_text())
    vocab = config["vocab_size"]
    products, head = matrix_elements(folder, config)
    grpc, pb, pb_grpc = attnserve_stubs()
    cpu, peaks = cpu_description(), cpu_peaks(build) or {}
    read_gbs = peaks.get("read", {}).get("gbs_all")
    tokens = random.Random(3).sample(range(1, vocab), 16)
    want = own_float64_logits(config, folder, tokens)
    got = served_logits(build, repo, model, tokens, grpc, pb, pb_grpc)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    state, kv_token = state_sizes(build, repo, model, grpc, pb, pb_grpc)
    session = state + SESSION_TOKENS * kv_token
    print(f"{model} ({config['architectures'][0]}, random weights, "
          f"{products + head:,} matrix elements with the head); CPU: {cpu['model']}, "
          f"{cpu['cores']} cores; has {' '.join(cpu['flags'])}; read bandwidth {read_gbs} GB/s\n"
          f"fp32 logits of a 16-token prompt against attnserve's own float64 port: {err:.2e} of "
          f"max |logit|\nstate of a session: {state / 2**20:.2f} MiB + {kv_token} bytes a token "
          f"(KV); at {SESSION_TOKENS} tokens x 1 / 16 / 64 sessions: "
          + " / ".join(f"{n * session / 2**20:.1f} MiB" for n in (1, 16, 64)) + "\n", flush=True)
    report = {"cpu": cpu, "peaks": peaks, "config": config, "logit_error": err, "rows": []}
    rng = random.Random(5)
    for precision in args.precisions.split(","):
        med, lmed, raw = measure_precision(
            build, script, repo, model, folder, work, precision, args.reps, rng,
            lambda server: (grpc, pb, pb_grpc, server.target), vocab)
        ttft = attnserve_ttft(build, repo, model, precision, rng, vocab, grpc, pb, pb_grpc, 2)
        gguf = work / f"{model}-{GGUF_TYPE[precision]}.gguf"
        llama_ttft = TTFT_TOKENS / llama_pp(script, gguf, TTFT_TOKENS, 2)
        raw.update({"ttft_4096_s": ttft, "llama_ttft_4096_s": llama_ttft})
        report["rows"].append(raw)
        b = BYTES[precision]
        flops = 2 * products + 2 * head / 512
        peak = peaks.get(PRODUCT_PEAK[precision], {}).get("gops_all")
        lpeak = peaks.get(LLAMA_PEAK[precision], {}).get("gops_all")

        def decode_bound(n):
            step = (products + head) * b + n * (2 * state + SESSION_TOKENS * kv_token)
            return read_gbs * 1e9 / step * n if read_gbs else None
        print(f"## {precision} / {GGUF_TYPE[precision].upper()}: a step reads "
              f"{(products + head) * b / 1e6:.0f} MB of weights")
        bounds = {"pp512": (peak * 1e9 / flops if peak else None,
                            lpeak * 1e9 / flops if lpeak else None),
                  "tg128": (decode_bound(1), decode_bound(1)),
                  "16": (decode_bound(16), decode_bound(16)), "64": (decode_bound(64), None)}
        print_comparison(med, lmed, {"pp512": 2.0, "tg128": 1.3, "16": 3.0}, bounds)
        print(f"| TTFT of {TTFT_TOKENS} tokens | {ttft:.2f} s | {llama_ttft:.2f} s | "
              f"**{llama_ttft / ttft:.2f}x** | - | - | - |\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
