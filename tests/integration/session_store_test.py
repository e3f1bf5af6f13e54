#!/usr/bin/python3
"""Sessions that outlive the process: attnserve-server processes with --session_store, driven
by a Python gRPC client (Debian's python3-grpcio), and a real redis-server started here.

- restart on one dir: store: a session of every streaming variant (standard's KV cache,
  linear, mamba, hybrid) resumes after SIGTERM and a new process, and its later outputs equal
  an unbroken session's exactly (logits, greedy tokens);
- kill -9 after a checkpoint: the session resumes at the checkpoint; last_sequence_number says
  which append to resend, and the resent append's result equals the original's;
- a small --state_budget_bytes: sessions spill to the store and come back with outputs equal to
  those of a server that never spilled;
- two servers on one Redis: a session opened on A, A stopped, resumed on B; Redis stopped
  mid-run: B serves on from memory and counts the store errors;
- ExportSession / ImportSession between servers; truncated, corrupt, future-version and
  foreign-model snapshots get their codes, nothing is half-restored, the server keeps serving;
- ids such as ../../etc/passwd or 10 KB long never reach the folder or Redis;
- a dir: store with damage: a session whose write the store refuses is counted once in the
  drain's log line (saved / failed, never a count of attempts); a folder, a FIFO or a symbolic
  link under a session's name is DATA_LOSS at once (two FIFO lookups at a time leave the server
  answering), and the store's start-up sweep leaves files it did not write alone.

Usage: session_store_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402  (Server, generate_stubs)

ARGS = None
MODELS = ["standard", "linear", "mamba", "hybrid", "sliding_window", "performer", "rwkv", "sparse"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """redis-server on a free loopback port, persistence off."""

    def __init__(self):
        if shutil.which("redis-server") is None:
            raise unittest.SkipTest("redis-server is not installed")
        self.port = free_port()
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class SessionStoreTest(pct.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_store_")
        pct.ARGS = ARGS
        pct.generate_stubs(ARGS.source_dir, os.path.join(cls.tmp, "stubs"))
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        cls.grpc, cls.pb, cls.pb_grpc = grpc, inference_pb2, inference_pb2_grpc
        cls.binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----

    def start(self, *flags):
        server = pct.Server(self.binary, "--max_new_tokens=64", *flags)
        self.servers.append(server)
        channel = self.grpc.insecure_channel(server.target)
        self.grpc.channel_ready_future(channel).result(timeout=30)
        self.channels.append(channel)
        server.stub = self.pb_grpc.AttnServeStub(channel)
        return server

    def stop(self, server, sig=signal.SIGTERM):
        server.proc.send_signal(sig)
        code = server.proc.wait(timeout=40)
        server.pump.join(5)
        return code

    def metric(self, server, name, **labels):
        """The value of one series on the server's /metrics (0 when absent)."""
        match = re.search(r"metrics on [^:]+:(\d+)/metrics", server.output())
        text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % match.group(1),
                                      timeout=10).read().decode()
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def append(self, seq, tokens, generate=0):
        pb = self.pb
        a = pb.StreamAppend(sequence_number=seq, tokens=tokens,
                            output=pb.OutputSpec(kind=pb.OUTPUT_KIND_LAST_LOGITS))
        if generate:
            a.generate.CopyFrom(pb.GenerateSpec(max_new_tokens=generate, temperature=0))
        return pb.StreamRequest(append=a)

    def stream(self, server, opening, appends):
        """One stream: open (a StreamOpen), the appends, then the client ends its writes (the
        session stays). Returns (opened, [results])."""
        pb = self.pb
        responses = list(server.stub.Stream(iter([pb.StreamRequest(open=opening)] + appends),
                                            timeout=120))
        opened = responses[0].opened
        results = [r.result for r in responses if r.WhichOneof("kind") == "result"]
        return opened, results

    @staticmethod
    def outputs(result):
        return list(result.outputs.tensor.float_data), list(result.generated_tokens)

    def prompts(self, n, seed):
        """n appends' token lists, the second one token long (a decode step)."""
        return [[(seed * 31 + i * 7 + k * 13) % 4096 for k in range(1 if i == 1 else 5 + i)]
                for i in range(n)]

    # ---- tests ----

    def test_restart_on_a_dir_store_resumes_every_variant_exactly(self):
        folder = os.path.join(self.tmp, "restart")
        a = self.start("--session_store=dir:" + folder)
        pb = self.pb
        ids, expected = {}, {}
        for i, model in enumerate(MODELS):
            p = self.prompts(4, i)
            # Unbroken: all four appends on one stream (the last generates greedily).
            _, unbroken = self.stream(a, pb.StreamOpen(model=model), [
                self.append(1, p[0]), self.append(2, p[1]), self.append(3, p[2]),
                self.append(4, p[3], generate=6)])
            expected[model] = [self.outputs(r) for r in unbroken[2:]]
            # Broken: two appends, then the server restarts.
            opened, _ = self.stream(a, pb.StreamOpen(model=model),
                                    [self.append(1, p[0]), self.append(2, p[1])])
            ids[model] = opened.session_id
        self.assertEqual(self.stop(a), 0, a.output())
        self.assertRegex(a.output(), r"saved (\d+) of \1 changed sessions")
        snapshots = sorted(os.listdir(folder))
        self.assertEqual(len(snapshots), 2 * len(MODELS), snapshots)
        self.assertTrue(all(name.endswith(".snapshot") for name in snapshots), snapshots)

        b = self.start("--session_store=dir:" + folder)
        for i, model in enumerate(MODELS):
            p = self.prompts(4, i)
            info = b.stub.GetSession(pb.GetSessionRequest(session_id=ids[model]), timeout=30)
            self.assertEqual(info.model, model)
            self.assertEqual(info.position, len(p[0]) + len(p[1]))
            # GetSession reads the store but does not pull the session into memory: no
            # instance holds it (SessionInfo.server unset).
            self.assertFalse(info.HasField("server"))
            self.assertEqual(b.stub.ListSessions(pb.ListSessionsRequest(), timeout=30).total, i)
            opened, resumed = self.stream(b, pb.StreamOpen(session_id=ids[model]), [
                self.append(3, p[2]), self.append(4, p[3], generate=6)])
            self.assertEqual(opened.last_sequence_number, 2)
            self.assertEqual([self.outputs(r) for r in resumed], expected[model], model)
            # A retry of append 2 (made before the restart) is still answered from the
            # results the snapshot kept.
            _, replay = self.stream(b, pb.StreamOpen(session_id=ids[model]),
                                    [self.append(2, p[1])])
            self.assertTrue(replay[0].replayed)

    def test_kill_9_after_a_checkpoint_resumes_at_the_checkpoint(self):
        folder = os.path.join(self.tmp, "kill9")
        a = self.start("--session_store=dir:" + folder, "--checkpoint_every_appends=2")
        pb = self.pb
        p = self.prompts(5, 9)
        opened, originals = self.stream(a, pb.StreamOpen(model="mamba"),
                                        [self.append(k + 1, p[k]) for k in range(5)])
        sid = opened.session_id
        # Checkpoints after appends 2 and 4 (write-behind: wait for the second write).
        deadline = time.monotonic() + 10
        while (self.metric(a, "attnserve_session_store_operations_total", op="put",
                           result="ok") < 2 and time.monotonic() < deadline):
            time.sleep(0.05)
        self.stop(a, signal.SIGKILL)

        b = self.start("--session_store=dir:" + folder, "--checkpoint_every_appends=2")
        opened, resent = self.stream(b, pb.StreamOpen(session_id=sid),
                                     [self.append(5, p[4])])
        self.assertEqual(opened.last_sequence_number, 4)
        self.assertEqual(opened.position, sum(len(t) for t in p[:4]))
        self.assertEqual(self.outputs(resent[0]), self.outputs(originals[4]))
        self.assertFalse(resent[0].replayed)

    def test_sessions_spill_under_a_small_budget_and_come_back_identical(self):
        pb = self.pb
        reference = self.start()
        info = reference.stub.GetModel(pb.GetModelRequest(name="mamba"), timeout=30)
        budget = 2 * info.state_bytes_per_session + 1000  # room for two mamba sessions
        small = self.start("--session_store=dir:" + os.path.join(self.tmp, "spill"),
                           "--state_budget_bytes=%d" % budget)
        results = {}
        for server in (reference, small):
            ids = []
            for i in range(6):
                opened, _ = self.stream(server, pb.StreamOpen(model="mamba"),
                                        [self.append(1, self.prompts(1, i)[0])])
                ids.append(opened.session_id)
            logits = []
            for sid in ids:
                r = server.stub.Infer(pb.InferRequest(
                    session_id=sid, tokens=[5, 6, 7],
                    output=pb.OutputSpec(kind=pb.OUTPUT_KIND_LAST_LOGITS)), timeout=60)
                logits.append(list(r.outputs.tensor.float_data))
            results[server] = logits
        self.assertEqual(results[small], results[reference])
        self.assertGreaterEqual(
            self.metric(small, "attnserve_session_evictions_total", reason="spilled"), 4)
        listed = small.stub.ListSessions(pb.ListSessionsRequest(), timeout=30)
        self.assertLessEqual(listed.total, 2)

    def test_two_servers_on_one_redis_and_redis_down(self):
        pb = self.pb
        redis = Redis()
        try:
            store = "--session_store=redis://127.0.0.1:%d" % redis.port
            a = self.start(store)
            b = self.start(store, "--checkpoint_every_appends=1")
            p = self.prompts(3, 4)
            _, unbroken = self.stream(b, pb.StreamOpen(model="hybrid"),
                                      [self.append(k + 1, p[k]) for k in range(3)])
            opened, _ = self.stream(a, pb.StreamOpen(model="hybrid"),
                                    [self.append(1, p[0]), self.append(2, p[1])])
            self.assertEqual(self.stop(a), 0, a.output())
            opened_b, resumed = self.stream(b, pb.StreamOpen(session_id=opened.session_id),
                                            [self.append(3, p[2])])
            self.assertEqual(opened_b.last_sequence_number, 2)
            self.assertEqual(self.outputs(resumed[0]), self.outputs(unbroken[2]))

            redis.stop()
            errors_before = self.metric(b, "attnserve_session_store_operations_total",
                                        op="put", result="error")
            for i in range(3):  # new sessions and appends go on from memory
                _, served = self.stream(b, pb.StreamOpen(model="linear"),
                                        [self.append(k + 1, p[k]) for k in range(3)])
                self.assertEqual(len(served), 3)
            deadline = time.monotonic() + 10
            while (self.metric(b, "attnserve_session_store_operations_total", op="put",
                               result="error") < errors_before + 1 and
                   time.monotonic() < deadline):
                time.sleep(0.05)
            self.assertGreater(self.metric(b, "attnserve_session_store_operations_total",
                                           op="put", result="error"), errors_before)
            # A session not in memory: the store's failure is the answer, not NOT_FOUND.
            with self.assertRaises(self.grpc.RpcError) as error:
                b.stub.GetSession(pb.GetSessionRequest(session_id="ab" * 16), timeout=30)
            self.assertEqual(error.exception.code(), self.grpc.StatusCode.UNAVAILABLE)
            # The in-memory session is still there and serving.
            _, again = self.stream(b, pb.StreamOpen(session_id=opened.session_id),
                                   [self.append(4, p[0])])
            self.assertEqual(again[0].sequence_number, 4)
        finally:
            redis.stop()

    def test_export_import_and_damaged_snapshots(self):
        pb, grpc = self.pb, self.grpc
        a = self.start()
        b = self.start()
        p = self.prompts(3, 2)
        opened, first = self.stream(a, pb.StreamOpen(model="standard"),
                                    [self.append(1, p[0]), self.append(2, p[1])])
        sid = opened.session_id
        chunks = list(a.stub.ExportSession(pb.ExportSessionRequest(session_id=sid), timeout=30))
        snapshot = b"".join(c.data for c in chunks)
        self.assertEqual(chunks[0].total_bytes, len(snapshot))

        def send(data):
            pieces = [data[i:i + 65536] for i in range(0, len(data), 65536)] or [b""]
            msgs = [pb.SessionSnapshotChunk(data=pieces[0], total_bytes=len(data))]
            msgs += [pb.SessionSnapshotChunk(data=x) for x in pieces[1:]]
            return b.stub.ImportSession(iter(msgs), timeout=30)

        future = bytearray(snapshot)
        future[4:8] = struct.pack("<I", 99)
        flipped = bytearray(snapshot)
        flipped[len(snapshot) // 2] ^= 0x01
        cases = [(snapshot[: len(snapshot) // 2], grpc.StatusCode.DATA_LOSS, "truncated"),
                 (bytes(flipped), grpc.StatusCode.DATA_LOSS, "checksum"),
                 (b"not a snapshot", grpc.StatusCode.DATA_LOSS, "not an attnserve"),
                 (bytes(future), grpc.StatusCode.FAILED_PRECONDITION, "version 99")]
        for data, code, words in cases:
            with self.assertRaises(grpc.RpcError) as error:
                send(data)
            self.assertEqual(error.exception.code(), code, error.exception.details())
            self.assertIn(words, error.exception.details())
            self.assertEqual(b.stub.ListSessions(pb.ListSessionsRequest(), timeout=30).total, 0)
        # Another model's weights (bf16 copies): refused as foreign.
        c = self.start("--weight_precision=bf16")
        with self.assertRaises(grpc.RpcError) as error:
            c.stub.ImportSession(iter([pb.SessionSnapshotChunk(data=snapshot,
                                                               total_bytes=len(snapshot))]),
                                 timeout=30)
        self.assertEqual(error.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        # The real one: the session continues on B exactly as on A.
        info = send(snapshot)
        self.assertEqual((info.session_id, info.position), (sid, len(p[0]) + len(p[1])))
        with self.assertRaises(grpc.RpcError) as error:
            send(snapshot)
        self.assertEqual(error.exception.code(), grpc.StatusCode.ALREADY_EXISTS)
        _, on_a = self.stream(a, pb.StreamOpen(session_id=sid), [self.append(3, p[2])])
        _, on_b = self.stream(b, pb.StreamOpen(session_id=sid), [self.append(3, p[2])])
        self.assertEqual(self.outputs(on_a[0]), self.outputs(on_b[0]))

    def test_hostile_ids_never_reach_the_store(self):
        pb, grpc = self.pb, self.grpc
        folder = os.path.join(self.tmp, "hostile")
        s = self.start("--session_store=dir:" + folder)
        for bad in ["../../etc/passwd", "a" * 10240, "/" + "0" * 31, "0" * 31 + "\n"]:
            for call in (lambda: s.stub.GetSession(pb.GetSessionRequest(session_id=bad),
                                                   timeout=30),
                         lambda: s.stub.CloseSession(pb.CloseSessionRequest(session_id=bad),
                                                     timeout=30),
                         lambda: list(s.stub.ExportSession(
                             pb.ExportSessionRequest(session_id=bad), timeout=30)),
                         lambda: self.stream(s, pb.StreamOpen(session_id=bad), [])):
                with self.assertRaises(grpc.RpcError) as error:
                    call()
                self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        for op in ("get", "delete", "put"):
            for result in ("ok", "not_found", "error"):
                self.assertEqual(self.metric(s, "attnserve_session_store_operations_total",
                                             op=op, result=result), 0, (op, result))
        self.assertEqual(os.listdir(folder), [])

    def test_damage_in_a_dir_store_is_counted_and_permanent(self):
        pb, grpc = self.pb, self.grpc
        folder = os.path.join(self.tmp, "damaged")
        a = self.start("--session_store=dir:" + folder, "--drain_save_deadline_s=2")
        ids = [self.stream(a, pb.StreamOpen(model="linear"), [self.append(1, [1, 2, 3])])[0]
               .session_id for _ in range(3)]
        # A folder where one session's snapshot goes: its write fails at every try (the rename),
        # and is tried again (0.5 s, 1 s) until the save deadline.
        os.mkdir(os.path.join(folder, ids[0] + ".snapshot"))
        self.assertEqual(self.stop(a), 0, a.output())
        line = re.search(r"saved (-?\d+) of (-?\d+) changed sessions.*", a.output())
        self.assertIsNotNone(line, a.output())
        self.assertEqual((line.group(1), line.group(2)), ("2", "3"), line.group(0))
        self.assertIn("; 1 failed", line.group(0))
        self.assertNotIn("unwritten", line.group(0))
        # Not of this store: the start-up sweep keeps it.
        with open(os.path.join(folder, "notes.tmp.txt"), "w") as notes:
            notes.write("an operator's")
        fifos = ["%032x" % (0xf1f0 + i) for i in range(2)]
        for sid in fifos:
            os.mkfifo(os.path.join(folder, sid + ".snapshot"))
        os.symlink(os.path.join(folder, ids[1] + ".snapshot"),
                   os.path.join(folder, "%032x" % 0x5e1f + ".snapshot"))

        b = self.start("--session_store=dir:" + folder)
        self.assertTrue(os.path.exists(os.path.join(folder, "notes.tmp.txt")))

        def get(sid, results):
            try:
                b.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
                results.append((sid, "OK"))
            except grpc.RpcError as e:
                results.append((sid, e.code()))

        results = []
        lookups = [threading.Thread(target=get, args=(sid, results)) for sid in fifos]
        for t in lookups:
            t.start()
        for t in lookups:
            t.join(15)
        self.assertEqual(sorted(results), [(sid, grpc.StatusCode.DATA_LOSS) for sid in fifos])
        self.assertTrue(b.stub.ListModels(pb.ListModelsRequest(), timeout=10).models)
        for sid in (ids[0], "%032x" % 0x5e1f):  # the folder, the symbolic link
            results = []
            get(sid, results)
            self.assertEqual(results, [(sid, grpc.StatusCode.DATA_LOSS)])
        # The sessions whose writes succeeded resume.
        for sid in ids[1:]:
            info = b.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
            self.assertEqual(info.position, 3)


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
