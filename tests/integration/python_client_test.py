#!/usr/bin/python3
"""attnserve-server driven by a Python gRPC client (Debian's python3-grpcio).

Generates the stubs from proto/attnserve/v1 at test time, starts the built server on a free
port, runs Infer and a Stream with generation, then sends SIGTERM and checks the drain: health
goes NOT_SERVING, new calls are refused, the stream in flight is served to its end, and the
process exits 0 within the drain deadline. With a 1 s drain deadline, a long generation in
flight is cancelled at the deadline and the process exits 0 within 2 s of SIGTERM.

Usage: python_client_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import argparse
import glob
import os
import re
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ARGS = None
DRAIN_DEADLINE_S = 10
# Process teardown after the drain (destructors, thread joins).
TEARDOWN_S = 1.5

# grpc.health.v1 (the part the test uses), in case no copy of health.proto is installed.
HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""


def generate_stubs(source_dir, out_dir):
    """Runs protoc with the gRPC Python plugin on our protos (AttnServe's and the Open Inference
    Protocol's) and health.proto."""
    plugin = shutil.which("grpc_python_plugin")
    protoc = shutil.which("protoc")
    if plugin is None or protoc is None:
        raise unittest.SkipTest("protoc or grpc_python_plugin is not installed")
    proto_dir = os.path.join(os.path.abspath(source_dir), "proto")
    protos = sorted(os.path.relpath(p, proto_dir)
                    for d in ("inference", os.path.join("attnserve", "v1"))
                    for p in glob.glob(os.path.join(proto_dir, d, "*.proto")))
    # The file lies outside grpc/ so that its module does not collide with the grpc package.
    health_dir = os.path.join(out_dir, "health_src")
    os.makedirs(os.path.join(health_dir, "attnserve_health"))
    with open(os.path.join(health_dir, "attnserve_health", "health.proto"), "w") as f:
        f.write(HEALTH_PROTO)
    for include, files in ((proto_dir, protos),
                           (health_dir, ["attnserve_health/health.proto"])):
        subprocess.run([protoc, "--python_out=" + out_dir, "--grpc_out=" + out_dir,
                        "--plugin=protoc-gen-grpc=" + plugin, "-I" + include] + files,
                       check=True, cwd=include)
    sys.path.insert(0, out_dir)


def queued(outbox):
    """The requests put on `outbox` (a queue.Queue), as a stream's request iterator; None ends it."""
    while True:
        item = outbox.get()
        if item is None:
            return
        yield item


def resident_bytes(pid):
    """Resident memory of process `pid`."""
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Server:
    """attnserve-server on 127.0.0.1 with a port of its choosing."""

    def __init__(self, binary, *flags):
        self.lines = []
        flags = ["--host=127.0.0.1", "--port=0", "--intra_op_threads=1",
                 "--drain_deadline_s=%d" % DRAIN_DEADLINE_S, "--max_new_tokens=64"] + list(flags)
        # A free port for the Prometheus endpoint too, where the server has one.
        usage = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
        if ("metrics_port" in usage.stdout + usage.stderr and
                not any(f.startswith("--metrics_port") for f in flags)):
            flags.append("--metrics_port=0")
        # No HTTP door unless the test asks for one (its default port 8000 is one per host).
        if ("http_port" in usage.stdout + usage.stderr and
                not any(f.startswith("--http_port") for f in flags)):
            flags.append("--http_port=-1")
        self.proc = subprocess.Popen(
            [binary] + flags,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = None
        listening = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                if "listening on" in line and self.port is None:
                    self.port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
                    listening.set()
            listening.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        if not listening.wait(60) or self.port is None:
            self.kill()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.lines))
        self.target = "127.0.0.1:%d" % self.port

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def output(self):
        return "\n".join(self.lines)


class ServerProcesses:
    """A test-case mixin: servers and channels a test opens are closed after it
    (self.servers, self.channels), and the main() of the test files."""

    def setUp(self):
        self.servers, self.channels = [], []

    def tearDown(self):
        for channel in self.channels:
            channel.close()
        for server in self.servers:
            server.kill()
            server.pump.join(5)
            server.proc.stdout.close()


def run_tests(module):
    """Parses --build-dir and --source-dir into module.ARGS (and this file's), then runs the
    module's tests with the remaining arguments."""
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    module.ARGS = ARGS
    unittest.main(module=module.__name__, argv=[sys.argv[0]] + rest, verbosity=2)


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_py_")
        generate_stubs(ARGS.source_dir, cls.tmp)
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        from attnserve_health import health_pb2, health_pb2_grpc
        cls.grpc, cls.pb, cls.health_pb = grpc, inference_pb2, health_pb2
        binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
        if not os.access(binary, os.X_OK):
            raise RuntimeError("no server binary at " + binary + "; build attnserve-server")
        cls.server = Server(binary)
        cls.channel = grpc.insecure_channel(cls.server.target)
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = inference_pb2_grpc.AttnServeStub(cls.channel)
        cls.health = health_pb2_grpc.HealthStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----

    def infer(self, model, tokens, kind=None, top_k=0):
        pb = self.pb
        request = pb.InferRequest(model=model, tokens=tokens)
        request.output.kind = pb.OUTPUT_KIND_LAST_LOGITS if kind is None else kind
        request.output.top_k = top_k
        return self.stub.Infer(request, timeout=60)

    def generate(self, model, prompt, max_new_tokens, temperature, seed, top_k=0):
        """A whole stream: open, one append with generation, close. Returns the responses."""
        pb = self.pb
        requests = [
            pb.StreamRequest(open=pb.StreamOpen(model=model)),
            pb.StreamRequest(append=pb.StreamAppend(
                sequence_number=1, tokens=prompt,
                generate=pb.GenerateSpec(max_new_tokens=max_new_tokens, temperature=temperature,
                                         top_k=top_k, seed=seed))),
            pb.StreamRequest(close=pb.StreamClose()),
        ]
        return list(self.stub.Stream(iter(requests), timeout=60))

    def check_generation(self, responses, max_new_tokens):
        """Checks the order (opened, tokens one by one, result, closed); returns the tokens."""
        kinds = [r.WhichOneof("kind") for r in responses]
        self.assertEqual(kinds, ["opened"] + ["generated"] * max_new_tokens + ["result", "closed"])
        generated = [r.generated for r in responses[1:1 + max_new_tokens]]
        self.assertEqual([g.index for g in generated], list(range(max_new_tokens)))
        self.assertTrue(all(g.sequence_number == 1 for g in generated))
        self.assertTrue(all(g.logprob <= 0 for g in generated))
        result = responses[1 + max_new_tokens].result
        tokens = [g.token for g in generated]
        self.assertEqual(list(result.generated_tokens), tokens)
        self.assertEqual(result.sequence_number, 1)
        self.assertFalse(result.replayed)
        return tokens, result

    # ---- tests (run in name order; the drain goes last) ----

    def test_0_blas_kernels_of_the_cpu(self):
        # OpenBLAS falls back to Prescott's SSE3 kernels on a CPU model it does not know (these
        # VMs); the server re-executes itself with OPENBLAS_CORETYPE set
        # (kernels/common/blas_kernels.h). Its first line says which core runs.
        lines = [l for l in self.server.lines if l.startswith("OpenBLAS core ")]
        self.assertTrue(lines, self.server.output()[:2000])
        flags = set()
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
        if "OPENBLAS_CORETYPE" not in os.environ and {"avx2", "fma"} <= flags:
            core = lines[0].split()[2]
            self.assertIn(core, ["Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"],
                          lines[0])

    def test_1_infer(self):
        pb = self.pb
        response = self.infer("auto", [1, 2, 3, 4, 5])
        self.assertEqual(response.model, "standard")
        self.assertIn("rule 1", response.policy_reason)
        self.assertEqual(list(response.outputs.tensor.shape), [4096])
        self.assertEqual(len(response.outputs.tensor.float_data), 4096)
        logits = list(response.outputs.tensor.float_data)
        top = self.infer("auto", [1, 2, 3, 4, 5], pb.OUTPUT_KIND_TOP_K, 3)
        self.assertEqual(len(top.outputs.top_k), 3)
        self.assertEqual(top.outputs.top_k[0].token, logits.index(max(logits)))
        everything = self.infer("mamba", [7] * 9, pb.OUTPUT_KIND_ALL_LOGITS)
        self.assertEqual(everything.model, "mamba")
        self.assertEqual(list(everything.outputs.tensor.shape), [9, 4096])
        with self.assertRaises(self.grpc.RpcError) as error:
            self.infer("mamba", [4096])
        self.assertEqual(error.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("outside the vocabulary", error.exception.details())

    def test_2_stream_generation_is_streamed_and_seeded(self):
        prompt = [11, 22, 33, 44]
        responses = self.generate("mamba", prompt, 12, temperature=1.0, seed=1234, top_k=40)
        tokens, result = self.check_generation(responses, 12)
        self.assertEqual(responses[0].opened.model, "mamba")
        self.assertEqual(result.position, len(prompt) + 12)
        self.assertEqual(responses[-1].closed.session_id, responses[0].opened.session_id)
        # The same seed gives the same tokens, on a new session.
        again, _ = self.check_generation(
            self.generate("mamba", prompt, 12, temperature=1.0, seed=1234, top_k=40), 12)
        self.assertEqual(again, tokens)

    def test_3_temperature_zero_is_greedy(self):
        prompt = [5, 6, 7]
        greedy, _ = self.check_generation(
            self.generate("standard", prompt, 6, temperature=0, seed=1), 6)
        other_seed, _ = self.check_generation(
            self.generate("standard", prompt, 6, temperature=0, seed=99), 6)
        self.assertEqual(greedy, other_seed)
        # Each token is the argmax of the logits after the prompt and the tokens before it.
        for i, token in enumerate(greedy):
            logits = list(self.infer("standard", prompt + greedy[:i]).outputs.tensor.float_data)
            self.assertEqual(token, logits.index(max(logits)), "token %d" % i)

    def test_4_unparseable_messages_are_errors(self):
        # Raw bytes that are not a StreamRequest, after a good open: the stream ends with
        # INVALID_ARGUMENT (not OK, as if the client had closed), the server keeps serving.
        grpc, pb = self.grpc, self.pb
        resident_before = resident_bytes(self.server.proc.pid)
        raw = self.channel.stream_stream(
            "/attnserve.v1.AttnServe/Stream", request_serializer=lambda b: b,
            response_deserializer=pb.StreamResponse.FromString)
        good = pb.StreamRequest(open=pb.StreamOpen(model="mamba")).SerializeToString()
        outbox = queue.Queue()
        outbox.put(good)

        call = raw(queued(outbox), timeout=30)
        self.assertTrue(next(call).HasField("opened"))
        outbox.put(b"\xff\xff\xff\xff\x0f not a protobuf")
        with self.assertRaises(grpc.RpcError) as error:
            next(call)
        outbox.put(None)
        self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("not a valid attnserve.v1.StreamRequest", error.exception.details())
        # A unary request that does not parse is refused by gRPC itself before the service
        # sees it (gRPC 1.51 answers UNIMPLEMENTED); either way it is an error, never OK.
        unary = self.channel.unary_unary(
            "/attnserve.v1.AttnServe/Infer", request_serializer=lambda b: b,
            response_deserializer=pb.InferResponse.FromString)
        with self.assertRaises(grpc.RpcError) as unary_error:
            unary(b"\xff\xff\xff\xff\x0f not a protobuf", timeout=10)
        self.assertNotEqual(unary_error.exception.code(), grpc.StatusCode.OK)
        self.assertEqual(self.infer("mamba", [1, 2, 3]).model, "mamba")
        self.assertLess(resident_bytes(self.server.proc.pid), resident_before * 1.1)

    def test_5_the_limits_table_says_what_the_server_answers(self):
        # Issue #27: README.md's limits table said INVALID_ARGUMENT for more than
        # --max_tokens_per_request tokens, where the server answers RESOURCE_EXHAUSTED.
        grpc, pb = self.grpc, self.pb
        with open(os.path.join(ARGS.source_dir, "README.md")) as f:
            rows = [line for line in f if line.startswith("| tokens in one Infer or append |")]
        self.assertEqual(len(rows), 1, "README.md's limits table has no row for the tokens")
        documented = re.findall(r"`([A-Z_]+)`", rows[0].split("|")[4])
        with self.assertRaises(grpc.RpcError) as error:
            self.stub.Infer(pb.InferRequest(model="mamba", tokens=[1] * 65537), timeout=30)
        self.assertEqual(documented, [error.exception.code().name])
        self.assertIn("--max_tokens_per_request", error.exception.details())

    def test_9_sigterm_drains_and_exits_zero(self):
        grpc, pb, health_pb = self.grpc, self.pb, self.health_pb
        serving = self.health.Check(health_pb.HealthCheckRequest(service=""), timeout=10)
        self.assertEqual(serving.status, health_pb.HealthCheckResponse.SERVING)

        # A stream in flight keeps the server draining until the stream ends.
        outbox = queue.Queue()

        stream = self.stub.Stream(queued(outbox), timeout=60)
        outbox.put(pb.StreamRequest(open=pb.StreamOpen(model="linear")))
        opened = next(stream).opened
        self.assertEqual(opened.model, "linear")

        sigterm_at = time.monotonic()
        self.server.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        status = None
        while time.monotonic() < deadline:
            status = self.health.Check(health_pb.HealthCheckRequest(service=""), timeout=5).status
            if status == health_pb.HealthCheckResponse.NOT_SERVING:
                break
            time.sleep(0.02)
        self.assertEqual(status, health_pb.HealthCheckResponse.NOT_SERVING)

        # New calls are refused while draining.
        with self.assertRaises(grpc.RpcError) as error:
            self.infer("mamba", [1, 2, 3])
        self.assertEqual(error.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("draining", error.exception.details())
        with self.assertRaises(grpc.RpcError) as error:
            list(self.stub.Stream(iter([pb.StreamRequest(open=pb.StreamOpen(model="mamba"))]),
                                  timeout=10))
        self.assertEqual(error.exception.code(), grpc.StatusCode.UNAVAILABLE)

        # The stream in flight is still served, then ends normally.
        outbox.put(pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=[1, 2, 3])))
        self.assertEqual(next(stream).result.position, 3)
        outbox.put(pb.StreamRequest(close=pb.StreamClose()))
        self.assertEqual(next(stream).closed.session_id, opened.session_id)
        outbox.put(None)
        self.assertEqual(list(stream), [])
        self.assertEqual(stream.code(), grpc.StatusCode.OK)
        idle_at = time.monotonic()

        # The client keeps its (now idle) channel open, as load balancers and health checkers
        # do: the server must not wait for it.
        try:
            code = self.server.proc.wait(timeout=DRAIN_DEADLINE_S + 10)
        except subprocess.TimeoutExpired:
            self.fail("the server did not exit after SIGTERM:\n" + self.server.output())
        exited_at = time.monotonic()
        self.server.pump.join(5)
        output = self.server.output()
        self.assertEqual(code, 0, output)
        self.assertIn("draining (1 calls in flight)", output)
        self.assertIn("stopped", output)
        self.assertLess(exited_at - sigterm_at, DRAIN_DEADLINE_S + TEARDOWN_S, output)
        # Once nothing is in flight it does not sit out the whole deadline. (gRPC's shutdown
        # still waits a few seconds for idle client connections to close.)
        print("\nexited %.1f s after SIGTERM, %.1f s after its last call finished" %
              (exited_at - sigterm_at, exited_at - idle_at), file=sys.stderr)
        self.assertLess(exited_at - idle_at, DRAIN_DEADLINE_S - 2,
                        "the server stayed up %.1f s after its last call finished "
                        "(--drain_deadline_s=%d)" % (exited_at - idle_at, DRAIN_DEADLINE_S))


class DrainDeadlineTest(unittest.TestCase):
    """--drain_deadline_s=1 with a generation of 100000 tokens in flight."""

    def test_long_generation_is_cancelled_at_the_deadline(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_py_drain_")
        try:
            generate_stubs(ARGS.source_dir, tmp)
            import grpc
            from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc
            binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
            server = Server(binary, "--drain_deadline_s=1", "--max_new_tokens=100000")
            try:
                channel = grpc.insecure_channel(server.target)
                stub = inference_pb2_grpc.AttnServeStub(channel)
                requests = [
                    pb.StreamRequest(open=pb.StreamOpen(model="mamba")),
                    pb.StreamRequest(append=pb.StreamAppend(
                        sequence_number=1, tokens=[1, 2, 3],
                        generate=pb.GenerateSpec(max_new_tokens=100000))),
                ]
                outbox = queue.Queue()
                for r in requests:
                    outbox.put(r)

                stream = stub.Stream(queued(outbox), timeout=120)
                self.assertTrue(next(stream).HasField("opened"))
                for _ in range(5):  # generating
                    self.assertTrue(next(stream).HasField("generated"))
                sigterm_at = time.monotonic()
                server.proc.send_signal(signal.SIGTERM)
                generated = 5
                with self.assertRaises(grpc.RpcError) as error:
                    for response in stream:
                        generated += response.HasField("generated")
                ended_at = time.monotonic()
                code = server.proc.wait(timeout=30)
                exited_at = time.monotonic()
                outbox.put(None)
                channel.close()
                server.pump.join(5)
                output = server.output()
                self.assertEqual(code, 0, output)
                self.assertEqual(error.exception.code(), grpc.StatusCode.UNAVAILABLE, output)
                self.assertIn("drain deadline passed", error.exception.details())
                self.assertLess(generated, 100000)
                print("\nstream ended %.2f s, process exited %.2f s after SIGTERM (%d tokens)" %
                      (ended_at - sigterm_at, exited_at - sigterm_at, generated), file=sys.stderr)
                self.assertLess(exited_at - sigterm_at, 2.0, output)
            finally:
                server.kill()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class KvCachePrecisionTest(unittest.TestCase):
    """--kv_cache_precision=bf16: the standard model's sessions hold half the cache bytes of a
    default server's for the same tokens, generate as a default server's do, and a value other
    than fp32 or bf16 stops the server with a message."""

    def session_after(self, server, prompt):
        import grpc
        from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc
        with grpc.insecure_channel(server.target) as channel:
            stub = inference_pb2_grpc.AttnServeStub(channel)
            requests = [
                pb.StreamRequest(open=pb.StreamOpen(model="standard")),
                pb.StreamRequest(append=pb.StreamAppend(
                    sequence_number=1, tokens=prompt,
                    generate=pb.GenerateSpec(max_new_tokens=8))),
            ]
            responses = list(stub.Stream(iter(requests), timeout=60))
            session_id = responses[0].opened.session_id
            result = [r.result for r in responses if r.HasField("result")][0]
            info = stub.GetSession(pb.GetSessionRequest(session_id=session_id), timeout=30)
            return list(result.generated_tokens), info

    def test_bf16_caches_hold_half_the_bytes(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_py_kv_")
        servers = []
        try:
            generate_stubs(ARGS.source_dir, tmp)
            binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
            servers.append(Server(binary))
            servers.append(Server(binary, "--kv_cache_precision=bf16"))
            prompt = [(7 * i + 3) % 4096 for i in range(40)]
            tokens32, info32 = self.session_after(servers[0], prompt)
            tokens16, info16 = self.session_after(servers[1], prompt)
            self.assertEqual(info32.position, 48)
            self.assertEqual(info16.position, 48)
            self.assertEqual(len(tokens16), 8)
            self.assertEqual(2 * info16.state_bytes, info32.state_bytes)
            print("\nstate bytes after 48 tokens: fp32 cache %d, bf16 cache %d; greedy tokens "
                  "%s against %s" % (info32.state_bytes, info16.state_bytes, tokens16, tokens32),
                  file=sys.stderr)
            with self.assertRaises(RuntimeError) as refused:
                servers.append(Server(binary, "--kv_cache_precision=fp16"))
            self.assertIn("--kv_cache_precision=fp16: expected fp32 or bf16",
                          str(refused.exception))
        finally:
            for server in servers:
                server.kill()
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
