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

for fp32 (F32 GGUF), bf16 (--weight_precision=bf16, BF16 GGUF), bf16dot (bf16 with
--activation_precision=bf16: vdpbf16ps, BF16 GGUF) and int8 (--weight_precision=int8,
Q8_0 GGUF), then the built-in default models (standard, linear, mamba, hybrid) at 1 and 16
sessions. Prints the CPU (model, the flags the kernels choose by, the int8 products the server
picked), the tables and the issue's targets as ratios measured in this run, and each aggregate
as a fraction of its memory bound: the bytes of weight matrices one step reads (once for all
the step's sessions) at the read bandwidth measured here (attnserve_cpu_peaks' sum of 1 GiB on
2 threads; torch's where that tool is missing), and
of its compute bound (ours/c): the step's multiply-adds at the peak of the instruction its
products run on, measured here by attnserve_cpu_peaks on 2 threads (every row's products are its
own, so this bound does not grow with the sessions); --json writes every figure. With --reps R,
each precision's attnserve and llama.cpp runs alternate R times and every figure is the median
of its R values (each run's own figures are in the JSON), so that a ratio does not hang on the
minute one side happened to run in.

  /usr/bin/python3 bench/batched_decode.py --build-dir build [--reps 3] [--json FILE]
"""

import argparse
import json
import os
import re
import statistics
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
    p.add_argument("--precisions", default="fp32,bf16,bf16dot,int8")
    p.add_argument("--workdir", help="keep the model folder and GGUFs here (default: a temp dir)")
    p.add_argument("--skip-defaults", action="store_true")
    p.add_argument("--reps", type=int, default=1,
                   help="per precision, run attnserve and llama.cpp this many times, alternated, "
                        "and report each figure's median (this machine's speed moves 30%% "
                        "between minutes; a ratio of two figures taken minutes apart moves with it)")
    p.add_argument("--stream-interval", type=int, default=0,
                   help="attnserve's clients ask for generated tokens this many to a message "
                   "(GenerateSpec.stream_interval; 0: one message a token)")
    p.add_argument("--json", metavar="FILE")
    return p.parse_args()


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True, **kw)


class Server:
    # --adapt_threads_to_load=false: the load generator (attnserve_decode_bench, one client
    # thread per session) runs on the server's two cores. Its runnable threads are not foreign
    # load the kernels' team should yield to (llama-batched-bench has no client at all): with
    # 64 sessions they kept the team at one thread for about half of a run (the second
    # thread's CPU time 372-491 ticks against the first's 943-976; 731-866 against 828-924
    # with the flag false; docs/benchmarks.md).
    def __init__(self, build, *flags):
        self.int8_isa = self.bf16_isa = None
        self.proc = subprocess.Popen(
            [str(build / "server" / "attnserve-server"), "--port=0", "--metrics_port=-1", "--http_port=-1",
             "--host=127.0.0.1", "--intra_op_threads=2", "--adapt_threads_to_load=false",
             "--max_new_tokens=4096", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 300
        for line in self.proc.stdout:
            m = re.search(r"listening on [^ ]*:(\d+)", line)
            isa = re.search(r"int8 products: (\S+)", line)
            if isa:
                self.int8_isa = isa.group(1)
            bf16 = re.search(r"bf16 products: (\S+)", line)
            if bf16:
                self.bf16_isa = bf16.group(1)
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


STREAM_INTERVAL = 0  # --stream-interval: generated tokens per streamed message


def decode_bench(build, target, model, sessions, prompt, generate, vocab):
    out = run([build / "bench" / "attnserve_decode_bench", f"--target={target}",
               f"--model={model}", f"--sessions={sessions}", f"--prompt={prompt}",
               f"--generate={generate}", f"--vocab={vocab}", "--json",
               f"--stream_interval={STREAM_INTERVAL}"]).stdout
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


GGUF_TYPE = {"fp32": "f32", "bf16": "bf16", "bf16dot": "bf16", "int8": "q8_0"}
# The server's flags per precision; bf16dot: bfloat16 activations too (vdpbf16ps), as llama.cpp's
# BF16 product does.
PRECISION_FLAGS = {"fp32": ["--weight_precision=fp32"], "bf16": ["--weight_precision=bf16"],
                   "bf16dot": ["--weight_precision=bf16", "--activation_precision=bf16"],
                   "int8": ["--weight_precision=int8"]}
CPU_FLAGS = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16",
             "amx_bf16", "amx_int8"]


def cpu_description():
    info = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", info)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    return {"model": model.group(1) if model else "?", "cores": os.cpu_count(),
            "flags": [f for f in CPU_FLAGS if f in flags],
            "missing": [f for f in CPU_FLAGS if f not in flags]}


def read_bandwidth_gbs():
    """Best of 5 sums of a 1 GiB float32 tensor on 2 threads (/usr/bin/python3's torch)."""
    code = ("import time, torch; torch.set_num_threads(2); x = torch.ones(1 << 28); x.sum(); "
            "b = min((lambda t: (x.sum(), time.perf_counter() - t)[1])(time.perf_counter()) "
            "for _ in range(5)); print(4 * x.numel() / b / 1e9)")
    try:
        return float(run(["/usr/bin/python3", "-c", code]).stdout)
    except (subprocess.CalledProcessError, ValueError):
        return None


def step_weight_elements(config):
    """Elements of the weight matrices one decode step multiplies by (tied lm_head once; norms
    etc. left out): (those in blocks of 32, dt_proj's, which stay float32 under int8)."""
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    di, n = config["expand"] * h, config["state_size"]
    r = (h + 15) // 16
    blocked = layers * (2 * di * h + (r + 2 * n) * di + h * di) + config["vocab_size"] * h
    return blocked, layers * di * r


def step_weight_bytes(config, precision):
    """Bytes of weight matrices one decode step reads."""
    blocked, dt = step_weight_elements(config)
    # Per element: int8 1 byte + a float32 scale per 32 (dt_proj, 48 wide, stays float32).
    per = {"fp32": 4.0, "bf16": 2.0, "bf16dot": 2.0, "int8": 1.0 + 4.0 / 32}[precision]
    return blocked * per + dt * (4.0 if precision == "int8" else per)


# The instruction each precision's products run on (attnserve_cpu_peaks' names): bfloat16
# weights with float32 activations are widened and multiplied in float32.
PRODUCT_PEAK = {"fp32": "fp32 FMA", "bf16": "fp32 FMA", "bf16dot": "bf16 dot",
                "int8": "int8 dot"}


def cpu_peaks(build):
    """attnserve_cpu_peaks' figures (GOP/s and GB/s on one thread and on 2), or None."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        try:
            out = run([build / "bench" / "attnserve_cpu_peaks", "--threads=2", f"--json={f.name}"])
        except (subprocess.CalledProcessError, FileNotFoundError):
            return None
        print(out.stdout, end="")
        return json.loads(Path(f.name).read_text())


def compute_bound_tok_s(config, precision, peaks):
    """Tokens/s if every multiply-add of the step's products ran at the peak of its instruction
    on 2 threads (the products alone: the scan, norms and sampling left out), or None."""
    peak = (peaks or {}).get(PRODUCT_PEAK[precision])
    if not peak:
        return None
    blocked, dt = step_weight_elements(config)
    return peak["gops_all"] * 1e9 / (2 * (blocked + dt))


def median_runs(runs):
    """Each figure's median over repetitions of (ours, llama's batched rows, llama's tg128)."""
    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None
    ours = {n: {k: med([r[0][n][k] for r in runs]) for k in runs[0][0][n]} for n in runs[0][0]}
    llama = {n: {k: med([r[1][n][k] for r in runs if n in r[1]]) for k in row}
             for n, row in runs[0][1].items()}
    return ours, llama, med([r[2] for r in runs])


def verdict(ok):
    return "PASS" if ok else "MISS"


def mamba_130m_repository(build, work):
    """A model repository in `work`/repo holding the random-weight mamba-130m-shaped folder
    (written by attnserve-export-model once; kept when it is there). Returns its path."""
    repo = work / "repo"
    if not (repo / MODEL / "model.safetensors").exists():
        config = work / "config.json"
        config.write_text(json.dumps(MAMBA_130M_CONFIG))
        run([build / "server" / "model" / "attnserve-export-model", f"--config={config}",
             f"--name={MODEL}", f"--out={repo}"])
    return repo


def main():
    args = parse_args()
    build = Path(args.build_dir).resolve()
    script = Path(args.llamacpp)
    have_llama = script.is_file()
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-batched-")
    work = Path(args.workdir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    repo = mamba_130m_repository(build, work)
    ns = [int(n) for n in args.sessions.split(",")]
    global STREAM_INTERVAL
    STREAM_INTERVAL = args.stream_interval
    report = {"model": MODEL, "config": MAMBA_130M_CONFIG, "prompt": args.prompt,
              "generate": args.generate, "sessions": ns, "stream_interval": args.stream_interval,
              "precisions": {}}
    cpu = cpu_description()
    print("this CPU's peaks (attnserve_cpu_peaks):")
    peaks = report["cpu_peaks"] = cpu_peaks(build)
    # The read bandwidth on 2 threads: attnserve_cpu_peaks' when it ran, else torch's.
    bandwidth = peaks["read"]["gbs_all"] if peaks else read_bandwidth_gbs()
    report["cpu"], report["read_bandwidth_gbs"] = cpu, bandwidth
    print(f"{MODEL} (random weights), prompt {args.prompt}, generate {args.generate}, 2 threads; "
          f"attnserve through gRPC on loopback (generated tokens "
          f"{args.stream_interval if args.stream_interval > 1 else 1} a message), "
          f"llama.cpp {'in the same run' if have_llama else 'not found'}")
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores; has {' '.join(cpu['flags'])}; "
          f"lacks {' '.join(cpu['missing']) or '-'}; read bandwidth "
          f"{bandwidth if bandwidth else float('nan'):.1f} GB/s")
    for precision in args.precisions.split(","):
        gguf = work / f"{MODEL}-{GGUF_TYPE[precision]}.gguf"
        if have_llama and not gguf.exists():
            run([script, "convert", repo / MODEL, gguf, GGUF_TYPE[precision]])
        server = Server(build, f"--model_repository={repo}", f"--policy={MODEL}",
                        *PRECISION_FLAGS[precision])
        if server.int8_isa:
            print(f"\nint8 products: {server.int8_isa}")
            report["int8_products"] = server.int8_isa
        if server.bf16_isa:
            print(f"\nbf16 products: {server.bf16_isa}")
            report["bf16_products"] = server.bf16_isa
        runs = []  # per repetition: (ours, llama's batched rows, llama's tg128)
        try:
            decode_bench(build, server.target, MODEL, "1", args.prompt, 8, 50280)  # warm
            for _ in range(args.reps):
                ours = decode_bench(build, server.target, MODEL, args.sessions, args.prompt,
                                    args.generate, 50280)
                llama = llama_batched(script, gguf, args.sessions, args.prompt, args.generate) \
                    if have_llama else {}
                tg128 = llama_tg128(script, gguf) if have_llama else None
                runs.append((ours, llama, tg128))
        finally:
            server.stop()
        ours, llama, tg128 = median_runs(runs)
        if args.reps > 1:
            print(f"\n{precision}: medians of {args.reps} alternated runs; attnserve's aggregate "
                  "tok/s by run: " + "; ".join(
                      f"{n}: " + " ".join(f"{r[0][n]['aggregate_tok_s']:.0f}" for r in runs)
                      for n in ns))
        step_bytes = step_weight_bytes(MAMBA_130M_CONFIG, precision)
        bound = (lambda n: n * bandwidth * 1e9 / step_bytes) if bandwidth else (lambda n: None)
        cbound = compute_bound_tok_s(MAMBA_130M_CONFIG, precision, peaks)
        report["precisions"][precision] = {"runs": runs, "attnserve": ours, "llama_batched": llama,
                                           "llama_tg128": tg128, "step_weight_bytes": step_bytes,
                                           "memory_bound_tok_s": {n: bound(n) for n in ns},
                                           "compute_bound_tok_s": cbound}
        one = ours[ns[0]]["aggregate_tok_s"]
        print(f"\n{precision}: aggregate decode tokens/s ({GGUF_TYPE[precision].upper()} for "
              f"llama.cpp); bound: {step_bytes / 1e6:.0f} MB of weights a step at the bandwidth; "
              f"c-bound: the products at the {PRODUCT_PEAK[precision]} peak "
              f"({cbound or float('nan'):.0f} tok/s)")
        print(f"{'sessions':>8} {'attnserve':>10} {'x 1-session':>11} {'p50 gap':>8} {'p99 gap':>8}"
              f" {'p99 all':>8} {'llama S_TG':>10} {'ratio':>6} {'bound':>8} {'ours/b':>6}"
              f" {'llama/b':>7} {'ours/c':>6}")
        for n in ns:
            r = ours[n]
            l = llama.get(n, {}).get("S_TG")
            print(f"{n:>8} {r['aggregate_tok_s']:>10.1f} {r['aggregate_tok_s'] / one:>10.2f}x"
                  f" {r['gap_p50_ms']:>7.1f}m {r['gap_p99_ms']:>7.1f}m {r['gap_p99_all_ms']:>7.1f}m"
                  f" {l if l else float('nan'):>10.1f} "
                  f"{r['aggregate_tok_s'] / l if l else float('nan'):>5.2f}x"
                  f" {bound(n) or float('nan'):>8.0f} "
                  f"{r['aggregate_tok_s'] / bound(n) if bound(n) else float('nan'):>5.1%}"
                  f" {l / bound(n) if l and bound(n) else float('nan'):>6.1%}"
                  f" {r['aggregate_tok_s'] / cbound if cbound else float('nan'):>5.1%}")
        print("targets:")
        if tg128:
            want = {"fp32": 1.0, "bf16": 1.3, "bf16dot": 1.3, "int8": 1.2}[precision]
            print(f"  1 session >= {want}x llama.cpp tg128 ({tg128:.1f}): {one / tg128:.2f}x "
                  f"{verdict(one >= want * tg128)}")
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
            print(f"{'model':>10} {'1 session':>10} {'16 sessions':>12} {'ratio':>6}  target >= 6x (issue #25)")
            report["defaults"] = {}
            for name in DEFAULT_MODELS:
                decode_bench(build, server.target, name, "1", args.prompt, 8, 4096)  # warm
                r = decode_bench(build, server.target, name, "1,16", args.prompt,
                                 4 * args.generate, 4096)
                ratio = r[16]["aggregate_tok_s"] / r[1]["aggregate_tok_s"]
                report["defaults"][name] = r
                print(f"{name:>10} {r[1]['aggregate_tok_s']:>10.1f} "
                      f"{r[16]['aggregate_tok_s']:>12.1f} {ratio:>5.2f}x  {verdict(ratio >= 6)}")
        finally:
            server.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
