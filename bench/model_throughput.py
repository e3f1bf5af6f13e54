#!/usr/bin/python3
"""Whole-model throughput through the server: a mamba-130m-shaped model, llama-bench's way.

Writes a random-weight model of mamba-130m's shape (Hugging Face MambaConfig: hidden 768,
24 layers, d_state 16, expand 2, conv 4, vocab 50280, tied embeddings; 129M parameters) with
attnserve-export-model --config, serves it with attnserve-server (the scheduler's loop with --threads
intra-op threads), and measures through gRPC with attnserve-load, one request at a time:

  prefill  pp<N>: unary Infer of N random tokens (last logits); tokens/s = N / median latency
  decode   tg<M>: a stream that opens with 1 token and generates M tokens greedily;
           tokens/s = (M - 1) / median(latency - time to the first generated token)

Reference (not run here: no llama.cpp on these machines): llama.cpp on a mamba-130m model on
the same kind of 2-core machine, as given in the project brief: about 270 tokens/s prefill and
59 tokens/s decode. The ratios printed are against those figures.

  /usr/bin/python3 bench/model_throughput.py --build-dir build [--json FILE]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLAMA_CPP_PREFILL_TOK_S = 270.0
LLAMA_CPP_DECODE_TOK_S = 59.0
MAMBA_130M_CONFIG = {
    "model_type": "mamba",
    "hidden_size": 768,
    "num_hidden_layers": 24,
    "state_size": 16,
    "expand": 2,
    "conv_kernel": 4,
    "time_step_rank": "auto",
    "vocab_size": 50280,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
}
MODEL = "mamba-130m"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--threads", type=int, default=2, help="the server's --intra_op_threads")
    p.add_argument("--prompt", type=int, default=512, help="prefill length (pp)")
    p.add_argument("--generate", type=int, default=128, help="decode length (tg)")
    p.add_argument("--requests", type=int, default=8, help="measured requests per phase")
    p.add_argument("--weight-precision", choices=["fp32", "bf16"], default="fp32",
                   help="the server's --weight_precision")
    p.add_argument("--json", metavar="FILE", help="write the figures here")
    return p.parse_args()


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def start_server(build, repo, threads, precision):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    proc = subprocess.Popen(
        [str(build / "server" / "attnserve-server"), f"--model_repository={repo}",
         f"--policy={MODEL}", f"--intra_op_threads={threads}", "--port=0",
         "--metrics_port=-1", "--http_port=-1", "--host=127.0.0.1", f"--weight_precision={precision}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 300
    for line in proc.stdout:
        m = re.search(r"listening on [^ ]*:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if time.time() > deadline:
            break
    proc.kill()
    sys.exit("model_throughput: the server did not start")


def load(build, port, out, *flags):
    run([str(build / "client" / "attnserve-load"), f"--target=127.0.0.1:{port}",
         f"--variants={MODEL}", "--concurrency=1", "--duration=0", "--warmup=0",
         "--timeout=600", f"--json={out}", *flags])
    with open(out) as f:
        results = json.load(f)["results"]
    assert len(results) == 1 and results[0]["failed"] == 0, results
    return results[0]


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="attnserve-throughput-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(MAMBA_130M_CONFIG))
        repo = Path(tmp) / "repo"
        run([str(build / "server" / "model" / "attnserve-export-model"), f"--config={config}",
             f"--name={MODEL}", f"--out={repo}"])
        server, port = start_server(build, repo, args.threads, args.weight_precision)
        try:
            # One unmeasured request of each kind first: page-faults the weights in.
            load(build, port, Path(tmp) / "w.json", "--mode=unary",
                 f"--lengths={args.prompt}", "--requests=1")
            prefill = load(build, port, Path(tmp) / "p.json", "--mode=unary",
                           f"--lengths={args.prompt}", f"--requests={args.requests}")
            load(build, port, Path(tmp) / "w2.json", "--mode=generate", "--lengths=1",
                 "--max_new_tokens=8", "--requests=1")
            decode = load(build, port, Path(tmp) / "d.json", "--mode=generate", "--lengths=1",
                          f"--max_new_tokens={args.generate}", f"--requests={args.requests}")
        finally:
            server.terminate()
            server.wait(timeout=60)

    prefill_tok_s = args.prompt / prefill["latency_s"]["p50"]
    decode_s = decode["latency_s"]["p50"] - decode["first_result_s"]["p50"]
    decode_tok_s = (args.generate - 1) / decode_s
    rows = [
        (f"prefill pp{args.prompt}", prefill_tok_s, LLAMA_CPP_PREFILL_TOK_S),
        (f"decode tg{args.generate}", decode_tok_s, LLAMA_CPP_DECODE_TOK_S),
    ]
    print(f"{MODEL} (random weights, {args.weight_precision}), {args.threads} kernel threads, "
          f"{args.requests} requests per phase, through gRPC on loopback")
    print(f"{'phase':<14}{'attnserve tok/s':>17}{'llama.cpp tok/s':>17}{'ratio':>8}")
    for name, ours, ref in rows:
        print(f"{name:<14}{ours:>17.1f}{ref:>17.0f}{ours / ref:>7.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": MODEL, "config": MAMBA_130M_CONFIG, "threads": args.threads,
                       "weight_precision": args.weight_precision,
                       "prompt": args.prompt, "generate": args.generate,
                       "prefill": prefill, "decode": decode,
                       "prefill_tok_s": prefill_tok_s, "decode_tok_s": decode_tok_s,
                       "reference": {"llama_cpp_prefill_tok_s": LLAMA_CPP_PREFILL_TOK_S,
                                     "llama_cpp_decode_tok_s": LLAMA_CPP_DECODE_TOK_S}},
                      f, indent=1)


if __name__ == "__main__":
    main()
