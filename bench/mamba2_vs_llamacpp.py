#!/usr/bin/python3
"""A Mamba-2 model served by attnserve against llama.cpp on the same folder, in one run.

One random-weight Hugging Face folder of mamba2-130m's shape (Mamba2ForCausalLM: 24 layers,
hidden 768, 24 heads of 64, d_state 128, one group, chunk 256, vocab 50280, tied; bf16 as
released), written by ../shared/hf_reference/make_hf_folder.py --shape mamba2-130m and converted
by llama.cpp's own converter (../shared/peers/llamacpp.sh). For each precision (fp32 / F32,
bf16 / BF16, bf16dot (bfloat16 activations too: vdpbf16ps, as llama.cpp's BF16) / BF16, int8 /
Q8_0), attnserve's and llama.cpp's sides alternating --reps times, medians:

  pp512        a unary Infer of 512 random tokens (prefix cache off) against llama-bench -p 512;
  tg128        one session appends 8 tokens and generates 128 greedily (attnserve_decode_bench
               over gRPC) against llama-bench -n 128;
  16 sessions  aggregate decode tok/s against llama-batched-bench S_TG at 16;
  64 sessions  attnserve's aggregate at 64 against its own one session (the issue: >= 8x).

Then, fp32 only, the prefill cost a token from 512 to 32768 tokens (one Infer each, the prefix
cache off; the issue: flat within 10%). Prints the CPU, its measured peaks (attnserve_cpu_peaks)
and each figure as a share of its bound: prefill at the products' FLOPs plus the SSD scan's at the
instruction's peak, decode at the bytes a step reads (weights once, plus every session's state:
the conv and SSM states read and written) at the read bandwidth.

  /usr/bin/python3 bench/mamba2_vs_llamacpp.py --build-dir build [--workdir DIR] [--reps 3]
      [--precisions fp32,bf16,bf16dot,int8] [--lengths 512,4096,32768] [--json FILE]
"""

import json
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from batched_decode import (GGUF_TYPE, PRECISION_FLAGS, PRODUCT_PEAK, Server,  # noqa: E402
                            cpu_description, cpu_peaks, run)
from bench_server import attnserve_stubs  # noqa: E402
from hf_folder_vs_llamacpp import (argument_parser, measure_precision,  # noqa: E402
                                   print_comparison)
from prefill_pp512 import attnserve_prefill  # noqa: E402
from llama_vs_llamacpp import LLAMA_PEAK  # noqa: E402

MODEL = "mamba2-130m"
BYTES = {"fp32": 4.0, "bf16": 2.0, "bf16dot": 2.0, "int8": 1.0 + 4.0 / 32}


def parse_args():
    p = argument_parser(__doc__)
    p.add_argument("--lengths", default="512,4096,32768")
    return p.parse_args()


def shape(c):
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    di, n, g, heads = c["expand"] * h, c["state_size"], c["n_groups"], c["num_heads"]
    conv_dim = di + 2 * g * n
    matrices = layers * (h * (di + conv_dim + heads) + di * h)  # in_proj, out_proj
    head = c["vocab_size"] * h
    # The SSD scan's multiply-adds a token (chunk Q): C·Bᵀ (Q·N/2 a group), M·x (Q·P/2 a head),
    # C·S (N·P a head), Bᵀ·x (N·P a head); the recurrence's alone would be 2·N·P a head.
    q, p = c.get("chunk_size", 256), di // heads
    scan = layers * (g * q * n / 2 + heads * (q * p / 2 + 2 * n * p))
    state = layers * (conv_dim * c["conv_kernel"] + di * n) * 4
    return matrices, head, scan, state


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-mamba2-")
    work = Path(args.workdir or tmp.name)
    repo = work / "repo"
    folder = repo / MODEL
    if not (folder / "config.json").exists():
        run(["/usr/bin/python3", Path(args.hf_reference) / "make_hf_folder.py", "--shape",
             "mamba2-130m", "--out", folder])
    config = json.loads((folder / "config.json").read_text())
    matrices, head, scan, state = shape(config)
    vocab = config["vocab_size"]
    grpc, pb, pb_grpc = attnserve_stubs()
    cpu, peaks = cpu_description(), cpu_peaks(build) or {}
    # The read bandwidth moves with the machine's other tenants (26 and 53 GB/s in two runs of
    # one hour): measured again at the end, the higher of the two is the bound.
    read_gbs = peaks.get("read", {}).get("gbs_all")
    print(f"{MODEL} (random weights, {config['num_hidden_layers']} layers, "
          f"{config['num_heads']} heads x {config['head_dim']}, d_state {config['state_size']}, "
          f"{config['n_groups']} group); CPU: {cpu['model']}, {cpu['cores']} cores; has "
          f"{' '.join(cpu['flags'])}; read bandwidth {read_gbs} GB/s; state {state / 2**20:.1f} "
          f"MiB a session\n")
    report = {"cpu": cpu, "peaks": peaks, "config": config, "rows": [], "lengths": {}}
    rng = random.Random(5)
    for precision in args.precisions.split(","):
        med, lmed, raw = measure_precision(
            build, script, repo, MODEL, folder, work, precision, args.reps, rng,
            lambda server: (grpc, pb, pb_grpc, server.target), vocab)
        weights = (matrices + head) * BYTES[precision]
        flops = 2 * matrices + 2 * head / 512 + 2 * scan
        peak = peaks.get(PRODUCT_PEAK[precision], {}).get("gops_all")
        lpeak = peaks.get(LLAMA_PEAK[precision], {}).get("gops_all")
        report["rows"].append(raw)
        print(f"## {precision} / {GGUF_TYPE[precision].upper()}: weights {weights / 1e6:.0f} MB a "
              f"step, state {state / 1e6:.1f} MB a session (read and written)")

        def decode_bound(n):
            return read_gbs * 1e9 / (weights + 2 * n * state) * n if read_gbs else None
        bounds = {"pp512": (peak * 1e9 / flops if peak else None,
                            lpeak * 1e9 / flops if lpeak else None),
                  "tg128": (decode_bound(1), decode_bound(1)),
                  "16": (decode_bound(16), decode_bound(16))}
        print_comparison(med, lmed, {"pp512": 2.5, "tg128": 1.5, "16": 3.0}, bounds)
        scale = med["64"] / med["tg128"]
        bound64 = decode_bound(64)
        share64 = f"{med['64'] / bound64:.2f}" if bound64 else "-"
        print(f"| 64 sessions | {med['64']:.1f} | - | **{scale:.2f}x one session** | >= 8x "
              f"{'met' if scale >= 8 else 'MISSED'} | "
              f"{share64} | - |\n")
    again = (cpu_peaks(build) or {}).get("read", {}).get("gbs_all")
    if again and read_gbs and again > read_gbs:
        print(f"read bandwidth at the end: {again} GB/s (at the start {read_gbs}): against it, "
              f"the decode shares above are {read_gbs / again:.2f}x what they say\n")
    report["read_gbs_end"] = again
    lengths = [int(n) for n in args.lengths.split(",") if n]
    if lengths:
        server = Server(build, f"--model_repository={repo}", f"--policy={MODEL}",
                        "--prefix_cache_bytes=0", *PRECISION_FLAGS["fp32"])
        try:
            stubs = (grpc, pb, pb_grpc, server.target)
            print("## fp32 prefill cost a token by prompt length (one Infer each, median of 3 "
                  "at 512 and 4096, 1 beyond)")
            print("| tokens | tok/s | µs a token | vs 512 |")
            print("|---|---|---|---|")
            first = None
            for n in lengths:
                rate = attnserve_prefill(stubs, n, 3 if n <= 4096 else 1, rng, MODEL, vocab)
                first = first or rate
                report["lengths"][n] = rate
                print(f"| {n} | {rate:.0f} | {1e6 / rate:.1f} | {first / rate:.3f}x |", flush=True)
        finally:
            server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
