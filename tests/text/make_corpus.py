#!/usr/bin/python3
"""The tokenizer golden corpus (tests/text/golden_test.py): the project's own docs, then
generated hostile strings. Deterministic (a fixed seed). One JSON string per line.

    make_corpus.py --source-dir DIR --tokenizer TOKENIZER_JSON > corpus.jsonl
"""
import argparse
import glob
import json
import os
import random
import sys


def docs(source_dir):
    texts = []
    files = [os.path.join(source_dir, "README.md")] + sorted(
        glob.glob(os.path.join(source_dir, "docs", "*.md")))
    for f in files:
        with open(f, encoding="utf-8") as fh:
            whole = fh.read()
        texts.append(whole)
        texts.extend(p for p in whole.split("\n\n") if p.strip())
    return texts


def hostile(added_tokens, rng):
    t = []
    # Every plane: letters and symbols of planes 0-3, tags and variation selectors of 14,
    # private use of 15 and 16.
    planes = ["A\u00e9\u0416\u05d0\u0628\u0915\u0e01\u3042\u4e2d\uac00\uff21",
              "\U00010000\U00010400\U0001d400\U0001f600\U0001f9d1\U0001fa70",
              "\U00020000\U0002a700\U0002b820\U0002f800",
              "\U00030000\U00031350",
              "\U000e0041\U000e0100\U000e01ef",
              "\U000f0000\U000ffffd", "\U00100000\U0010fffd"]
    t += planes
    t.append("".join(planes))
    t += [" ".join(planes), "word" + planes[1] + "word"]
    # Emoji with ZWJ, skin tones, flags, keycaps.
    t += ["\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
          "\U0001f44d\U0001f3fd thumbs \U0001f44b\U0001f3ff", "\U0001f3f3\ufe0f\u200d\U0001f308",
          "\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8", "1\ufe0f\u20e3 #\ufe0f\u20e3",
          "\U0001f9d1\u200d\U0001f4bb codes"]
    # CJK, RTL (with direction marks), combining marks, deep combining sequences.
    t += ["日本語のテキストと中文文本和한국어 텍스트。「引用」", "中文，标点！？",
          "مرحبا بالعالم، كيف الحال؟", "שלום עולם", "abc \u200fשלום\u200e def",
          "e\u0301 a\u0300 o\u0302\u0303 n\u0303", "\u1e9b\u0323 \u0041\u030a \u212b \ufb01",
          "Z" + "\u0301\u0300\u0302\u0303\u0304\u0327\u0328" * 8,
          "x" + "\u0300" * 200, "\u0e01\u0e34\u0e4a\u0e4a\u0e4a", "\u1100\u1161\u11a8"]
    # Runs of spaces, tabs and newlines.
    for n in [1, 2, 3, 4, 7, 8, 15, 16, 23, 24, 25, 31, 40]:
        t += [" " * n, "a" + " " * n + "b", "\n" * n, "x" + "\n" * n + "y", "\t" * n]
    t += [" \n \n", "\r\n\r\n", "a \r\n b", "\n\n\n\nend", "  leading", "trailing  ",
          "a\u00a0b\u2003c\u3000d", " \t\n\x0b\x0c\r x"]
    # Digits and numbers.
    t += ["1234567890", "3.14159265358979", "1,000,000.00", "12 345 678", "v1.2.3-rc4",
          "\u0663\u0664\u0665 \u0967\u0968\u0969 \uff11\uff12", "0x1F600 1e-9 -42 +7"]
    # Contractions, in any case.
    t += ["I'm don't you're we've they'll he'd it's", "I'M DON'T YOU'RE WE'VE THEY'LL",
          "it\u2019s rock 'n' roll", "''s 'S 'sS"]
    # Control characters and invisible ones.
    t += ["\x00\x01\x02\x07\x08 bell", "\x1b[31mred\x1b[0m", "zero\u200bwidth\u200c\u200djoin",
          "\x7f\x80\x9f", "soft\u00adhyphen", "line\u2028para\u2029sep",
          "a\ufeffb \ufeff x", "a\u0085b \u0085\u0085 x", "x \u180e y", "ab\u00a0\u00a0 cd"]
    # Every added token inside words, next to others, around spaces.
    for tok in added_tokens:
        c = tok["content"]
        t += [f"foo{c}bar", f"{c}{c}", f" {c} ", f"x{c}\n"]
    # Random mixes of all of the above.
    pool = "".join(t[:60]) + "abcdefghijklmnopqrstuvwxyz ABC  \n\t.,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`"
    pool = list(pool)
    for _ in range(300):
        t.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))
    # Long pieces (one BPE piece of tens of thousands of characters: the merge queue's deep
    # buckets): random letters without a space, one letter repeated, two alternating, CJK.
    letters = "abcdefghijklmnopqrstuvwxyz"
    t += ["".join(rng.choice(letters) for _ in range(n)) for n in (3000, 40000)]
    t += ["a" * 30001, "ab" * 15000, "".join(chr(rng.randrange(0x4E00, 0x9FA0)) for _ in range(8000))]
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--tokenizer", required=True)
    args = ap.parse_args()
    with open(args.tokenizer, encoding="utf-8") as fh:
        added = json.load(fh).get("added_tokens", [])
    rng = random.Random(20261202)
    # At most 40 added tokens (Llama-3 has 256, most of them alike), always the first ones.
    if len(added) > 40:
        added = added[:20] + rng.sample(added[20:], 20)
    for text in docs(args.source_dir) + hostile(added, rng):
        sys.stdout.write(json.dumps(text, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
