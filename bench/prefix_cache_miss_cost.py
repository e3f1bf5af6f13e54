#!/usr/bin/python3
"""What the prefix state cache costs when nothing is shared (issue #24: "every prompt distinct:
at most 2% slower than cache off"), on against off in one run.

Two attnserve-servers with the default models at once: the cache at its defaults (on) and
--prefix_cache_bytes=0 (off, the named baseline). For each --models model and each prompt length
in --lengths, --pairs distinct prompts (random ids, never repeated, so every lookup misses),
each sent as a new session's first append generating one token, to both servers: time to first
token (append sent -> token received, through gRPC). The order within a pair alternates (on
first, then off first) so that neither server always runs on a machine the other just warmed or
slowed, and the pairs interleave so a drifting machine slows both alike.

Per model and length: median time to first token on and off, the median of the pairs' on / off
ratios with a bootstrap 95% interval (2000 resamples of the pairs), and the ratio of the summed
times (what a server that only ever misses loses in throughput). The cache's hit count
(ListModels) is read back to check that no prompt hit.

  /usr/bin/python3 bench/prefix_cache_miss_cost.py --build-dir build [--models mamba,rwkv,hybrid]
      [--lengths 64,512,4096] [--pairs 40]
"""

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_server import attnserve_stubs, cpu_name  # noqa: E402
from prefix_cache_bench import on_off_servers, time_to_first_token  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--models", default="mamba,rwkv,hybrid")
    p.add_argument("--lengths", default="64,512,4096")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--intra-op-threads", type=int, default=2)
    p.add_argument("--on-flags", default="", help="more flags for the server with the cache")
    p.add_argument("--gap-ms", type=float, default=50, help="idle time before each request")
    return p.parse_args()


def cache_hits(stub, pb):
    """The cache's hits so far (ListModels' prefix_cache), to check that no prompt hit."""
    return stub.ListModels(pb.ListModelsRequest(), timeout=10).prefix_cache.hits


def bootstrap_median(values, rng, resamples=2000):
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def main():
    args = parse_args()
    build = os.path.abspath(args.build_dir)
    grpc, pb, pb_grpc = attnserve_stubs()
    models, lengths = args.models.split(","), [int(n) for n in args.lengths.split(",")]
    threads = "--intra_op_threads=%d" % args.intra_op_threads
    servers = on_off_servers(build, args.intra_op_threads, on_flags=args.on_flags.split())
    print("cpu: %s; %d distinct prompts per length, each a new session generating one token; %s"
          % (cpu_name(), args.pairs, threads))
    rows = []
    try:
        stubs = {k: pb_grpc.AttnServeStub(grpc.insecure_channel(s.target))
                 for k, s in servers.items()}
        rng = random.Random(29)
        for model in models:
            # Warm both servers' allocators and threads on this model (not measured).
            for k in ("on", "off"):
                for _ in range(3):
                    time_to_first_token(stubs[k], pb, model,
                                        [rng.randrange(1, 4000) for _ in range(max(lengths))])
            for n in lengths:
                hits_before = cache_hits(stubs["on"], pb)
                t = {"on": [], "off": []}
                for i in range(args.pairs):
                    prompt = [rng.randrange(1, 4000) for _ in range(n)]
                    for k in (("on", "off") if i % 2 == 0 else ("off", "on")):
                        time.sleep(args.gap_ms / 1e3)  # the other server's threads at rest
                        t[k].append(time_to_first_token(stubs[k], pb, model, prompt))
                if cache_hits(stubs["on"], pb) != hits_before:
                    raise RuntimeError("a distinct prompt hit the cache")
                ratios = [a / b for a, b in zip(t["on"], t["off"])]
                lo, hi = bootstrap_median(ratios, random.Random(n))
                rows.append((model, n, statistics.median(t["on"]), statistics.median(t["off"]),
                             statistics.median(ratios), lo, hi, sum(t["on"]) / sum(t["off"])))
    finally:
        for s in servers.values():
            s.stop()
    print()
    print("| model | prompt tokens | TTFT on (ms) | off (ms) | pairs' on / off, median [95%] "
          "| summed on / off |")
    print("|---|---|---|---|---|---|")
    for model, n, on, off, r, lo, hi, total in rows:
        print("| %s | %d | %.2f | %.2f | %.3f [%.3f, %.3f] | %.3f |" %
              (model, n, 1e3 * on, 1e3 * off, r, lo, hi, total))


if __name__ == "__main__":
    main()
