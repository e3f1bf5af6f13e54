#!/usr/bin/python3
"""A prefill under CPU contention: does attnserve degrade in proportion to the cores it gets?

attnserve-server with its default models; one Infer of --tokens random tokens to --model
(linear by default: a whole-sequence prefill, cut by the scheduler into --max_batch_tokens
chunks) timed by the server (`timings.total_seconds`), quiet and with 1 and 2 busy processes
(pure spin loops) on the same cores, each --reps times (median). The named baseline, in the
same run: the same server with --adapt_threads_to_load=false (the kernels' team keeps every
core however many it gets). Issue #27's target: at most 2x and 3x the quiet time with 1 and 2
busy processes on 2 cores.

  /usr/bin/python3 bench/contention_bench.py --build-dir build [--tokens 32768] [--reps 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_server import Server, cpu_name  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--model", default="linear")
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--busy", default="0,1,2", help="competing busy processes to try")
    return p.parse_args()


def infer_seconds(build, port, model, tokens):
    out = subprocess.run(
        [os.path.join(build, "client", "attnserve-cli"), "infer", "--target=127.0.0.1:%d" % port,
         "--model=" + model, "--random_tokens=%d" % tokens, "--output=none", "--json",
         "--timeout=600"], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return float(json.loads(out.stdout.splitlines()[-1])["timings"]["total_seconds"])


def busy_processes(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main():
    args = parse_args()
    build = os.path.abspath(args.build_dir)
    busy_counts = [int(b) for b in args.busy.split(",")]
    print("cpu: %s, %d logical cores; %s of %d tokens, median of %d" %
          (cpu_name(), os.cpu_count(), args.model, args.tokens, args.reps))
    results = {}
    for adapt in (True, False):
        # The prefix cache off: the same prompt again must be computed again.
        server = Server(build, "--adapt_threads_to_load=%s" % ("true" if adapt else "false"),
                        "--prefix_cache_bytes=0")
        try:
            infer_seconds(build, server.port, args.model, 256)  # warm-up
            for busy in busy_counts:
                hogs = busy_processes(busy)
                try:
                    time.sleep(1.0)  # the team adapts within ~0.6 s of sampling
                    times = [infer_seconds(build, server.port, args.model, args.tokens)
                             for _ in range(args.reps)]
                finally:
                    for h in hogs:
                        h.kill()
                        h.wait()
                results[(adapt, busy)] = statistics.median(times)
                print("  adapt=%s busy=%d: %s" % (adapt, busy, " ".join("%.2f" % t for t in times)),
                      flush=True)
        finally:
            server.stop()
    print()
    print("| busy processes | adaptive team (s) | x quiet | fixed team, baseline (s) | x quiet |")
    print("|---|---|---|---|---|")
    for busy in busy_counts:
        a, f = results[(True, busy)], results[(False, busy)]
        print("| %d | %.2f | %.2f | %.2f | %.2f |" % (busy, a, a / results[(True, 0)], f,
                                                      f / results[(False, 0)]))


if __name__ == "__main__":
    main()
