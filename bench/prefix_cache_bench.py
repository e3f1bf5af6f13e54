#!/usr/bin/python3
"""The prefix state cache, on against off, in one run (issue #24).

attnserve-server with its default models, twice at once: --prefix_cache_bytes at its default
(on) and 0 (off, the named baseline), each prompt sent to one then the other. For each
--models model:

  shared   --sessions sessions, one after another, each a new session whose first append is
           a common --prefix-token prefix plus --suffix tokens of its own, generating one token;
           time to first token (the append sent -> the generated token received), median over
           the sessions after the first (the first fills the cache) and the first's;
  distinct the same with every prompt distinct (no sharing): the cache's cost when it never
           hits.

Prints a table per model: median time to first token on and off, their ratio; the CPU model.

  /usr/bin/python3 bench/prefix_cache_bench.py --build-dir build [--models mamba,rwkv,hybrid]
      [--mamba-130m [--workdir DIR]] [--sessions 32] [--on-flags F] [--common-flags F]
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_server import attnserve_stubs, Server, cpu_name  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--models", default="mamba,rwkv,hybrid")
    p.add_argument("--sessions", type=int, default=32)
    p.add_argument("--prefix", type=int, default=4000)
    p.add_argument("--suffix", type=int, default=96)
    p.add_argument("--intra-op-threads", type=int, default=2)
    p.add_argument("--on-flags", default="", help="more flags for the server with the cache")
    p.add_argument("--common-flags", default="", help="more flags for both servers")
    p.add_argument("--mamba-130m", action="store_true",
                   help="serve the random-weight mamba-130m-shaped folder of "
                        "bench/batched_decode.py (model 'mamba-130m') instead of the defaults")
    p.add_argument("--workdir", default="", help="where that folder is written (kept)")
    p.add_argument("--gap-ms", type=float, default=50,
                   help="idle time before each request, so that the other server's threads have "
                        "stopped spinning (OpenMP's wait) when it starts")
    return p.parse_args()


def time_to_first_token(stub, pb, model, prompt):
    requests = [pb.StreamRequest(open=pb.StreamOpen(model=model)),
                pb.StreamRequest(append=pb.StreamAppend(
                    sequence_number=1, tokens=prompt,
                    output=pb.OutputSpec(kind=pb.OUTPUT_KIND_NONE),
                    generate=pb.GenerateSpec(max_new_tokens=1))),
                pb.StreamRequest(close=pb.StreamClose())]
    sent = {}

    def gen():
        yield requests[0]
        sent["t"] = time.perf_counter()
        yield requests[1]
        yield requests[2]

    first = None
    for response in stub.Stream(gen(), timeout=600):
        if response.HasField("generated") and first is None:
            first = time.perf_counter() - sent["t"]
    return first


def on_off_servers(build, threads, common=(), on_flags=()):
    """attnserve-servers with the cache at its defaults ("on") and --prefix_cache_bytes=0
    ("off", the named baseline); `common`: flags for both.

    Both keep their kernels' team at --intra_op_threads (--adapt_threads_to_load=false): the
    requests these benchmarks send never overlap, but a server sampling the machine's load right
    after the other's long prefill (its threads still spinning down) counted them as contention
    and computed the next short prompt on one thread (a mamba-130m hit took 320 ms so, 151 ms
    alone)."""
    common = ("--intra_op_threads=%d" % threads, "--adapt_threads_to_load=false") + tuple(common)
    return {"on": Server(build, *common, *on_flags),
            "off": Server(build, *common, "--prefix_cache_bytes=0")}


def run(build, models, args, pb, pb_grpc, grpc, common=()):
    """Both servers at once, the same prompts sent to each in turn (on, off, on, off, ...), so
    that a machine whose speed drifts slows both alike, each after --gap-ms of idle time."""
    servers = on_off_servers(build, args.intra_op_threads, common, args.on_flags.split())
    out = {}
    try:
        channels = {k: grpc.insecure_channel(s.target) for k, s in servers.items()}
        stubs = {k: pb_grpc.AttnServeStub(c) for k, c in channels.items()}
        for model in models:
            rng = random.Random(7)
            prefix = [rng.randrange(1, 4000) for _ in range(args.prefix)]
            shared = [prefix + [rng.randrange(1, 4000) for _ in range(args.suffix)]
                      for _ in range(args.sessions)]
            distinct = [[rng.randrange(1, 4000) for _ in range(args.prefix + args.suffix)]
                        for _ in range(max(8, args.sessions // 2))]
            times = {(k, kind): [] for k in servers for kind in ("shared", "distinct")}
            for kind, prompts in (("shared", shared), ("distinct", distinct)):
                for prompt in prompts:
                    for k in ("on", "off"):
                        time.sleep(args.gap_ms / 1e3)
                        times[(k, kind)].append(time_to_first_token(stubs[k], pb, model, prompt))
            out[model] = times
        for c in channels.values():
            c.close()
    finally:
        for s in servers.values():
            s.stop()
    return out


def main():
    args = parse_args()
    build = os.path.abspath(args.build_dir)
    grpc, pb, pb_grpc = attnserve_stubs()
    models = args.models.split(",")
    common = tuple(args.common_flags.split())
    if args.mamba_130m:
        from batched_decode import MODEL, mamba_130m_repository
        work = Path(args.workdir or tempfile.mkdtemp(prefix="attnserve_prefix_bench_130m_"))
        work.mkdir(parents=True, exist_ok=True)
        common += ("--model_repository=%s" % mamba_130m_repository(Path(build), work),
                   "--policy=%s" % MODEL)
        models = [MODEL]
    print("cpu: %s; %d sessions, prefix %d + %d tokens each, one token generated; "
          "--intra_op_threads=%d" % (cpu_name(), args.sessions, args.prefix, args.suffix,
                                     args.intra_op_threads))
    results = run(build, models, args, pb, pb_grpc, grpc, common)
    print()
    print("| model | TTFT, shared prefix, cache on (ms) | off (ms) | off / on | first session on "
          "(ms) | distinct prompts on / off (ms) | on / off |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        t = results[model]
        m_on, m_off = statistics.median(t[("on", "shared")][1:]), statistics.median(
            t[("off", "shared")][1:])
        dm_on, dm_off = statistics.median(t[("on", "distinct")]), statistics.median(
            t[("off", "distinct")])
        print("| %s | %.1f | %.1f | %.1fx | %.1f | %.1f / %.1f | %.3f |" %
              (model, 1e3 * m_on, 1e3 * m_off, m_off / m_on, 1e3 * t[("on", "shared")][0],
               1e3 * dm_on, 1e3 * dm_off, dm_on / dm_off))


if __name__ == "__main__":
    main()
