"""Per-token serving cost on the built-in default models: what the server spends per generated
token outside the model (issue #25 item 4).

For each default model and session count (1 and 16 by default) it measures, in one run:
  model     attnserve_step_bench: the in-process StepBatch of B rows (no gRPC, no scheduler),
            ms per step;
  served    attnserve-server (--intra_op_threads=2) driven by attnserve_decode_bench over gRPC on
            loopback: aggregate tokens/s, the wall time of one token-step (B / aggregate), the
            server's CPU time per token (utime + stime from /proc) and the client's;
  overhead  served step time - model step time, per step and per token: what serving adds.
With --builds A,B (two build folders) it alternates them --reps times and prints medians, so
that a change to the serving path is compared on the same minutes of this noisy machine;
--server-flags 'A|B' does the same for one build run with two sets of extra server flags
(e.g. '--decode_split_max_bytes_per_row=0|': data-parallel decode off, then on).
With --stream-intervals 1,16 each configuration also runs with the clients asking for generated
tokens in groups of 1 and of 16 per message (GenerateSpec.stream_interval).
With --perf, one more run per model at the largest session count under `perf record` (DWARF
call stacks) splits the server's CPU time per token into the model's computation, the kernels'
team waiting (libgomp barriers and spinning), sampling and writing tokens, the scheduler's
other work, gRPC's own threads and the server's other threads (the prefix cache's prefault
thread, which runs only in idle time, the memory trimmer, the session reaper).

  /usr/bin/python3 bench/serving_cost.py --build-dir build [--models mamba,hybrid] [--reps 3]
  /usr/bin/python3 bench/serving_cost.py --builds /tmp/before,build --reps 5
  /usr/bin/python3 bench/serving_cost.py --server-flags='--decode_split_max_bytes_per_row=0|' --reps 3
  /usr/bin/python3 bench/serving_cost.py --perf --models mamba   # needs perf (linux-perf)
  /usr/bin/python3 bench/serving_cost.py --stream-intervals 1,16 --reps 3
"""

import argparse
import json
import os
import resource
import signal
import tempfile
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import Server, cpu_name  # noqa: E402

DEFAULT_MODELS = ["standard", "linear", "mamba", "hybrid", "rwkv"]
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# Server flags that change the model's step, and attnserve_step_bench's same setting.
STEP_BENCH_FLAGS = {"--weight_precision=bf16": "--bf16", "--weight_precision=int8": "--int8",
                    "--kv_cache_precision=bf16": "--kv-bf16"}


def model_step_ms(build, models, batches, flags):
    # The step as the server runs it: the scheduler's data-parallel parts, unless turned off,
    # and the weights and KV caches in the server's precision.
    parts = "1" if "--decode_split_max_bytes_per_row=0" in flags else "auto"
    precision = [STEP_BENCH_FLAGS[f] for f in flags if f in STEP_BENCH_FLAGS]
    if "--weight_precision=bf16" in flags and "--activation_precision=bf16" in flags:
        precision = ["--bf16-dot" if p == "--bf16" else p for p in precision]
    out = subprocess.run([str(Path(build) / "bench" / "attnserve_step_bench"),
                          f"--models={','.join(models)}", f"--batches={','.join(map(str, batches))}",
                          "--steps=400", f"--parts={parts}", *precision],
                         check=True, capture_output=True, text=True).stdout
    steps = {}
    for line in out.splitlines():
        cells = line.split()
        # model, weights MB, B, parts, ms/step, tokens/s (parts: the scheduler's choice)
        if len(cells) == 6 and cells[2].isdigit():
            steps[(cells[0], int(cells[2]))] = float(cells[4])
    return steps


def served(build, server, model, sessions, generate, interval):
    bench = [str(Path(build) / "bench" / "attnserve_decode_bench"), f"--target={server.target}",
             f"--model={model}", "--prompt=8", "--vocab=4096", "--json",
             f"--stream_interval={interval}"]
    subprocess.run(bench + ["--sessions=1", "--generate=8"], check=True, capture_output=True)
    server_before, client_before = process_cpu_seconds(server.proc.pid), children_cpu_seconds()
    out = subprocess.run(bench + [f"--sessions={sessions}", f"--generate={generate}"], check=True,
                         capture_output=True, text=True).stdout
    server_cpu = process_cpu_seconds(server.proc.pid) - server_before
    client_cpu = children_cpu_seconds() - client_before
    row = next(json.loads(l) for l in out.splitlines() if l.startswith("{"))
    tokens = sessions * generate
    return {"aggregate_tok_s": row["aggregate_tok_s"],
            "server_cpu_us_per_token": 1e6 * server_cpu / tokens,
            "client_cpu_us_per_token": 1e6 * client_cpu / tokens}


def measure(build, flags, models, sessions, generate, interval):
    steps = model_step_ms(build, models, sessions, flags)
    server = Server(build, "--intra_op_threads=2", "--max_new_tokens=4096", *flags)
    try:
        results = {}
        for m in models:
            for n in sessions:
                r = served(build, server, m, n, generate, interval)
                r["model_step_ms"] = steps[(m, n)]
                r["served_step_ms"] = 1000.0 * n / r["aggregate_tok_s"]
                r["overhead_us_per_token"] = 1000.0 * (r["served_step_ms"] - r["model_step_ms"]) / n
                results[(m, n)] = r
        return results
    finally:
        server.stop()


PERF_HZ = 1000
CATEGORIES = ["model compute", "kernel team waits", "sample + write", "scheduler other",
              "gRPC threads", "other threads"]
# gRPC's own threads by the names it gives them (truncated to 15 characters by the kernel).
GRPC_THREADS = ("nexting_thread", "default-executo", "grpc_global_tim", "event_engine",
                "resolver-execut", "grpcpp_sync_ser", "timer_manager")


def classify(comm, frames):
    """A perf sample's category from its thread name and stack (leaf first)."""
    symbols = " ".join(f[0] for f in frames)
    if "SampleAndSend" in symbols:
        return "sample + write"
    # In libgomp (a barrier, a spin, its futex) before any of the server's or ATen's code.
    for _, dso in frames:
        if "libgomp" in dso:
            return "kernel team waits"
        if "attnserve-server" in dso or "libtorch" in dso:
            break
    if any(k in symbols for k in ("Model::StepBatch", "Model::Forward", "attnserve::kernels")):
        return "model compute"
    if comm in GRPC_THREADS:
        return "gRPC threads"
    if comm != "scheduler":  # the prefix cache's prefault (SCHED_IDLE), the memory trimmer, ...
        return "other threads"
    return "scheduler other"


def perf_breakdown(build, flags, model, sessions, generate, interval):
    """Server CPU microseconds per generated token, per category, from one profiled run."""
    server = Server(build, "--intra_op_threads=2", "--max_new_tokens=4096", *flags)
    with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
        data = f.name
    try:
        bench = [str(Path(build) / "bench" / "attnserve_decode_bench"),
                 f"--target={server.target}", f"--model={model}", "--prompt=8", "--vocab=4096",
                 f"--stream_interval={interval}"]
        subprocess.run(bench + ["--sessions=1", "--generate=8"], check=True, capture_output=True)
        perf = subprocess.Popen(["perf", "record", "-F", str(PERF_HZ), "--call-graph",
                                 "dwarf,16384", "-p", str(server.proc.pid), "-o", data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        subprocess.run(bench + [f"--sessions={sessions}", f"--generate={generate}"], check=True,
                       capture_output=True)
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
    finally:
        server.stop()
    script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"],
                            capture_output=True, text=True).stdout
    os.unlink(data)
    counts = {c: 0 for c in CATEGORIES}
    for block in script.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        comm = lines[0].split()[0] if not lines[0].startswith((" ", "\t")) else ""
        frames = []
        for l in lines[1:] if comm else lines:
            parts = l.strip().split(" ", 1)
            rest = parts[1] if len(parts) > 1 else ""
            sym, _, dso = rest.rpartition(" (")
            frames.append((sym, dso))
        counts[classify(comm, frames)] += 1
    tokens = sessions * generate
    return {c: 1e6 * n / PERF_HZ / tokens for c, n in counts.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--builds", help="two build folders, comma-separated, alternated --reps times")
    p.add_argument("--server-flags", help="two sets of extra server flags, '|'-separated, for "
                   "one build, alternated --reps times")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--sessions", default="1,16")
    p.add_argument("--generate", type=int, default=512)
    p.add_argument("--stream-intervals", default="0",
                   help="generated tokens per streamed message (GenerateSpec.stream_interval), "
                   "comma-separated: each configuration is run with each")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--json", help="write the medians here")
    p.add_argument("--perf", action="store_true",
                   help="also split the server's CPU per token by category with perf")
    args = p.parse_args()
    # Each configuration: a label, a build folder and extra server flags.
    if args.server_flags:
        configs = [(f or "(default)", args.build_dir, f.split())
                   for f in args.server_flags.split("|")]
    else:
        configs = [(b, b, []) for b in (args.builds.split(",") if args.builds else [args.build_dir])]
    intervals = [int(i) for i in args.stream_intervals.split(",")]
    if len(intervals) > 1:
        configs = [(f"{label} si={i}", build, flags, i) for label, build, flags in configs
                   for i in intervals]
    else:
        configs = [(label, build, flags, intervals[0]) for label, build, flags in configs]
    builds = [c[0] for c in configs]
    models = args.models.split(",")
    sessions = [int(s) for s in args.sessions.split(",")]
    runs = {b: [] for b in builds}
    for rep in range(args.reps):
        for label, build, flags, interval in configs:
            runs[label].append(measure(build, flags, models, sessions, args.generate, interval))
            print(f"rep {rep + 1}/{args.reps} {label} done", file=sys.stderr)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"{args.reps} rep(s), medians; {args.generate} tokens a session; stream interval(s) "
          f"{args.stream_intervals}")
    keys = ["aggregate_tok_s", "model_step_ms", "served_step_ms", "overhead_us_per_token",
            "server_cpu_us_per_token", "client_cpu_us_per_token"]
    report = {}
    print(f"{'build':>14} {'model':>9} {'B':>3} {'tok/s':>8} {'x 1-sess':>8} {'model ms':>9} "
          f"{'served ms':>9} {'ovh us/tok':>10} {'srv cpu us':>10} {'cli cpu us':>10}")
    for b in builds:
        for m in models:
            one = None
            for n in sessions:
                med = {k: statistics.median(r[(m, n)][k] for r in runs[b]) for k in keys}
                report.setdefault(b, {}).setdefault(m, {})[n] = med
                one = med["aggregate_tok_s"] if n == sessions[0] else one
                label = b if len(b) <= 14 else "…" + b[-13:]  # two builds named build stay apart
                print(f"{label:>14} {m:>9} {n:>3} {med['aggregate_tok_s']:>8.0f} "
                      f"{med['aggregate_tok_s'] / one:>8.2f} {med['model_step_ms']:>9.3f} "
                      f"{med['served_step_ms']:>9.3f} {med['overhead_us_per_token']:>10.1f} "
                      f"{med['server_cpu_us_per_token']:>10.1f} "
                      f"{med['client_cpu_us_per_token']:>10.1f}")
    if args.perf:
        n = max(sessions)
        print(f"\nserver CPU µs per token by category (perf, {n} sessions, {builds[-1]}):")
        print(f"{'model':>9} " + " ".join(f"{c:>17}" for c in CATEGORIES) + f" {'total':>8}")
        for m in models:
            split = perf_breakdown(configs[-1][1], configs[-1][2], m, n, args.generate,
                                   configs[-1][3])
            report.setdefault("perf", {})[m] = split
            print(f"{m:>9} " + " ".join(f"{split[c]:>17.1f}" for c in CATEGORIES) +
                  f" {sum(split.values()):>8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
