#!/usr/bin/python3
"""The Open Inference Protocol door against the AttnServe door, same run, same model (issue #23).

One attnserve-server (its default models, the prefix cache off so that no request reuses
another's state), one channel; for --model:

  infer     a --prompt-token (512) request: AttnServe Infer (last logits) against ModelInfer
            (input_ids INT64 [1, L] in raw_input_contents, output logits), --infers of each,
            alternating, every prompt a fresh random one; p50 latency of each door.
  generate  a --gen-prompt-token prompt, --new-tokens (128) tokens generated greedily: AttnServe
            Stream (open, one append with GenerateSpec, close) against ModelStreamInfer (one
            request with max_tokens, a response per token), --generations of each,
            alternating, end-of-text ignored so that every one generates them all; p50
            latency and tokens/s of each door.

Prints the ratios OIP / AttnServe (latency: <= 1.05 meets the issue's target; tokens/s >=
0.95) and the CPU model.

  /usr/bin/python3 bench/oip_bench.py --build-dir build [--model standard]
"""

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_server import Server, cpu_name  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"))
    p.add_argument("--model", default="standard")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--infers", type=int, default=40)
    p.add_argument("--gen-prompt-tokens", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--generations", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def stubs(tmp):
    import subprocess
    import shutil
    proto = REPO / "proto"
    files = [str(p.relative_to(proto)) for d in ("inference", "attnserve/v1")
             for p in sorted((proto / d).glob("*.proto"))]
    subprocess.run(["protoc", "--python_out=" + tmp, "--grpc_out=" + tmp,
                    "--plugin=protoc-gen-grpc=" + shutil.which("grpc_python_plugin"),
                    "-I" + str(proto)] + files, check=True, cwd=proto)
    sys.path.insert(0, tmp)


def main():
    args = parse_args()
    tmp = tempfile.mkdtemp(prefix="attnserve_oip_bench_")
    stubs(tmp)
    import grpc
    import numpy as np
    from attnserve.v1 import inference_pb2 as apb, inference_pb2_grpc as apbg
    from inference import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pbg

    server = Server(args.build_dir, "--prefix_cache_bytes=0",
                    "--max_new_tokens=%d" % max(args.new_tokens, 16))
    rng = random.Random(args.seed)
    try:
        channel = grpc.insecure_channel(server.target)
        grpc.channel_ready_future(channel).result(timeout=60)
        attn, oip = apbg.AttnServeStub(channel), pbg.GRPCInferenceServiceStub(channel)
        vocab = 256  # below every default model's vocabulary (and its byte tokenizer's ids)

        def prompt(n):
            return [rng.randrange(vocab) for _ in range(n)]

        def attn_infer(ids):
            t = time.perf_counter()
            attn.Infer(apb.InferRequest(model=args.model, tokens=ids,
                                        output=apb.OutputSpec(kind=apb.OUTPUT_KIND_LAST_LOGITS)),
                       timeout=120)
            return time.perf_counter() - t

        def oip_infer(ids):
            r = pb.ModelInferRequest(model_name=args.model)
            r.inputs.add(name="input_ids", datatype="INT64", shape=[1, len(ids)])
            r.raw_input_contents.append(np.array(ids, dtype=np.int64).tobytes())
            r.outputs.add(name="logits")
            t = time.perf_counter()
            oip.ModelInfer(r, timeout=120)
            return time.perf_counter() - t

        def attn_generate(ids):
            msgs = [apb.StreamRequest(open=apb.StreamOpen(model=args.model)),
                    apb.StreamRequest(append=apb.StreamAppend(
                        sequence_number=1, tokens=ids,
                        generate=apb.GenerateSpec(max_new_tokens=args.new_tokens,
                                                  ignore_eos=True))),
                    apb.StreamRequest(close=apb.StreamClose())]
            t = time.perf_counter()
            n = sum(1 for r in attn.Stream(iter(msgs), timeout=300)
                    if r.WhichOneof("kind") == "generated")
            return time.perf_counter() - t, n

        def oip_generate(ids):
            r = pb.ModelInferRequest(model_name=args.model)
            r.inputs.add(name="input_ids", datatype="INT64", shape=[1, len(ids)])
            r.raw_input_contents.append(np.array(ids, dtype=np.int64).tobytes())
            r.parameters["max_tokens"].int64_param = args.new_tokens
            r.parameters["ignore_eos"].bool_param = True  # all of them, as AttnServe's
            t = time.perf_counter()
            n = sum(1 for m in oip.ModelStreamInfer(iter([r]), timeout=300)
                    if not m.infer_response.parameters["triton_final_response"].bool_param)
            return time.perf_counter() - t, n

        for _ in range(3):  # warm both paths up
            attn_infer(prompt(args.prompt_tokens))
            oip_infer(prompt(args.prompt_tokens))
        a_inf, o_inf = [], []
        for i in range(args.infers):
            first, second = (attn_infer, oip_infer) if i % 2 == 0 else (oip_infer, attn_infer)
            for f in (first, second):
                (a_inf if f is attn_infer else o_inf).append(f(prompt(args.prompt_tokens)))
        a_gen, o_gen = [], []
        for i in range(args.generations):
            order = (attn_generate, oip_generate) if i % 2 == 0 else (oip_generate, attn_generate)
            for f in order:
                (a_gen if f is attn_generate else o_gen).append(f(prompt(args.gen_prompt_tokens)))
    finally:
        server.stop()

    def p50(xs):
        return statistics.median(xs)

    a_lat, o_lat = p50(a_inf), p50(o_inf)
    ag_lat, og_lat = p50([t for t, _ in a_gen]), p50([t for t, _ in o_gen])
    ag_tps = p50([n / t for t, n in a_gen])
    og_tps = p50([n / t for t, n in o_gen])
    counts = sorted({n for _, n in a_gen} | {n for _, n in o_gen})
    print("CPU: %s; model %s; prefix cache off; one server, one channel, alternating" %
          (cpu_name(), args.model))
    print("| measure | AttnServe | OIP | OIP / AttnServe |")
    print("|---|---|---|---|")
    print("| %d-token infer, p50 latency (ms, %d each) | %.2f | %.2f | %.3f |" %
          (args.prompt_tokens, args.infers, a_lat * 1e3, o_lat * 1e3, o_lat / a_lat))
    print("| %d-token generation, p50 latency (ms, %d each) | %.1f | %.1f | %.3f |" %
          (args.new_tokens, args.generations, ag_lat * 1e3, og_lat * 1e3, og_lat / ag_lat))
    print("| %d-token generation, p50 tokens/s | %.1f | %.1f | %.3f |" %
          (args.new_tokens, ag_tps, og_tps, og_tps / ag_tps))
    print("tokens generated per request: %s" % counts)


if __name__ == "__main__":
    main()
