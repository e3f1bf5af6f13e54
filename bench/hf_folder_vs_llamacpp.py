"""One Hugging Face folder served by attnserve against llama.cpp on the same folder, in one run:
the measurement the per-family benchmarks share (bench/mamba2_vs_llamacpp.py,
bench/jamba_vs_llamacpp.py), which add the model's shape and bounds.

For one precision (fp32 / F32, bf16 / BF16, bf16dot / BF16, int8 / Q8_0): the folder converted
by llama.cpp's own converter (../shared/peers/llamacpp.sh), then attnserve's and llama.cpp's
sides alternating `reps` times:

  pp512        a unary Infer of 512 random tokens (prefix cache off) against llama-bench -p 512;
  tg128        one session appends 8 tokens and generates 128 greedily (attnserve_decode_bench
               over gRPC) against llama-bench -n 128;
  16 sessions  aggregate decode tok/s against llama-batched-bench S_TG at 16;
  N sessions   attnserve's aggregate at each other N of `sessions` (no peer figure).
"""

import argparse
import statistics
from pathlib import Path

from batched_decode import GGUF_TYPE, PRECISION_FLAGS, Server, decode_bench, llama_batched, run
from llama_vs_llamacpp import llama_bench
from prefill_pp512 import attnserve_prefill, llama_pp


REPO = Path(__file__).resolve().parents[1]


def argument_parser(doc):
    """The flags every such benchmark takes: --build-dir, --llamacpp, --hf-reference,
    --precisions, --workdir (the folder and GGUFs are kept there), --reps, --json."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--llamacpp", default=str(REPO.parent / "shared" / "peers" / "llamacpp.sh"))
    p.add_argument("--hf-reference", default=str(REPO.parent / "shared" / "hf_reference"))
    p.add_argument("--precisions", default="fp32,bf16,bf16dot,int8")
    p.add_argument("--workdir", default="")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", metavar="FILE")
    return p


def served_logits(build, repo, model, tokens, grpc, pb, pb_grpc):
    """attnserve's float32 logits (len(tokens), vocab) of `tokens` through one unary Infer."""
    import numpy as np
    server = Server(build, f"--model_repository={repo}", f"--policy={model}",
                    *PRECISION_FLAGS["fp32"])
    try:
        # tokens x vocab float logits: past gRPC's default 4 MiB a message.
        options = [("grpc.max_receive_message_length", 64 << 20)]
        with grpc.insecure_channel(server.target, options=options) as channel:
            response = pb_grpc.AttnServeStub(channel).Infer(pb.InferRequest(
                model=model, tokens=tokens,
                output=pb.OutputSpec(kind=pb.OUTPUT_KIND_ALL_LOGITS)), timeout=600)
    finally:
        server.stop()
    return np.array(response.outputs.tensor.float_data).reshape(len(tokens), -1)


def measure_precision(build, script, repo, model, folder, work, precision, reps, rng, stubs_of,
                      vocab, sessions=(1, 16, 64)):
    """Medians of each side's figures: ({"pp512", "tg128", "16", N...}, {"pp512", "tg128",
    "16"}), and every run's raw values ({"ours": ..., "llama": ...}). script None: attnserve's
    side alone (a model llama.cpp does not run), llama.cpp's figures empty."""
    gguf = work / f"{model}-{GGUF_TYPE[precision]}.gguf"
    if script is not None and not gguf.exists():
        run([script, "convert", folder, gguf, GGUF_TYPE[precision]])
    ours = {"pp512": [], "tg128": []}
    ours.update({str(n): [] for n in sessions if n != 1})
    theirs = {"pp512": [], "tg128": [], "16": []}
    for _ in range(reps):
        server = Server(build, f"--model_repository={repo}", f"--policy={model}",
                        "--prefix_cache_bytes=0", *PRECISION_FLAGS[precision])
        try:
            ours["pp512"].append(attnserve_prefill(stubs_of(server), 512, 3, rng, model, vocab))
            rows = decode_bench(build, server.target, model, ",".join(map(str, sessions)), 8, 128,
                                vocab)
            ours["tg128"].append(rows[1]["aggregate_tok_s"])
            for n in sessions:
                if n != 1:
                    ours[str(n)].append(rows[n]["aggregate_tok_s"])
        finally:
            server.stop()
        if script is None:
            continue
        theirs["pp512"].append(llama_pp(script, gguf, 512, 3))
        theirs["tg128"].append(llama_bench(script, gguf, "-p", "0", "-n", "128"))
        theirs["16"].append(llama_batched(script, gguf, "16", "8", "128")[16]["S_TG"])
    med = {k: statistics.median(v) for k, v in ours.items()}
    lmed = {k: statistics.median(v) for k, v in theirs.items() if v}
    return med, lmed, {"precision": precision, "ours": ours, "llama": theirs}


def print_comparison(med, lmed, targets, bounds):
    """The table of pp512, tg128 and 16 sessions: each side's tok/s, the ratio against its
    target, and each side's share of its bound (bounds[test] = (ours, llama.cpp's) tok/s or
    None); then, where med has it, attnserve's 64 sessions against one session and its bound
    (bounds["64"])."""
    print("| test | attnserve tok/s | llama.cpp tok/s | ratio | target | attnserve / bound | "
          "llama.cpp / bound |")
    print("|---|---|---|---|---|---|---|")
    for test in ("pp512", "tg128", "16"):
        bound, lbound = bounds.get(test) or (None, None)
        ratio = med[test] / lmed[test]
        share = f"{med[test] / bound:.2f}" if bound else "-"
        lshare = f"{lmed[test] / lbound:.2f}" if lbound else "-"
        name = {"16": "16 sessions (S_TG)"}.get(test, test)
        print(f"| {name} | {med[test]:.1f} | {lmed[test]:.1f} | **{ratio:.2f}x** | "
              f">= {targets[test]}x {'met' if ratio >= targets[test] else 'MISSED'} | "
              f"{share} | {lshare} |", flush=True)
    bound64 = (bounds.get("64") or (None, None))[0]
    if "64" in med and bound64:
        print(f"| 64 sessions | {med['64']:.1f} | - | {med['64'] / med['tg128']:.2f}x one session "
              f"| - | {med['64'] / bound64:.2f} | - |", flush=True)
