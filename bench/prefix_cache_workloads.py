#!/usr/bin/python3
"""The prefix state cache under two more workloads of issue #24, cache on against off in one
run (two attnserve-servers with the default models at once, requests sent to each in turn):

  multi-turn  --clients chat clients x --turns turns; each turn is a new session (as stateless
              clients do) whose prompt is the whole conversation so far (the previous prompt,
              the reply, a new --message-token message), generating --reply tokens. Per turn:
              median time to first token on and off; in all: the prefill tokens computed
              (prompt tokens minus the cache's hit tokens, attnserve_prefix_cache_hit_tokens_total).
  memory      --prompts distinct prompts (sessionless Infer, --prompt-tokens each) against a cache
              bound of --memory-bound bytes: the cache's bytes (attnserve_prefix_cache_bytes),
              sampled every 500 prompts, never above the bound; evictions counted.

  /usr/bin/python3 bench/prefix_cache_workloads.py --build-dir build [--models mamba,hybrid]
"""

import argparse
import os
import random
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_server import attnserve_stubs, Server, cpu_name  # noqa: E402
from prefix_cache_bench import time_to_first_token  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--models", default="mamba,hybrid")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--message", type=int, default=64)
    p.add_argument("--reply", type=int, default=16)
    p.add_argument("--prompts", type=int, default=10000)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--memory-bound", type=int, default=64 << 20)
    p.add_argument("--intra-op-threads", type=int, default=2)
    return p.parse_args()


def start(build, *flags):
    """A server with a metrics port; returns it and its /metrics URL."""
    s = Server(build, "--metrics_port=0", *flags)
    url = None
    for line in s.lines:
        m = re.search(r"metrics on ([^ ]+):(\d+)/metrics", line)
        if m:
            url = "http://127.0.0.1:%s/metrics" % m.group(2)
    if url is None:
        s.stop()
        raise RuntimeError("no metrics port in the server's log")
    return s, url


def metric(url, name, model=None):
    """The sum of a metric's samples (those of `model` only when given)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            if model is None or 'variant="%s"' % model in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def generate(stub, pb, model, prompt, n):
    requests = [pb.StreamRequest(open=pb.StreamOpen(model=model)),
                pb.StreamRequest(append=pb.StreamAppend(
                    sequence_number=1, tokens=prompt, output=pb.OutputSpec(kind=pb.OUTPUT_KIND_NONE),
                    generate=pb.GenerateSpec(max_new_tokens=n))),
                pb.StreamRequest(close=pb.StreamClose())]
    out = list(stub.Stream(iter(requests), timeout=600))
    return [r.generated.token for r in out if r.HasField("generated")]


def multi_turn(build, model, args, pb, pb_grpc, grpc):
    # Each keeps its whole team: see prefix_cache_bench.on_off_servers (a server sampling the
    # load right after the other's prefill computed on one thread).
    threads = ("--intra_op_threads=%d" % args.intra_op_threads, "--adapt_threads_to_load=false")
    servers = {"on": start(build, *threads),
               "off": start(build, *threads, "--prefix_cache_bytes=0")}
    try:
        stubs = {k: pb_grpc.AttnServeStub(grpc.insecure_channel(s.target)) for k, (s, _) in servers.items()}
        rng = random.Random(11)
        conversations = [[] for _ in range(args.clients)]
        ttft = {(k, t): [] for k in servers for t in range(args.turns)}
        prompt_tokens = 0
        hits_before = metric(servers["on"][1], "attnserve_prefix_cache_hit_tokens_total", model)
        for turn in range(args.turns):
            for c in range(args.clients):
                conversations[c] += [rng.randrange(1, 4000) for _ in range(args.message)]
                prompt = list(conversations[c])
                prompt_tokens += len(prompt)
                for k in ("on", "off"):
                    ttft[(k, turn)].append(time_to_first_token(stubs[k], pb, model, prompt))
                # The reply (greedy: the same on both servers) joins the conversation.
                conversations[c] += generate(stubs["off"], pb, model, prompt, args.reply)
        hit = metric(servers["on"][1], "attnserve_prefix_cache_hit_tokens_total", model) - hits_before
    finally:
        for s, _ in servers.values():
            s.stop()
    return ttft, prompt_tokens, hit


def memory(build, model, args, pb, pb_grpc, grpc):
    server, url = start(build, "--intra_op_threads=%d" % args.intra_op_threads,
                        "--prefix_cache_bytes=%d" % args.memory_bound)
    try:
        stub = pb_grpc.AttnServeStub(grpc.insecure_channel(server.target))
        rng = random.Random(13)
        peak, samples = 0.0, []
        start_t = time.monotonic()
        for i in range(args.prompts):
            tokens = [rng.randrange(1, 4000) for _ in range(args.prompt_tokens)]
            stub.Infer(pb.InferRequest(model=model, tokens=tokens), timeout=60)
            if (i + 1) % 500 == 0:
                b = metric(url, "attnserve_prefix_cache_bytes")
                samples.append(b)
                peak = max(peak, b)
        seconds = time.monotonic() - start_t
        entries = metric(url, "attnserve_prefix_cache_entries")
        evictions = metric(url, "attnserve_prefix_cache_evictions_total")
        rss = int(open("/proc/%d/statm" % server.proc.pid).read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    finally:
        server.stop()
    return peak, samples[-1] if samples else 0, entries, evictions, rss, seconds


def main():
    args = parse_args()
    build = os.path.abspath(args.build_dir)
    grpc, pb, pb_grpc = attnserve_stubs()
    print("cpu: %s; --intra_op_threads=%d" % (cpu_name(), args.intra_op_threads))
    for model in args.models.split(","):
        ttft, prompt_tokens, hit = multi_turn(build, model, args, pb, pb_grpc, grpc)
        print("\n%s, multi-turn: %d clients x %d turns, +%d tokens a turn, %d-token replies" %
              (model, args.clients, args.turns, args.message, args.reply))
        print("| turn | prompt tokens | TTFT on (ms) | off (ms) | off / on |")
        print("|---|---|---|---|---|")
        for t in range(args.turns):
            on, off = statistics.median(ttft[("on", t)]), statistics.median(ttft[("off", t)])
            length = (t + 1) * args.message + t * args.reply
            print("| %d | %d | %.1f | %.1f | %.2fx |" % (t + 1, length, 1e3 * on, 1e3 * off, off / on))
        print("prefill tokens computed: off %d, on %d (%.1f%% of off; %d served from the cache)" %
              (prompt_tokens, prompt_tokens - hit, 100 * (prompt_tokens - hit) / prompt_tokens, hit))
        peak, last, entries, evictions, rss, seconds = memory(build, model, args, pb, pb_grpc, grpc)
        print("%s, memory: %d distinct %d-token prompts in %.0f s, bound %.1f MiB: peak %.1f MiB, "
              "last %.1f MiB, %d entries, %d evictions, server RSS %.0f MiB; within the bound: %s" %
              (model, args.prompts, args.prompt_tokens, seconds, args.memory_bound / 2**20, peak / 2**20,
               last / 2**20, entries, evictions, rss / 2**20, "yes" if peak <= args.memory_bound else "NO"))


if __name__ == "__main__":
    main()
