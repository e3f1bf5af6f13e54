#!/usr/bin/python3
"""Tokenizer encode throughput (MB/s, one thread): attnserve's server/text against Hugging
Face's JavaScript tokenizer (npm @huggingface/tokenizers, the baseline) in the same run, on
the same text (README.md repeated 20 times, and the golden corpus), for the GPT-NeoX and a
Llama-3 tokenizer.json; with the load time and the tables' memory of attnserve's. Then (unless
--no-prefill) what text costs a request: a 4096-token prompt to a mamba-130m-shaped model with
the GPT-NeoX tokenizer, Infer with the text against Infer with its ids (server timings), and
the tokenizing alone against the prefill.

    bench/tokenizer_bench.py --build build --node-modules build/tests/deploy-npm/node_modules
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "text"))
from bench_server import cpu_name  # noqa: E402
import golden_test  # noqa: E402


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--node-modules", default="build/tests/deploy-npm/node_modules")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-prefill", action="store_true")
    args = ap.parse_args()
    source = os.path.join(HERE, "..")
    tool = os.path.join(args.build, "tests", "text", "attnserve_text_tool")
    with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    texts = {"README x20": readme * 20}
    print(f"CPU: {cpu_name()}; one thread each; the fastest of {args.repeats} passes in one process"
          " (the first pass warms caches and the JavaScript JIT)")
    print(f"| tokenizer | text | MB | attnserve MB/s | @huggingface/tokenizers MB/s | ratio |"
          f" tokens | load s | tables MiB | load RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, path, _ in golden_test.tokenizers(source, args.node_modules):
        corpus = subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "text",
                                                              "make_corpus.py"), "--source-dir",
                                 source, "--tokenizer", path], capture_output=True, text=True,
                                check=True).stdout
        texts["golden corpus"] = "\n".join(json.loads(l) for l in corpus.split("\n") if l)
        for label, text in texts.items():
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", delete=False) as f:
                f.write(text)
            try:
                ours = run_json([tool, "bench", path, f.name, str(args.repeats)])
                js = run_json(["node", os.path.join(HERE, "tokenizer_encode.mjs"),
                               args.node_modules, path, f.name, str(args.repeats)])
            finally:
                os.unlink(f.name)
            if ours["tokens"] != js["tokens"]:
                sys.exit(f"{name} {label}: {ours['tokens']} tokens here, {js['tokens']} in JS")
            mbs = ours["bytes"] / ours["seconds"] / 1e6
            jmbs = js["bytes"] / js["seconds"] / 1e6
            print(f"| {name} | {label} | {ours['bytes'] / 1e6:.2f} | {mbs:.2f} | {jmbs:.2f} |"
                  f" {mbs / jmbs:.1f}x | {ours['tokens']} | {ours['load_seconds']:.2f} |"
                  f" {ours['memory_bytes'] / 2**20:.1f} | {ours['load_rss_bytes'] / 2**20:.1f} |")
    if not args.no_prefill:
        neox = golden_test.tokenizers(source, args.node_modules)[0][1]
        prefill_cost(os.path.abspath(args.build), neox, source)


def prefill_cost(build, neox_json, source):
    """Infer of a 4096-token prompt as text and as ids on a mamba-130m-shaped model."""
    import shutil
    import grpc
    from bench_server import Server
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
    import python_client_test
    from batched_decode import MAMBA_130M_CONFIG
    work = tempfile.mkdtemp(prefix="attnserve-tokbench-")
    try:
        python_client_test.generate_stubs(source, work)
        from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pbg
        config = os.path.join(work, "config.json")
        with open(config, "w") as f:
            json.dump(MAMBA_130M_CONFIG, f)
        repo = os.path.join(work, "repo")
        subprocess.run([os.path.join(build, "server", "model", "attnserve-export-model"),
                        f"--config={config}", "--name=mamba-130m", f"--out={repo}"], check=True,
                       capture_output=True)
        shutil.copy(neox_json, os.path.join(repo, "mamba-130m", "tokenizer.json"))
        server = Server(build, f"--model_repository={repo}", "--policy=mamba-130m",
                        "--prefix_cache_bytes=0")
        try:
            channel = grpc.insecure_channel(server.target)
            stub = pbg.AttnServeStub(channel)
            with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
                text = f.read() * 4
            ids = list(stub.Tokenize(pb.TokenizeRequest(model="mamba-130m", text=text.encode()),
                                     timeout=60).tokens)[:4096]
            text = stub.Detokenize(pb.DetokenizeRequest(model="mamba-130m", tokens=ids),
                                   timeout=60).text
            ids = list(stub.Tokenize(pb.TokenizeRequest(model="mamba-130m", text=text.encode()),
                                     timeout=60).tokens)
            rows = []
            for label, request in (("ids", pb.InferRequest(model="mamba-130m", tokens=ids)),
                                   ("text", pb.InferRequest(model="mamba-130m",
                                                            text=text.encode()))):
                best = None
                for _ in range(2):
                    start = time.monotonic()
                    r = stub.Infer(request, timeout=600)
                    wall = time.monotonic() - start
                    if best is None or wall < best[0]:
                        best = (wall, r.timings.compute_seconds)
                rows.append((label, *best))
            tokenize = min(timed(lambda: stub.Tokenize(pb.TokenizeRequest(
                model="mamba-130m", text=text.encode()), timeout=60)) for _ in range(5))
            channel.close()
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nA {len(ids)}-token prompt ({len(text.encode())} bytes) to mamba-130m-shaped "
          f"(random weights, 2 threads), best of 2:")
    print("| prompt as | Infer wall s | compute s |")
    print("|---|---|---|")
    for label, wall, compute in rows:
        print(f"| {label} | {wall:.3f} | {compute:.3f} |")
    print(f"Tokenize RPC alone (best of 5): {tokenize * 1000:.2f} ms = "
          f"{100 * tokenize / rows[0][2]:.3f}% of the prefill's compute (target <= 2%)")


def timed(fn):
    start = time.monotonic()
    fn()
    return time.monotonic() - start


if __name__ == "__main__":
    main()
