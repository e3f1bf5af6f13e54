#!/usr/bin/python3
"""A Llama-architecture model served by attnserve against llama.cpp on the same folder.

One random-weight Hugging Face folder of SmolLM-135M's shape (LlamaForCausalLM: 30 layers,
hidden 576, 9 query heads over 3 key/value heads, head_dim 64, RoPE theta 1e4, SwiGLU 1536,
vocab 49152, tied; bf16 as released), written by ../shared/hf_reference/make_hf_folder.py
--shape smollm-135m and converted by llama.cpp's own converter (../shared/peers/llamacpp.sh).
For each precision (fp32 / F32, bf16 / BF16, int8 / Q8_0), in one run, attnserve's and
llama.cpp's sides alternating:

  pp512      a unary Infer of 512 random tokens (prefix cache off), median of --reps, against
             llama-bench -p 512;
  tg128      one session appends 8 tokens and generates 128 greedily (attnserve_decode_bench
             over gRPC) against llama-bench -n 128;
  d4096      the same after a 4096-token prompt against llama-bench -n 128 -d 4096 (the
             folder's max_position_embeddings raised from 2048 to fit: no logit changes);
  16 sessions  aggregate decode tok/s against llama-batched-bench S_TG at 16.

Prints the CPU, the measured peaks (attnserve_cpu_peaks) and each figure as a share of its
bound: prefill at the products' FLOPs at the instruction's peak, decode at the bytes a step
reads (weights and the session's KV cache) at the read bandwidth. The KV cache's bytes a token
come from GetModel (the issue: 2 x layers x KV heads x head_dim x element size).

  /usr/bin/python3 bench/llama_vs_llamacpp.py --build-dir build [--workdir DIR] [--reps 3]
      [--precisions fp32,bf16,int8] [--json FILE]
"""

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from batched_decode import (GGUF_TYPE, PRECISION_FLAGS, PRODUCT_PEAK, Server,  # noqa: E402
                            cpu_description, cpu_peaks, decode_bench, llama_batched, run)
from bench_server import attnserve_stubs  # noqa: E402
from prefill_pp512 import attnserve_prefill, llama_pp  # noqa: E402

MODEL = "smollm-135m"
BYTES = {"fp32": 4.0, "bf16": 2.0, "bf16dot": 2.0, "int8": 1.0 + 4.0 / 32}
LLAMA_PEAK = {"fp32": "fp32 FMA", "bf16": "bf16 dot", "bf16dot": "bf16 dot", "int8": "int8 dot"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--llamacpp", default=str(REPO.parent / "shared" / "peers" / "llamacpp.sh"))
    p.add_argument("--hf-reference", default=str(REPO.parent / "shared" / "hf_reference"))
    p.add_argument("--precisions", default="fp32,bf16,int8")
    p.add_argument("--workdir", default="")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--depth", type=int, default=4096)
    p.add_argument("--kv-bf16", action="store_true",
                   help="bfloat16 KV caches (--kv_cache_precision=bf16) for the precisions other "
                        "than fp32: llama-bench keeps its KV cache in F16 by default")
    p.add_argument("--json", metavar="FILE")
    return p.parse_args()


def matrix_elements(c):
    """Elements of one token's weight matrices: (per layer, lm_head)."""
    h, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // heads
    layer = h * heads * d * 2 + h * kv * d * 2 + 3 * h * c["intermediate_size"]
    return layer, c["vocab_size"] * h


def llama_bench(script, gguf, *flags):
    out = run([script, "bench", gguf, *flags]).stdout
    results = json.loads(out[out.index("["):out.rindex("]") + 1])
    return next(r["avg_ts"] for r in results if r.get("n_gen") == 128)


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-llama-")
    work = Path(args.workdir or tmp.name)
    repo = work / "repo"
    folder = repo / MODEL
    if not (folder / "config.json").exists():
        run(["/usr/bin/python3", Path(args.hf_reference) / "make_hf_folder.py", "--shape",
             "smollm-135m", "--out", folder])
    config = json.loads((folder / "config.json").read_text())
    # SmolLM's trained context is 2048 (max_position_embeddings, which attnserve enforces); the
    # depth test needs depth + 128 positions. Default RoPE does not read the field, so raising
    # it changes no logit; both sides load the same folder.
    if config["max_position_embeddings"] < args.depth + 256:
        config["max_position_embeddings"] = args.depth + 256
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    layer, head = matrix_elements(config)
    layers, vocab = config["num_hidden_layers"], config["vocab_size"]
    grpc, pb, pb_grpc = attnserve_stubs()
    cpu, peaks = cpu_description(), cpu_peaks(build) or {}
    read_gbs = peaks.get("read", {}).get("gbs_all")
    print(f"{MODEL} (random weights, {layers} layers, {config['num_attention_heads']}/"
          f"{config['num_key_value_heads']} heads); CPU: {cpu['model']}, {cpu['cores']} cores; "
          f"has {' '.join(cpu['flags'])}; read bandwidth {read_gbs} GB/s\n")
    report = {"cpu": cpu, "peaks": peaks, "config": config, "rows": []}
    rng = random.Random(5)
    for precision in args.precisions.split(","):
        gguf = work / f"{MODEL}-{GGUF_TYPE[precision]}.gguf"
        if not gguf.exists():
            run([script, "convert", folder, gguf, GGUF_TYPE[precision]])
        ours = {"pp512": [], "tg128": [], "d4096": [], "16": []}
        theirs = {"pp512": [], "tg128": [], "d4096": [], "16": []}
        kv_bytes = None
        for _ in range(args.reps):
            kv_flags = ["--kv_cache_precision=bf16"] if args.kv_bf16 and precision != "fp32" else []
            server = Server(build, f"--model_repository={repo}", f"--policy={MODEL}",
                            "--prefix_cache_bytes=0", *PRECISION_FLAGS[precision], *kv_flags)
            try:
                stubs = (grpc, pb, pb_grpc, server.target)
                ours["pp512"].append(attnserve_prefill(stubs, 512, 3, rng, MODEL, vocab))
                one = decode_bench(build, server.target, MODEL, "1,16", 8, 128, vocab)
                ours["tg128"].append(one[1]["aggregate_tok_s"])
                ours["16"].append(one[16]["aggregate_tok_s"])
                deep = decode_bench(build, server.target, MODEL, "1", args.depth, 128, vocab)
                ours["d4096"].append(deep[1]["aggregate_tok_s"])
                with grpc.insecure_channel(server.target) as channel:
                    info = pb_grpc.AttnServeStub(channel).GetModel(
                        pb.GetModelRequest(name=MODEL), timeout=60)
                    kv_bytes = info.state_bytes_per_token
            finally:
                server.stop()
            theirs["pp512"].append(llama_pp(script, gguf, 512, 3))
            theirs["tg128"].append(llama_bench(script, gguf, "-p", "0", "-n", "128"))
            theirs["d4096"].append(llama_bench(script, gguf, "-p", "0", "-n", "128", "-d",
                                               str(args.depth)))
            theirs["16"].append(llama_batched(script, gguf, "16", "8", "128")[16]["S_TG"])
        med = {k: statistics.median(v) for k, v in ours.items()}
        lmed = {k: statistics.median(v) for k, v in theirs.items()}
        weights = (layers * layer + head) * BYTES[precision]
        flops = 2 * (layers * layer) + 2 * head / 512 + 4 * layers * config["num_attention_heads"] \
            * (config.get("head_dim") or 64) * 256  # attention over 256 keys on average
        peak = peaks.get(PRODUCT_PEAK[precision], {}).get("gops_all")
        lpeak = peaks.get(LLAMA_PEAK[precision], {}).get("gops_all")
        row = {"precision": precision, "ours": ours, "llama": theirs, "kv_bytes_per_token": kv_bytes,
               "weight_bytes": weights}
        report["rows"].append(row)
        element = 2 if args.kv_bf16 and precision != "fp32" else 4
        print(f"## {precision} / {GGUF_TYPE[precision].upper()}: KV cache {kv_bytes} bytes a token "
              f"(2 x {layers} x {config['num_key_value_heads']} x 64 x {element} = "
              f"{2 * layers * config['num_key_value_heads'] * 64 * element}); weights "
              f"{weights / 1e6:.0f} MB a step; llama.cpp's KV cache F16")
        print("| test | attnserve tok/s | llama.cpp tok/s | ratio | target | attnserve / bound | "
              "llama.cpp / bound |")
        print("|---|---|---|---|---|---|---|")
        targets = {"pp512": 1.5, "tg128": 1.2, "d4096": 1.2, "16": 3.0}
        for test in ("pp512", "tg128", "d4096", "16"):
            if test == "pp512":
                bound = peak * 1e9 / flops if peak else None
                lbound = lpeak * 1e9 / flops if lpeak else None
            else:
                kv = (args.depth if test == "d4096" else 72) * (kv_bytes or 0)
                rows = 16 if test == "16" else 1
                bound = lbound = (read_gbs * 1e9 / (weights + rows * kv) * rows
                                  if read_gbs else None)
            ratio = med[test] / lmed[test]
            share = f"{med[test] / bound:.2f}" if bound else "-"
            lshare = f"{lmed[test] / lbound:.2f}" if lbound else "-"
            name = {"16": "16 sessions (S_TG)", "d4096": f"tg128 at depth {args.depth}"}.get(
                test, test)
            print(f"| {name} | {med[test]:.1f} | {lmed[test]:.1f} | **{ratio:.2f}x** | "
                  f">= {targets[test]}x {'met' if ratio >= targets[test] else 'MISSED'} | "
                  f"{share} | {lshare} |", flush=True)
        print()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
