#!/usr/bin/python3
"""Prefill of 512 tokens: attnserve through gRPC against llama-bench pp512, same checkpoint,
same run (issue #25: "Prefill pp512 stays at least 2.5x llama.cpp's").

On the random-weight mamba-130m-shaped folder of bench/batched_decode.py, for each precision
(fp32 / F32, bf16 / BF16, bf16dot / BF16, int8 / Q8_0):

  attnserve   attnserve-server --model_repository, the prefix cache off (no prompt reuses
              another's state); unary Infer of 512 fresh random tokens, the last token's top 5
              (so that the reply is small and the lm_head runs once, as llama-bench's prompt
              processing computes the last token's logits); --reps timed requests after one
              warm-up; tokens/s of the median;
  llama.cpp   ../shared/peers/llamacpp.sh bench GGUF -p 512 -n 0 -r --reps: avg_ts.

The two sides alternate (attnserve, llama.cpp, attnserve) so that a drifting machine slows
both; attnserve's figure is the mean of its two medians. Each figure is also given as a
fraction of its compute bound: the products' FLOPs per token (2 x the weights of the 24 layers'
in_proj, x_proj, dt_proj and out_proj; the lm_head once per prompt) at the 2-thread peak of the
instruction its products run on, measured here by attnserve_cpu_peaks (fp32 FMA for fp32 and
for bf16 weights with float32 activations; vdpbf16ps for bf16 activations and llama.cpp's BF16;
vpdpbusd for int8 and Q8_0); where that tool is missing, torch.mm's fp32 rate (4096x4096) for
all. Prints the CPU and the ratios.

  /usr/bin/python3 bench/prefill_pp512.py --build-dir build [--precisions fp32,bf16,int8]
      [--workdir DIR] [--reps 5]
"""

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from batched_decode import (GGUF_TYPE, MAMBA_130M_CONFIG, MODEL, PRECISION_FLAGS,  # noqa: E402
                            PRODUCT_PEAK, cpu_peaks,
                            Server, cpu_description, mamba_130m_repository, run)
from bench_server import attnserve_stubs  # noqa: E402


# The instruction llama.cpp's products run on for each GGUF type (its BF16 rounds activations).
LLAMA_PEAK = {"fp32": "fp32 FMA", "bf16": "bf16 dot", "bf16dot": "bf16 dot", "int8": "int8 dot"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--llamacpp", default=str(REPO.parent / "shared" / "peers" / "llamacpp.sh"))
    p.add_argument("--precisions", default="fp32,bf16,bf16dot,int8")
    p.add_argument("--workdir", default="", help="keep the model folder and GGUFs here")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tokens", type=int, default=512)
    return p.parse_args()


def fp32_peak_gflops():
    """Best of 5 float32 4096x4096 products on 2 threads (/usr/bin/python3's torch)."""
    code = ("import time, torch; torch.set_num_threads(2); a = torch.randn(4096, 4096); "
            "b = torch.randn(4096, 4096); a @ b; "
            "t = min((lambda s: (a @ b, time.perf_counter() - s)[1])(time.perf_counter()) "
            "for _ in range(5)); print(2 * 4096 ** 3 / t / 1e9)")
    return float(run(["/usr/bin/python3", "-c", code]).stdout)


def prefill_flops_per_token(config, tokens):
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    di, n = config["expand"] * h, config["state_size"]
    r = (h + 15) // 16
    per_layer = 2 * di * h + (r + 2 * n) * di + r * di + di * h
    return 2.0 * layers * per_layer + 2.0 * config["vocab_size"] * h / tokens


def attnserve_prefill(stubs, tokens, reps, rng, model=MODEL, vocab=50000):
    grpc, pb, pb_grpc, target = stubs
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.AttnServeStub(channel)

        def once():
            request = pb.InferRequest(model=model,
                                      tokens=[rng.randrange(1, vocab) for _ in range(tokens)],
                                      output=pb.OutputSpec(kind=pb.OUTPUT_KIND_TOP_K, top_k=5))
            start = time.perf_counter()
            stub.Infer(request, timeout=600)
            return time.perf_counter() - start

        once()  # warm-up
        return tokens / statistics.median(once() for _ in range(reps))


def llama_pp(script, gguf, tokens, reps):
    import json
    out = run([script, "bench", gguf, "-p", tokens, "-n", "0", "-r", reps]).stdout
    results = json.loads(out[out.index("["):out.rindex("]") + 1])
    return next(r["avg_ts"] for r in results if r.get("n_prompt") == tokens)


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    if not script.is_file():
        sys.exit(f"prefill_pp512: {script} not found (the peer is needed for the comparison)")
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-pp512-")
    work = Path(args.workdir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    repo = mamba_130m_repository(build, work)
    grpc, pb, pb_grpc = attnserve_stubs()
    rng = random.Random(5)
    cpu = cpu_description()
    peaks = cpu_peaks(build) or {}
    fallback = fp32_peak_gflops() if not peaks else None
    flops = prefill_flops_per_token(MAMBA_130M_CONFIG, args.tokens)

    def bound(instruction):  # tokens/s with every product at the instruction's 2-thread peak
        gops = peaks[instruction]["gops_all"] if instruction in peaks else fallback
        return gops * 1e9 / flops

    print(f"{MODEL} (random weights), prefill of {args.tokens} tokens, 2 threads; CPU: "
          f"{cpu['model']}, {cpu['cores']} cores; has {' '.join(cpu['flags'])}")
    print(f"{flops / 1e6:.0f} MFLOP a token in the products; bounds: "
          + (", ".join(f"{name} {bound(name):.0f} tok/s" for name in sorted(set(
              PRODUCT_PEAK.values()))) if peaks else
             f"torch.mm fp32 {fallback:.0f} GFLOP/s, {bound('fp32 FMA'):.0f} tok/s") + "\n")
    print("| precision | attnserve (tok/s) | llama.cpp pp512 (tok/s) | attnserve / llama.cpp | "
          "attnserve / its bound | llama.cpp / its bound |")
    print("|---|---|---|---|---|---|")
    for precision in args.precisions.split(","):
        gguf = work / f"{MODEL}-{GGUF_TYPE[precision]}.gguf"
        if not gguf.exists():
            run([script, "convert", repo / MODEL, gguf, GGUF_TYPE[precision]])
        ours = []
        llama = None
        for turn in ("attnserve", "llama", "attnserve"):
            if turn == "llama":
                llama = llama_pp(script, gguf, args.tokens, args.reps)
                continue
            server = Server(build, f"--model_repository={repo}", f"--policy={MODEL}",
                            "--prefix_cache_bytes=0", *PRECISION_FLAGS[precision])
            try:
                ours.append(attnserve_prefill((grpc, pb, pb_grpc, server.target), args.tokens,
                                              args.reps, rng))
            finally:
                server.stop()
        mean = sum(ours) / len(ours)
        ours_bound, llama_bound = bound(PRODUCT_PEAK[precision]), bound(LLAMA_PEAK[precision])
        print(f"| {precision} / {GGUF_TYPE[precision].upper()} | {mean:.0f} "
              f"({ours[0]:.0f}, {ours[1]:.0f}) | {llama:.0f} | {mean / llama:.2f}x | "
              f"{mean / ours_bound:.2f} | {llama / llama_bound:.2f} |", flush=True)


if __name__ == "__main__":
    main()
