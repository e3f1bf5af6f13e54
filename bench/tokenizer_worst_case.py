#!/usr/bin/python3
"""What one request's text can cost: attnserve's tokenizer (server/text/) on 1 MiB texts that
are hard for BPE, against 1 MiB of prose (the named baseline) in the same run, one thread, for
the GPT-NeoX and a Llama-3 tokenizer.json.

The hard texts: random lowercase letters without a space and one repeated letter (each one BPE
piece of 1 MiB: the merges of a piece are O(n log n)), and CJK without spaces. Each row: ms for
the MiB (the fastest of --repeats passes), ns per byte, and the ratio to prose's cost per byte.
The ratio is what --max_text_bytes bounds a request to: one request's tokenizing costs at most
(worst ratio) x (prose's ms per MiB) x --max_text_bytes / 1 MiB of one request-work thread.

    bench/tokenizer_worst_case.py --build build --node-modules build/tests/deploy-npm/node_modules
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "text"))
from bench_server import cpu_name  # noqa: E402
import golden_test  # noqa: E402

MIB = 1 << 20


def texts(source):
    rng = random.Random(54)
    docs = []
    for name in sorted(os.listdir(os.path.join(source, "docs"))):
        if name.endswith(".md"):
            with open(os.path.join(source, "docs", name), encoding="utf-8") as f:
                docs.append(f.read())
    prose = "\n".join(docs)
    prose = (prose * (MIB // len(prose.encode()) + 1)).encode()[:MIB].decode("utf-8", "ignore")
    cjk = "".join(chr(rng.randrange(0x4E00, 0x9FA0)) for _ in range(MIB // 3))
    return [
        ("prose (the docs)", prose),
        ("random letters, no space", "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                                             for _ in range(MIB))),
        ("one letter repeated", "a" * MIB),
        ("CJK, no space", cjk),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--node-modules", default="build/tests/deploy-npm/node_modules")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    source = os.path.join(HERE, "..")
    tool = os.path.join(args.build, "tests", "text", "attnserve_text_tool")
    print("CPU: %s; one thread; the fastest of %d passes" % (cpu_name(), args.repeats))
    print("| tokenizer | text | bytes | tokens | ms | ns/byte | x prose |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, path, _ in golden_test.tokenizers(source, args.node_modules):
        if not os.path.exists(path):
            print("| %s | (missing: %s) | | | | | |" % (name, path))
            continue
        prose_ns = None
        for label, text in texts(source):
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", delete=False) as f:
                f.write(text)
            try:
                out = subprocess.run([tool, "bench", path, f.name, str(args.repeats)],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
            finally:
                os.unlink(f.name)
            ns = r["seconds"] * 1e9 / r["bytes"]
            prose_ns = prose_ns or ns
            worst = max(worst, ns / prose_ns)
            print("| %s | %s | %d | %d | %.1f | %.0f | %.2f |" % (
                name, label, r["bytes"], r["tokens"], r["seconds"] * 1000, ns, ns / prose_ns))
    print("worst case: %.2fx prose's cost per byte" % worst)


if __name__ == "__main__":
    main()
