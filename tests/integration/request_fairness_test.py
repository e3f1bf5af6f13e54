#!/usr/bin/python3
"""One client's text work must not slow another client's small requests (issue #54, item 1).

attnserve-server with a model folder holding the GPT-NeoX tokenizer.json. Four flood clients,
each its own process and connection (so four clients, as the queue shares count them without
authentication), send 1 MiB texts to Tokenize in a loop: random letters without a space (one
BPE piece: the tokenizer's worst case) and prose. A fifth client times small requests of three
kinds (Tokenize of "Hello World", GetModel, an Infer of a short text) alone, then during the
flood. Each kind's median during the flood must stay within 3x of its idle median: large texts
are tokenized on the request work pool (server/rpc/request_work_pool.h), off the threads that
answer calls, at a lower CPU priority.

The same test with --request_work_threads=0 (every text tokenized on the gRPC thread that
received it, as before the pool) is the baseline the figures are printed against.

Usage: request_fairness_test.py --build-dir BUILD --source-dir SOURCE
"""
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as common  # noqa: E402
import text_test  # noqa: E402

FLOOD_CLIENTS = 4
MIB = 1 << 20
SAMPLES = 40

# A flood client: its own process and connection; raw bytes back (no parsing of the ids, so
# the client's own CPU stays out of the measurement) until the stop file appears or 60 s pass.
FLOOD = r"""
import sys, os, time
sys.path.insert(0, sys.argv[1])
import grpc
from attnserve.v1 import inference_pb2 as pb
target, text_file, stop_file, count_file = sys.argv[2:6]
with open(text_file, "rb") as f:
    text = f.read()
channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20),
                                                 ("grpc.max_send_message_length", 64 << 20)])
call = channel.unary_unary("/attnserve.v1.AttnServe/Tokenize",
                           request_serializer=pb.TokenizeRequest.SerializeToString,
                           response_deserializer=None)
request = pb.TokenizeRequest(model="neox", text=text)
done, end = 0, time.monotonic() + 60
while not os.path.exists(stop_file) and time.monotonic() < end:
    call(request, timeout=60)
    done += 1
with open(count_file, "w") as f:
    f.write(str(done))
"""


def median_ms(fn, n=SAMPLES):
    times = []
    for _ in range(n):
        start = time.monotonic()
        fn()
        times.append((time.monotonic() - start) * 1000)
    return statistics.median(times), max(times)


class RequestFairnessTest(common.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        text_test.prepare_class(cls, "attnserve_fairness_")
        text_test.write_attention_folder(os.path.join(cls.repo, "neox"), text_test.NEOX_VOCAB, 1,
                                         text_test.neox_tokenizer(common.ARGS.source_dir))
        rng = random.Random(54)
        letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(MIB))
        with open(os.path.join(common.ARGS.source_dir, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        prose = (readme * (MIB // len(readme.encode()) + 1)).encode()[:MIB]
        prose = prose.decode("utf-8", errors="ignore").encode()
        cls.texts = []
        for name, data in (("letters", letters.encode()), ("prose", prose)):
            path = os.path.join(cls.tmp, name + ".txt")
            with open(path, "wb") as f:
                f.write(data)
            cls.texts.append(path)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def measure(self, *flags):
        """Medians (ms) of the three small requests alone and during the flood, and the
        flood's requests answered."""
        pb = self.pb
        server = common.Server(self.binary, "--model_repository=" + self.repo,
                               "--max_tokens_per_request=2000000", *flags)
        channel = self.grpc.insecure_channel(server.target)
        try:
            self.grpc.channel_ready_future(channel).result(timeout=30)
            stub = self.pb_grpc.AttnServeStub(channel)
            kinds = {
                "Tokenize": lambda: stub.Tokenize(
                    pb.TokenizeRequest(model="neox", text=b"Hello World"), timeout=30),
                "GetModel": lambda: stub.GetModel(pb.GetModelRequest(name="neox"), timeout=30),
                "Infer": lambda: stub.Infer(pb.InferRequest(
                    model="neox", text=b"Hello World", output=pb.OutputSpec(
                        kind=pb.OUTPUT_KIND_TOP_K, top_k=1)), timeout=30),
            }
            for fn in kinds.values():
                fn()  # warm
            idle = {k: median_ms(fn) for k, fn in kinds.items()}
            stop = os.path.join(self.tmp, "stop")
            if os.path.exists(stop):
                os.remove(stop)
            floods = []
            for i in range(FLOOD_CLIENTS):
                count = os.path.join(self.tmp, "count-%d" % i)
                floods.append((subprocess.Popen(
                    [sys.executable, "-c", FLOOD, self.tmp, server.target,
                     self.texts[i % len(self.texts)], stop, count]), count))
            try:
                time.sleep(1.5)  # every flood client has a text in the server
                loaded = {k: median_ms(fn) for k, fn in kinds.items()}
            finally:
                open(stop, "w").close()
                answered = 0
                for proc, count in floods:
                    proc.wait(timeout=120)
                    with open(count) as f:
                        answered += int(f.read())
            self.pooled = self.metric(server, "attnserve_request_work_total")
            return idle, loaded, answered
        finally:
            channel.close()
            server.kill()

    @staticmethod
    def metric(server, name):
        """A metric's value from the server's /metrics (its port as the server printed it)."""
        port = re.search(r"metrics on [\d.]+:(\d+)", server.output())
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port.group(1),
                                    timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None

    def test_four_clients_of_1_mib_texts_do_not_slow_a_small_request(self):
        baseline = self.measure("--request_work_threads=0")
        pooled = self.measure()
        print("  small requests' median (max) in ms, alone and while %d clients send 1 MiB "
              "texts:" % FLOOD_CLIENTS)
        for label, (idle, loaded, answered) in (("inline (--request_work_threads=0)", baseline),
                                                ("request work pool (default)", pooled)):
            print("  %s, %d flood texts answered:" % (label, answered))
            for kind in idle:
                print("    %-8s alone %6.2f (%6.1f)  flood %7.2f (%7.1f)  ratio %5.1fx" % (
                    kind, idle[kind][0], idle[kind][1], loaded[kind][0], loaded[kind][1],
                    loaded[kind][0] / idle[kind][0]))
        idle, loaded, answered = pooled
        self.assertGreater(answered, 0)
        # The flood's texts (all above the inline 4 KiB) ran on the pool, and the metric says so.
        self.assertGreaterEqual(self.pooled, answered)
        for kind in idle:
            # Within 3x of its idle median; a median under 0.3 ms counts as 0.3 ms (loopback
            # gRPC's own jitter is of that order).
            self.assertLessEqual(loaded[kind][0], 3 * max(idle[kind][0], 0.3),
                                 "%s: median %.2f ms during the flood, %.2f ms alone" % (
                                     kind, loaded[kind][0], idle[kind][0]))


if __name__ == "__main__":
    common.run_tests(sys.modules[__name__])
