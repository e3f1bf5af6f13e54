#!/usr/bin/python3
"""Replaces the references of a golden folder by llama.cpp's logits (../shared/peers/llamacpp.sh:
llama.cpp c9ced49's own converter, F32 GGUF): for cases where transformers 4.47.1/4.48.0 is
known to be wrong (Mamba-2 with several groups: B and C repeated with `repeat` instead of
`repeat_interleave`, and the gated norm over all of d_inner instead of each group's span,
fixed upstream in v4.52, #37533). llama.cpp follows mamba_ssm there. reference.json keeps the
prompt, and says whose logits it holds.

Usage: llamacpp_reference.py FOLDER [LLAMACPP_SH]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    folder = os.path.abspath(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    tool = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        here, "..", "..", "..", "..", "shared", "peers", "llamacpp.sh")
    ref_path = os.path.join(folder, "reference.json")
    with open(ref_path) as f:
        ref = json.load(f)
    gen = len(ref["greedy_tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        gguf = os.path.join(tmp, "model.gguf")
        subprocess.run([tool, "convert", folder, gguf, "f32"], check=True,
                       stdout=subprocess.DEVNULL)
        logits, steps = os.path.join(tmp, "all.npy"), os.path.join(tmp, "steps.npy")
        out = subprocess.run([tool, "logits", gguf, ref_path, logits, "--gen", str(gen),
                              "--gen-logits", steps], check=True, capture_output=True, text=True)
        greedy = json.loads(out.stdout.strip().splitlines()[-1])
        all_logits = np.load(logits).astype(np.float64)
        step_logits = np.load(steps).astype(np.float64)
    scale = np.abs(all_logits).max()
    margins = [m / scale for m in greedy["greedy_margins"]]
    if min(margins) < 2e-3:
        sys.exit("greedy margins below 2e-3 of max |logit|: %s" % margins)
    np.save(os.path.join(folder, "logits_all.npy"), all_logits)
    np.save(os.path.join(folder, "greedy_step_logits.npy"), step_logits)
    for stale in ("consistency", "greedy_margins", "greedy_min_margin_rel"):  # transformers'
        ref.pop(stale, None)
    ref.update({
        "reference": "llama.cpp c9ced49 (float32, F32 GGUF from its own convert_hf_to_gguf.py), "
                     "not transformers: see tests/golden/hf/llamacpp_reference.py",
        "logits_last": all_logits[-1].tolist(),
        "greedy_tokens": greedy["greedy_tokens"],
        "greedy_margins_rel": margins,
        "greedy_min_margin_rel": min(margins),
    })
    with open(ref_path, "w") as f:
        json.dump(ref, f, indent=1)
    print("%s: llama.cpp greedy %s, min margin %.3g" % (folder, greedy["greedy_tokens"],
                                                          min(margins)))


if __name__ == "__main__":
    main()
