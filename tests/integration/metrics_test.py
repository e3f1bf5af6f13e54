#!/usr/bin/python3
"""Prometheus metrics of attnserve-server, checked end to end.

Starts build/server/attnserve-server on loopback, makes a known sequence of calls (Infers on
each variant, streams opened and closed, one session left to expire by TTL, one rejected
request), then checks that:
  * the scraped values equal what the calls imply;
  * `promtool check metrics` (Debian's prometheus package) accepts the scrape;
  * a real Prometheus server, scraping the test server every second, answers a PromQL query
    through its HTTP API with the request count the test made.

Usage: metrics_test.py BUILD_DIR SOURCE_DIR (run by CTest).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

BUILD_DIR, SOURCE_DIR = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
STUBS = tempfile.mkdtemp(prefix="attnserve_stubs_")
subprocess.check_call(
    ["protoc", "-I" + os.path.join(SOURCE_DIR, "proto"), "--python_out=" + STUBS,
     "--grpc_out=" + STUBS, "--plugin=protoc-gen-grpc=" + shutil.which("grpc_python_plugin")]
    + [os.path.join(SOURCE_DIR, "proto/attnserve/v1", f)
       for f in ("inference.proto", "tensor.proto", "model_config.proto")])
sys.path.insert(0, STUBS)
import grpc  # noqa: E402
from attnserve.v1 import inference_pb2 as pb  # noqa: E402
from attnserve.v1 import inference_pb2_grpc as rpc  # noqa: E402

VARIANTS = ["standard", "linformer", "linear", "mamba", "hybrid", "sliding_window", "performer", "rwkv",
            "sparse"]
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def parse_metrics(text):
    """{(name, frozenset(labels)): value} from the text exposition format."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_metrics_")
        cls.log = open(os.path.join(cls.tmp, "server.log"), "w+")
        cls.server = subprocess.Popen(
            [os.path.join(BUILD_DIR, "server/attnserve-server"), "--host=127.0.0.1", "--port=0",
             "--metrics_port=0", "--http_port=-1", "--intra_op_threads=1"],
            stdout=cls.log, stderr=subprocess.STDOUT)

        def ports():
            cls.log.seek(0)
            text = cls.log.read()
            grpc_port = re.search(r"listening on [\d.]+:(\d+)", text)
            metrics_port = re.search(r"metrics on [\d.]+:(\d+)", text)
            return grpc_port and metrics_port and (int(grpc_port.group(1)),
                                                   int(metrics_port.group(1)))
        cls.grpc_port, cls.metrics_port = wait_for(ports, 120, "the server to listen")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.stub = rpc.AttnServeStub(cls.channel)
        cls.prometheus = None

    @classmethod
    def tearDownClass(cls):
        if cls.prometheus:
            cls.prometheus.terminate()
            cls.prometheus.wait(10)
        if cls.server.poll() is None:
            cls.server.send_signal(signal.SIGTERM)
            cls.server.wait(30)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        shutil.rmtree(STUBS, ignore_errors=True)

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def test_metrics_after_known_calls_promtool_and_prometheus(self):
        # 2 Infers on every variant, one more through the policy (standard, rule 1).
        for variant in VARIANTS:
            for n in (5, 9):
                self.stub.Infer(pb.InferRequest(model=variant, tokens=list(range(n))))
        self.stub.Infer(pb.InferRequest(model="auto", tokens=[1, 2, 3]))
        # One rejected request: an unknown model.
        with self.assertRaises(grpc.RpcError) as rejected:
            self.stub.Infer(pb.InferRequest(model="no-such-model", tokens=[1]))
        self.assertEqual(rejected.exception.code(), grpc.StatusCode.NOT_FOUND)

        # Two streams opened and closed on mamba, with 2 appends each (4 + 1 tokens).
        def stream(close, ttl=0):
            def requests():
                yield pb.StreamRequest(open=pb.StreamOpen(model="mamba", ttl_seconds=ttl))
                yield pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=[1, 2, 3, 4]))
                yield pb.StreamRequest(append=pb.StreamAppend(sequence_number=2, tokens=[5]))
                if close:
                    yield pb.StreamRequest(close=pb.StreamClose())
            return list(self.stub.Stream(requests()))
        stream(close=True)
        stream(close=True)
        # One stream left open with a TTL of 1 s: it expires.
        opened = stream(close=False, ttl=1)[0].opened
        wait_for(lambda: self._expired(opened.session_id), 15, "the TTL expiry")

        text = self.scrape()
        m = parse_metrics(text)

        def value(name, **labels):
            return m.get((name, frozenset(labels.items())), 0.0)

        def requests(**labels):  # through the AttnServe door
            return value("attnserve_requests_total", protocol="attnserve", **labels)

        for variant in VARIANTS:
            expected = 2 + (1 if variant == "standard" else 0)
            self.assertEqual(requests(rpc="Infer", variant=variant, code="OK"), expected, variant)
            self.assertEqual(value("attnserve_request_duration_seconds_count", protocol="attnserve",
                                   rpc="Infer", variant=variant), expected, variant)
            # Infers of 5 and 9 tokens, the policy's 3 on standard, 4 per stream on mamba. The
            # 9 tokens begin with the 5: a variant that streams takes their state from the
            # prefix cache and computes 4.
            streams = variant != "linformer"
            self.assertEqual(value("attnserve_tokens_total", variant=variant, phase="prefill"),
                             14 - (5 if streams else 0)
                             + {"standard": 3, "mamba": 3 * 4}.get(variant, 0), variant)
            self.assertEqual(value("attnserve_prefix_cache_hit_tokens_total", variant=variant),
                             5 if streams else 0, variant)
            self.assertEqual(value("attnserve_prefix_cache_lookups_total", variant=variant,
                                   result="hit"), 1 if streams else 0, variant)
            self.assertEqual(value("attnserve_prefix_cache_lookups_total", variant=variant,
                                   result="miss"),
                             (1 + {"standard": 1, "mamba": 3}.get(variant, 0)) if streams else 0,
                             variant)
            self.assertEqual(value("attnserve_sessions", variant=variant), 0, variant)
            self.assertEqual(value("attnserve_session_state_bytes", variant=variant), 0, variant)
            self.assertGreater(value("attnserve_model_load_seconds", model=variant), 0, variant)
        self.assertEqual(requests(rpc="Infer", variant="none", code="NOT_FOUND"), 1)
        self.assertEqual(requests(rpc="StreamOpen", variant="mamba", code="OK"), 3)
        self.assertEqual(requests(rpc="StreamAppend", variant="mamba", code="OK"), 6)
        self.assertEqual(requests(rpc="StreamClose", variant="mamba", code="OK"), 2)
        # Series known at start-up exist at 0 before their first event (rate() works).
        for labels in (dict(rpc="Infer", variant="mamba", code="DEADLINE_EXCEEDED"),
                       dict(rpc="StreamAppend", variant="linear", code="CANCELLED"),
                       dict(rpc="GetSession", variant="none", code="INVALID_ARGUMENT"),
                       dict(protocol="oip", rpc="ModelInfer", variant="mamba",
                            code="INVALID_ARGUMENT"),
                       dict(protocol="oip", rpc="ModelConfig", variant="none", code="NOT_FOUND")):
            labels.setdefault("protocol", "attnserve")
            self.assertIn(("attnserve_requests_total", frozenset(labels.items())), m, labels)
            self.assertEqual(value("attnserve_requests_total", **labels), 0, labels)
        # The scheduler's histograms: every Infer above ran in some iteration of its variant.
        for variant in VARIANTS:
            self.assertGreater(value("attnserve_iteration_duration_seconds_count",
                                     variant=variant), 0, variant)
            self.assertGreater(value("attnserve_batch_sessions_count", variant=variant), 0)
            self.assertGreater(value("attnserve_batch_tokens_sum", variant=variant), 0)
        # Prefill counts requests of more than one token; single tokens on a session: decode.
        self.assertEqual(value("attnserve_tokens_total", variant="mamba", phase="decode"), 3)
        self.assertEqual(value("attnserve_policy_decisions_total", variant="standard", rule="1"), 1)
        self.assertEqual(value("attnserve_policy_decisions_total", variant="mamba", rule="named"), 3 + 2)
        self.assertEqual(value("attnserve_session_evictions_total", reason="closed"), 2)
        self.assertEqual(value("attnserve_session_evictions_total", reason="ttl"), 1)
        self.assertEqual(value("attnserve_session_evictions_total", reason="capacity"), 0)
        self.assertEqual(value("attnserve_inflight_requests"), 0)
        self.assertEqual(value("attnserve_queue_depth"), 0)
        self.assertGreater(value("attnserve_prefix_cache_entries"), 0)
        self.assertGreater(value("attnserve_prefix_cache_bytes"), 0)
        self.assertEqual(value("attnserve_prefix_cache_evictions_total"), 0)
        # The KV buffer pool's series exist from the start (small caches here: none kept yet).
        self.assertGreaterEqual(value("attnserve_kv_buffer_pool_bytes"), 0)
        self.assertGreaterEqual(value("attnserve_kv_buffer_pool_reuses_total"), 0)
        self.assertEqual(value("attnserve_build_info", version="0.1.0",
                               cuda=[l for n, ls in m for k, l in ls if n == "attnserve_build_info" and k == "cuda"][0],
                               torch=[l for n, ls in m for k, l in ls if n == "attnserve_build_info" and k == "torch"][0]), 1)
        self.assertGreater(value("process_cpu_seconds_total"), 0)
        # Histogram buckets from 100 µs to 60 s.
        buckets = sorted(float(dict(ls)["le"]) for n, ls in m
                         if n == "attnserve_request_duration_seconds_bucket"
                         and dict(ls).get("rpc") == "Infer" and dict(ls).get("variant") == "mamba"
                         and dict(ls)["le"] != "+Inf")
        self.assertEqual((buckets[0], buckets[-1]), (0.0001, 60.0))
        # No label carries a session id.
        self.assertNotIn(opened.session_id, text)

        # promtool's own lint.
        check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                               capture_output=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout.decode() + check.stderr.decode())

        # A real Prometheus scraping every second answers with the request count.
        prom_port = free_port()
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: attnserve\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{self.metrics_port}']\n")
        type(self).prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(self.tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        query = 'sum(attnserve_requests_total{rpc="Infer"})'

        def answered():
            url = (f"http://127.0.0.1:{prom_port}/api/v1/query?"
                   + urllib.parse.urlencode({"query": query}))
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    body = json.load(r)
            except OSError:
                return None
            result = body.get("data", {}).get("result", [])
            return result and float(result[0]["value"][1])
        self.assertEqual(wait_for(answered, 90, "Prometheus to scrape"), 2 * len(VARIANTS) + 1 + 1)

    def test_zz_slow_clients_stall_neither_scrapes_nor_shutdown(self):
        # Clients that send "GET /metrics HTTP/1.1" and then a byte every 0.5 s.
        stop = threading.Event()
        sockets = []

        def slow():
            s = socket.create_connection(("127.0.0.1", self.metrics_port))
            sockets.append(s)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            while not stop.is_set():
                try:
                    s.sendall(b"X")
                except OSError:
                    return
                time.sleep(0.5)

        def resident():
            with open("/proc/%d/statm" % self.server.pid) as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        resident_before = resident()
        threads = [threading.Thread(target=slow, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        for _ in range(3):
            start = time.time()
            self.assertIn("attnserve_requests_total", self.scrape())
            self.assertLess(time.time() - start, 2.0, "a scrape waited for a slow client")
        self.assertLess(resident(), resident_before * 1.1)
        # SIGTERM with the slow clients still connected: the server exits at once (nothing
        # else is in flight), not when they give up.
        sigterm = time.time()
        self.server.send_signal(signal.SIGTERM)
        code = self.server.wait(30)
        exited = time.time() - sigterm
        stop.set()
        for s in sockets:
            s.close()
        self.assertEqual(code, 0)
        self.assertLess(exited, 5.0, "shutdown waited for slow metrics clients")

    def _expired(self, session_id):
        try:
            self.stub.GetSession(pb.GetSessionRequest(session_id=session_id))
            return False
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.NOT_FOUND


if __name__ == "__main__":
    unittest.main()
