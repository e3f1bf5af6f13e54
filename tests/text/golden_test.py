#!/usr/bin/python3
"""attnserve's tokenizer against Hugging Face's own (npm @huggingface/tokenizers) on the same
corpus (make_corpus.py: the project's docs and generated hostile strings): the same ids for
every line, the same decoded text, and decode(encode(x)) == NFC(x) (GPT-NeoX normalizes to
NFC) or == x (the Llama-3 file has no normalizer). Exits non-zero, showing the first
differences, on any mismatch.

    golden_test.py --tool build/tests/text/attnserve_text_tool --source-dir . --node-modules DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))


def tokenizers(source_dir, node_modules):
    # ../shared next to the checkout (a CI clone elsewhere: the workspace's /work/shared).
    neox = next((p for p in (os.path.join(d, "tokenizers", "gpt-neox-20b", "tokenizer.json")
                             for d in (os.path.join(source_dir, "..", "shared"), "/work/shared"))
                 if os.path.exists(p)), "../shared/tokenizers/gpt-neox-20b/tokenizer.json")
    llama3 = os.path.join(node_modules, "@lenml", "tokenizer-llama3", "models", "tokenizer.json")
    return [("gpt-neox-20b", neox, "NFC"), ("llama-3", llama3, None)]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return [json.loads(line) for line in r.stdout.split("\n") if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--node-modules", required=True)
    args = ap.parse_args()
    failures = 0
    checked = 0
    for name, path, form in tokenizers(args.source_dir, args.node_modules):
        if not os.path.exists(path):
            sys.exit(f"{name}: {path} is missing (../shared/tokenizers, or the npm fixture)")
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as corpus:
            subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--source-dir",
                            args.source_dir, "--tokenizer", path], stdout=corpus, check=True)
        try:
            texts = [json.loads(l) for l in open(corpus.name, encoding="utf-8").read().split("\n") if l]
            golden = run(["node", os.path.join(HERE, "golden_ids.mjs"), "--node-modules",
                          args.node_modules, path, corpus.name])
            ours = run([args.tool, "encode", path, corpus.name])
        finally:
            os.unlink(corpus.name)
        if not (len(texts) == len(golden) == len(ours)):
            sys.exit(f"{name}: {len(texts)} lines, {len(golden)} golden, {len(ours)} ours")
        bad = []
        for text, g, o in zip(texts, golden, ours):
            expected_text = unicodedata.normalize(form, text) if form else text
            if "ids" not in o:
                bad.append((text, "error: " + o.get("error", "?")))
            elif o["ids"] != g["ids"]:
                bad.append((text, f"ids {o['ids'][:24]} != golden {g['ids'][:24]}"))
            elif o["decoded"] != g["decoded"]:
                bad.append((text, f"decoded {o['decoded'][:60]!r} != golden {g['decoded'][:60]!r}"))
            elif o["decoded"] != expected_text:
                bad.append((text, f"round trip {o['decoded'][:60]!r} != {expected_text[:60]!r}"))
        tokens = sum(len(g["ids"]) for g in golden)
        print(f"{name}: {len(texts)} texts, {tokens} tokens, {len(bad)} differ")
        for text, why in bad[:10]:
            print(f"  {text[:60]!r}: {why}")
        failures += len(bad)
        checked += len(texts)
    if failures or checked == 0:
        sys.exit(f"FAIL: {failures} of {checked} texts differ")
    print(f"OK: {checked} texts, ids and text identical to @huggingface/tokenizers")


if __name__ == "__main__":
    main()
