#!/usr/bin/python3
"""Tokenizer encode throughput (MB/s, one thread): attnserve's server/text against Hugging
Face's JavaScript tokenizer (npm @huggingface/tokenizers, the baseline) in the same run, on
the same text (README.md repeated 20 times, and the golden corpus), for the GPT-NeoX and a
Llama-3 tokenizer.json; with the load time and the tables' memory of attnserve's.

    bench/tokenizer_bench.py --build build --node-modules build/tests/deploy-npm/node_modules
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

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
    args = ap.parse_args()
    source = os.path.join(HERE, "..")
    tool = os.path.join(args.build, "tests", "text", "attnserve_text_tool")
    with open(os.path.join(source, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    texts = {"README x20": readme * 20}
    print(f"CPU: {cpu_name()}; one thread each; the fastest of {args.repeats} passes in one process"
          " (the first pass warms caches and the JavaScript JIT)")
    print(f"| tokenizer | text | MB | attnserve MB/s | @huggingface/tokenizers MB/s | ratio |"
          f" tokens | load s | tables MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
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
                  f" {ours['memory_bytes'] / 2**20:.1f} |")


if __name__ == "__main__":
    main()
