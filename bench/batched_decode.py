#!/usr/bin/python3
"""Sessions decoding at once: attnserve through gRPC against llama.cpp on the same checkpoint.

In one run, on one random-weight mamba-130m-shaped Hugging Face folder (MambaConfig: hidden 768,
24 layers, d_state 16, expand 2, conv 4, vocab 50280, tied; written once by
attnserve-export-model --config):

  attnserve   attnserve-server --model_repository (the scheduler: --intra_op_threads=2), then
              attnserve_decode_bench: N streams each append --prompt tokens and generate
              --generate greedily; aggregate tok/s over the window where all N decode, p50/p99
              time between a session's tokens in that window (and p99 over all gaps);
  llama.cpp   ../shared/peers/llamacpp.sh on the same folder converted by llama.cpp's own
              converter: llama-batched-bench S_TG at B = N (-npp --prompt -ntg --generate) and
              llama-bench tg128;

for fp32 (F32 GGUF) and bf16 (--weight_precision=bf16, BF16 GGUF), then the built-in default
models (standard, linear, mamba, hybrid) at 1 and 16 sessions. Prints the tables and the
issue's targets as ratios measured in this run; --json writes every figure.

  /usr/bin/python3 bench/batched_decode.py --build-dir build [--json FILE]
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
MAMBA_130M_CONFIG = {
    "model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "state_size": 16,
    "expand": 2, "conv_kernel": 4, "time_step_rank": "auto", "vocab_size": 50280,
    "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
}
MODEL = "mamba-130m"
DEFAULT_MODELS = ["standard", "linear", "mamba", "hybrid"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--llamacpp", default=str(REPO.parent / "shared" / "peers" / "llamacpp.sh"),
                   help="llamacpp.sh (skipped when missing)")
    p.add_argument("--sessions", default="1,4,16,64")
    p.add_argument("--prompt", type=int, default=8)
    p.add_argument("--generate", type=int, default=64)
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--workdir", help="keep the model folder and GGUFs here (default: a temp dir)")
    p.add_argument("--skip-defaults", action="store_true")
    p.add_argument("--json", metavar="FILE")
    return p.parse_args()


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True, **kw)


class Server:
    def __init__(self, build, *flags):
        self.proc = subprocess.Popen(
            [str(build / "server" / "attnserve-server"), "--port=0", "--metrics_port=-1",
             "--host=127.0.0.1", "--intra_op_threads=2", "--max_new_tokens=4096", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 300
        for line in self.proc.stdout:
            m = re.search(r"listening on [^ ]*:(\d+)", line)
            if m:
                self.target = f"127.0.0.1:{m.group(1)}"
                return
            if time.time() > deadline:
                break
        self.proc.kill()
        sys.exit("batched_decode: the server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def decode_bench(build, target, model, sessions, prompt, generate, vocab):
    out = run([build / "bench" / "attnserve_decode_bench", f"--target={target}",
               f"--model={model}", f"--sessions={sessions}", f"--prompt={prompt}",
               f"--generate={generate}", f"--vocab={vocab}", "--json"]).stdout
    return {r["sessions"]: r for r in (json.loads(l) for l in out.splitlines()
                                       if l.startswith("{"))}


def llama_batched(script, gguf, sessions, prompt, generate):
    out = run([script, "batched", gguf, "-npl", sessions, "-npp", prompt, "-ntg", generate]).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[0].isdigit():
            rows[int(cells[2])] = {"S_TG": float(cells[7]), "T_TG": float(cells[6])}
    return rows


def llama_tg128(script, gguf):
    out = run([script, "bench", gguf, "-p", "0", "-n", "128"]).stdout
    start = out.index("[")
    results = json.loads(out[start:out.rindex("]") + 1])
    return next(r["avg_ts"] for r in results if r.get("n_gen") == 128)


def verdict(ok):
    return "PASS" if ok else "MISS"


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    have_llama = script.is_file()
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-batched-")
    work = Path(args.workdir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    repo = work / "repo"
    if not (repo / MODEL / "model.safetensors").exists():
        config = work / "config.json"
        config.write_text(json.dumps(MAMBA_130M_CONFIG))
        run([build / "server" / "model" / "attnserve-export-model", f"--config={config}",
             f"--name={MODEL}", f"--out={repo}"])
    ns = [int(n) for n in args.sessions.split(",")]
    report = {"model": MODEL, "config": MAMBA_130M_CONFIG, "prompt": args.prompt,
              "generate": args.generate, "sessions": ns, "precisions": {}}
    print(f"{MODEL} (random weights), prompt {args.prompt}, generate {args.generate}, 2 threads; "
          f"attnserve through gRPC on loopback, llama.cpp {'in the same run' if have_llama else 'not found'}")
    for precision in args.precisions.split(","):
        gguf = work / f"{MODEL}-{'f32' if precision == 'fp32' else 'bf16'}.gguf"
        if have_llama and not gguf.exists():
            run([script, "convert", repo / MODEL, gguf, "f32" if precision == "fp32" else "bf16"])
        server = Server(build, f"--model_repository={repo}", f"--policy={MODEL}",
                        f"--weight_precision={precision}")
        try:
            decode_bench(build, server.target, MODEL, "1", args.prompt, 8, 50280)  # warm
            ours = decode_bench(build, server.target, MODEL, args.sessions, args.prompt,
                                args.generate, 50280)
        finally:
            server.stop()
        llama = llama_batched(script, gguf, args.sessions, args.prompt, args.generate) \
            if have_llama else {}
        tg128 = llama_tg128(script, gguf) if have_llama else None
        report["precisions"][precision] = {"attnserve": ours, "llama_batched": llama,
                                           "llama_tg128": tg128}
        one = ours[ns[0]]["aggregate_tok_s"]
        print(f"\n{precision}: aggregate decode tokens/s")
        print(f"{'sessions':>8} {'attnserve':>10} {'x 1-session':>11} {'p50 gap':>8} {'p99 gap':>8}"
              f" {'p99 all':>8} {'llama S_TG':>10} {'ratio':>6}")
        for n in ns:
            r = ours[n]
            l = llama.get(n, {}).get("S_TG")
            print(f"{n:>8} {r['aggregate_tok_s']:>10.1f} {r['aggregate_tok_s'] / one:>10.2f}x"
                  f" {r['gap_p50_ms']:>7.1f}m {r['gap_p99_ms']:>7.1f}m {r['gap_p99_all_ms']:>7.1f}m"
                  f" {l if l else float('nan'):>10.1f} "
                  f"{r['aggregate_tok_s'] / l if l else float('nan'):>5.2f}x")
        print("targets:")
        if tg128:
            print(f"  1 session >= 1.0x llama.cpp tg128 ({tg128:.1f}): {one / tg128:.2f}x "
                  f"{verdict(one >= tg128)}")
        if 16 in ours:
            r16 = ours[16]["aggregate_tok_s"]
            if 16 in llama:
                print(f"  16 sessions >= 3x llama.cpp S_TG@16 ({llama[16]['S_TG']:.1f}): "
                      f"{r16 / llama[16]['S_TG']:.2f}x {verdict(r16 >= 3 * llama[16]['S_TG'])}")
            print(f"  16 sessions >= 5x 1-session: {r16 / one:.2f}x {verdict(r16 >= 5 * one)}")
            p99 = ours[16]["gap_p99_ms"] / ours[ns[0]]["gap_p99_ms"]
            print(f"  16 sessions p99 gap <= 3x 1-session's: {p99:.2f}x {verdict(p99 <= 3)}")
        if 64 in ours:
            r64 = ours[64]["aggregate_tok_s"]
            print(f"  64 sessions >= 8x 1-session: {r64 / one:.2f}x {verdict(r64 >= 8 * one)}")
    if not args.skip_defaults:
        server = Server(build)
        try:
            print("\ndefault models (4 layers, width 256, vocab 4096): aggregate tokens/s")
            print(f"{'model':>10} {'1 session':>10} {'16 sessions':>12} {'ratio':>6}  target >= 4x")
            report["defaults"] = {}
            for name in DEFAULT_MODELS:
                decode_bench(build, server.target, name, "1", args.prompt, 8, 4096)  # warm
                r = decode_bench(build, server.target, name, "1,16", args.prompt,
                                 4 * args.generate, 4096)
                ratio = r[16]["aggregate_tok_s"] / r[1]["aggregate_tok_s"]
                report["defaults"][name] = r
                print(f"{name:>10} {r[1]['aggregate_tok_s']:>10.1f} "
                      f"{r[16]['aggregate_tok_s']:>12.1f} {ratio:>5.2f}x  {verdict(ratio >= 4)}")
        finally:
            server.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
