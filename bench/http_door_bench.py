#!/usr/bin/python3
"""The OpenAI-compatible HTTP door against the AttnServe gRPC door, same run, same server (issue #53).

One attnserve-server (its default models, the prefix cache off so that no request reuses
another's state):

  stream    C concurrent clients (1 and 16), each running --rounds streamed generations of
            --new-tokens (128) greedy tokens from a fresh random --prompt-tokens (16) prompt,
            end-of-text ignored: HTTP POST /v1/completions with stream: true (and logprobs: 0,
            so that every token is one SSE chunk, whatever its text) against AttnServe Stream
            (open, one append with GenerateSpec, close). The doors alternate round by round.
            Reports tokens/s over all clients and the median time to first token (TTFT) of
            each door, and HTTP / AttnServe.
  n         n = 8 completions (--n-tokens 16 each) of one --n-prompt-tokens (2000) prompt in one
            request against 8 separate concurrent requests of the same prompt (different seeds),
            --n-rounds of each, alternating; median wall time of each and the ratio. Run twice:
            with the prefix cache off, and with it on (the server's default), where the 8
            separate requests may reuse each other's prefix.

  /usr/bin/python3 bench/http_door_bench.py --build-dir build [--model mamba]
"""

import argparse
import http.client
import json
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_server import Server, attnserve_stubs, cpu_name  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--model", default="mamba")
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--clients", default="1,16")
    p.add_argument("--n-model", default="standard")
    p.add_argument("--n-prompt-tokens", type=int, default=2000)
    p.add_argument("--n-tokens", type=int, default=16)
    p.add_argument("--n-rounds", type=int, default=3)
    return p.parse_args()


class HttpServer(Server):
    """Server that also reads the HTTP door's port."""

    def __init__(self, build, *flags):
        super().__init__(build, "--http_port=0", "--http_host=127.0.0.1", *flags)
        import re
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            m = re.search(r"OpenAI-compatible HTTP on [0-9.]+:(\d+)", line)
            if m:
                self.http_port = int(m.group(1))
                return
        raise RuntimeError("no HTTP port:\n" + "\n".join(self.lines))


def connect(port, timeout):
    """A connection with Nagle's algorithm off: http.client sends the headers and the body in
    two writes, and the second would wait for the server's delayed ACK (40 ms)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def http_stream(port, body):
    """(ttft seconds, tokens, seconds) of one streamed completion."""
    start = time.perf_counter()
    conn = connect(port, 300)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.read()
    first, tokens = None, 0
    for line in r:
        if not line.startswith(b"data: "):
            continue
        if line.startswith(b"data: [DONE]"):
            break
        chunk = json.loads(line[6:])
        for c in chunk.get("choices", []):
            lp = c.get("logprobs")
            if lp and lp.get("tokens"):
                if first is None:
                    first = time.perf_counter() - start
                tokens += len(lp["tokens"])
    conn.close()
    return first, tokens, time.perf_counter() - start


def grpc_stream(stub, apb, model, ids, new_tokens):
    start = time.perf_counter()
    msgs = [apb.StreamRequest(open=apb.StreamOpen(model=model)),
            apb.StreamRequest(append=apb.StreamAppend(
                sequence_number=1, tokens=ids,
                generate=apb.GenerateSpec(max_new_tokens=new_tokens, ignore_eos=True))),
            apb.StreamRequest(close=apb.StreamClose())]
    first, tokens = None, 0
    for r in stub.Stream(iter(msgs), timeout=300):
        if r.WhichOneof("kind") == "generated":
            if first is None:
                first = time.perf_counter() - start
            tokens += 1
    return first, tokens, time.perf_counter() - start


def concurrent(clients, fn):
    """Runs fn(i) on `clients` threads at once; (results, wall seconds)."""
    results = [None] * clients
    barrier = threading.Barrier(clients + 1)

    def run(i):
        barrier.wait()
        results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return results, time.perf_counter() - start


def completion(port, body):
    conn = connect(port, 600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = json.loads(r.read())
    assert r.status == 200, data
    conn.close()
    return data


def bench_n(args, port, label, rng):
    one, separate = [], []
    for rnd in range(args.n_rounds):
        order = ("one", "separate") if rnd % 2 == 0 else ("separate", "one")
        for kind in order:
            # A fresh prompt for each: nothing of it is in the prefix cache.
            prompt = [rng.randrange(1, 250) for _ in range(args.n_prompt_tokens)]
            body = {"model": args.n_model, "prompt": prompt, "max_tokens": args.n_tokens,
                    "ignore_eos": True, "temperature": 1}
            if kind == "one":
                t = time.perf_counter()
                data = completion(port, dict(body, n=8, seed=rnd))
                one.append(time.perf_counter() - t)
                assert len(data["choices"]) == 8
            else:
                _, wall = concurrent(8, lambda i: completion(port, dict(body, seed=rnd * 8 + i)))
                separate.append(wall)
    a, b = statistics.median(one), statistics.median(separate)
    print("| %s | %d | %.3f s | %.3f s | **%.2fx** |" % (label, args.n_prompt_tokens, a, b, b / a))


def main():
    args = parse_args()
    grpc, apb, apb_grpc = attnserve_stubs()
    rng = random.Random(1)
    print("CPU: %s" % cpu_name())
    server = HttpServer(args.build_dir, "--prefix_cache_bytes=0", "--max_new_tokens=4096")
    try:
        channel = grpc.insecure_channel(server.target)
        stub = apb_grpc.AttnServeStub(channel)
        print("\nStreamed generation, model %s, %d-token prompts, %d tokens each, greedy\n" %
              (args.model, args.prompt_tokens, args.new_tokens))
        print("| clients | HTTP tok/s | AttnServe tok/s | HTTP / AttnServe | HTTP TTFT p50 | "
              "AttnServe TTFT p50 | HTTP / AttnServe |")
        print("|---|---|---|---|---|---|---|")
        # Warm-up: the first request of each door (connections, threads, pages) is not counted.
        http_stream(server.http_port, {"model": args.model, "prompt": [1, 2, 3], "max_tokens": 8,
                                       "stream": True, "logprobs": 0, "ignore_eos": True})
        grpc_stream(stub, apb, args.model, [1, 2, 3], 8)
        for clients in [int(c) for c in args.clients.split(",")]:
            stats = {"http": ([], 0, 0.0), "grpc": ([], 0, 0.0)}
            for rnd in range(args.rounds):
                order = ("http", "grpc") if rnd % 2 == 0 else ("grpc", "http")
                for door in order:
                    prompts = [[rng.randrange(1, 250) for _ in range(args.prompt_tokens)]
                               for _ in range(clients)]
                    if door == "http":
                        fn = lambda i: http_stream(server.http_port, {
                            "model": args.model, "prompt": prompts[i],
                            "max_tokens": args.new_tokens, "temperature": 0,
                            "ignore_eos": True, "stream": True, "logprobs": 0})
                    else:
                        fn = lambda i: grpc_stream(stub, apb, args.model, prompts[i],
                                                   args.new_tokens)
                    results, wall = concurrent(clients, fn)
                    ttfts, tokens, seconds = stats[door]
                    ttfts += [r[0] for r in results]
                    assert all(r[1] == args.new_tokens for r in results), results
                    stats[door] = (ttfts, tokens + sum(r[1] for r in results), seconds + wall)
            h, g = stats["http"], stats["grpc"]
            h_tps, g_tps = h[1] / h[2], g[1] / g[2]
            h_ttft, g_ttft = statistics.median(h[0]), statistics.median(g[0])
            print("| %d | %.0f | %.0f | **%.3f** | %.1f ms | %.1f ms | **%.3f** |" %
                  (clients, h_tps, g_tps, h_tps / g_tps, h_ttft * 1e3, g_ttft * 1e3,
                   h_ttft / g_ttft))
        print("\nn = 8 in one request against 8 separate concurrent requests, model %s, "
              "%d tokens each\n" % (args.n_model, args.n_tokens))
        print("| prefix cache | prompt tokens | n = 8 | 8 requests | 8 requests / n = 8 |")
        print("|---|---|---|---|---|")
        bench_n(args, server.http_port, "off", rng)
    finally:
        server.stop()
    server = HttpServer(args.build_dir, "--max_new_tokens=4096")
    try:
        bench_n(args, server.http_port, "on (default)", rng)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
