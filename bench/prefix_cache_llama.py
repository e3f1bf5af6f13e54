#!/usr/bin/python3
"""attnserve's prefix state cache against llama.cpp's server on the same folder, in one run
(issue #24): the requests of ../shared/peers/README.md ("Prefix reuse"): a prompt of 2000
random token ids + 3 more, one token generated; then, for each repetition, a prompt with the
same 2000-token prefix and 3 other tokens (a hit) and a prompt with no prefix in common (a miss).

  attnserve   attnserve-server --model_repository (the mamba-130m-shaped random-weight folder
              of bench/batched_decode.py), each prompt a new session (StreamOpen, one append
              generating 1 token); time to first token = the append sent -> the token received.
              With the cache as it is by default (interval 256, the state 64 tokens before
              each prompt's end too), without that tail checkpoint (--prefix_cache_tail=0), and
              off (--prefix_cache_bytes=0).
  llama.cpp   ../shared/peers/llamacpp.sh server on the folder converted to an f32 GGUF by
              llama.cpp's own converter; POST /completion {"prompt": ids, "n_predict": 1,
              "cache_prompt": true}; time to first token = the request -> the reply (one token),
              and its own timings (prompt_n: tokens computed, cache_n: tokens reused).

Each request goes to every server in turn, so drift slows all alike. Prints a table of median
times (ms) and the tokens each recomputed; the CPU.

  /usr/bin/python3 bench/prefix_cache_llama.py [--build-dir build] [--reps 5] [--workdir DIR]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GAP_S = 0.05  # idle before each request: the previous server's threads at rest
sys.path.insert(0, str(REPO / "bench"))
from batched_decode import MODEL, mamba_130m_repository  # noqa: E402
from bench_server import attnserve_stubs, Server, cpu_name  # noqa: E402
from prefix_cache_bench import time_to_first_token  # noqa: E402

LLAMA_PORT = 8089


def llama_completion(prompt):
    body = json.dumps({"prompt": prompt, "n_predict": 1, "cache_prompt": True}).encode()
    request = urllib.request.Request("http://127.0.0.1:%d/completion" % LLAMA_PORT, body,
                                     {"Content-Type": "application/json"})
    start = time.perf_counter()
    reply = json.loads(urllib.request.urlopen(request, timeout=600).read())
    elapsed = time.perf_counter() - start
    timings = reply.get("timings", {})
    return elapsed, timings.get("prompt_n"), timings.get("cache_n")


def wait_llama(proc, deadline_s=300):
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("llama-server exited")
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/health" % LLAMA_PORT, timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("llama-server did not become ready")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--llamacpp", default=str(REPO.parent / "shared" / "peers" / "llamacpp.sh"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--prefix", type=int, default=2000)
    p.add_argument("--workdir", help="keep the folder and the GGUF here (default: a temp dir)")
    args = p.parse_args()
    build = Path(args.build_dir).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="attnserve-prefix-llama-")
    work = Path(args.workdir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    repo = mamba_130m_repository(build, work)
    gguf = work / f"{MODEL}-f32.gguf"
    if not gguf.exists():
        subprocess.run([args.llamacpp, "convert", str(repo / MODEL), str(gguf), "f32"],
                       check=True, capture_output=True)
    grpc, pb, pb_grpc = attnserve_stubs()

    rng = random.Random(11)
    vocab = 50000
    prefix = [rng.randrange(1, vocab) for _ in range(args.prefix)]
    first = prefix + [rng.randrange(1, vocab) for _ in range(3)]
    hits = [prefix + [rng.randrange(1, vocab) for _ in range(3)] for _ in range(args.reps)]
    misses = [[rng.randrange(1, vocab) for _ in range(args.prefix + 3)] for _ in range(args.reps)]

    # --adapt_threads_to_load=false and a pause before each request: see
    # prefix_cache_bench.on_off_servers (a server sampling the load right after another's
    # prefill computed on one thread).
    common = [f"--model_repository={repo}", f"--policy={MODEL}", "--intra_op_threads=2",
              "--adapt_threads_to_load=false"]
    ours = {"cache": Server(build, *common),
            "cache, no tail": Server(build, *common, "--prefix_cache_tail=0"),
            "cache off": Server(build, *common, "--prefix_cache_bytes=0")}
    llama = subprocess.Popen([args.llamacpp, "server", str(gguf), "--port", str(LLAMA_PORT)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = {}
    try:
        wait_llama(llama)
        stubs = {k: pb_grpc.AttnServeStub(grpc.insecure_channel(s.target))
                 for k, s in ours.items()}

        def one(kind, prompt):
            for name, stub in stubs.items():
                time.sleep(GAP_S)
                times.setdefault((name, kind), []).append(
                    (time_to_first_token(stub, pb, MODEL, prompt), None))
            time.sleep(GAP_S)
            elapsed, computed, cached = llama_completion(prompt)
            times.setdefault(("llama-server", kind), []).append((elapsed, (computed, cached)))

        one("first (cold)", first)
        for rep in range(args.reps):
            one("hit: same 2000-token prefix, 3 other tokens", hits[rep])
            one("miss: nothing in common", misses[rep])
            # The next hit shares the prefix with the first prompt, not with this miss: llama
            # -server's one slot now holds the miss, so its next hit restores a checkpoint.
    finally:
        for s in ours.values():
            s.stop()
        llama.terminate()
        try:
            llama.wait(30)
        except subprocess.TimeoutExpired:
            llama.kill()

    print(f"# prefix_cache_llama: {MODEL} (random weights), prompt {args.prefix} + 3 tokens, "
          f"1 generated, {args.reps} reps; CPU {cpu_name()}, {os.cpu_count()} cores")
    names = list(ours) + ["llama-server"]
    kinds = []
    for name, kind in times:
        if kind not in kinds:
            kinds.append(kind)
    print()
    print("| request | " + " | ".join(names) + " | llama-server computed / reused tokens |")
    print("|---|" + "---|" * (len(names) + 1))
    for kind in kinds:
        cells = ["%.0f ms" % (1e3 * statistics.median(t for t, _ in times[(n, kind)]))
                 for n in names]
        counts = times[("llama-server", kind)][-1][1]
        print("| %s | %s | %s / %s |" % (kind, " | ".join(cells), counts[0], counts[1]))
    hit = "hit: same 2000-token prefix, 3 other tokens"
    for name in ours:
        ratio = statistics.median(t for t, _ in times[(name, hit)]) / statistics.median(
            t for t, _ in times[("llama-server", hit)])
        print(f"\n{name}: a hit takes {ratio:.2f}x llama-server's (target: at most 0.5x)")


if __name__ == "__main__":
    main()
