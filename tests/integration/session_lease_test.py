#!/usr/bin/python3
"""Leases with fencing across real processes: attnserve-server replicas sharing a real
redis-server (--session_store=redis://, --session_lease_ms), driven by a Python gRPC client.

- split brain: a session held by replica A is UNAVAILABLE on B with A's address in the trailing
  metadata x-attnserve-session-owner (resume, Infer, GetSession, ExportSession, CloseSession); A is SIGSTOPped past its lease, B takes the session over
  from its last checkpoint and moves it on; after SIGCONT, A's open stream and a new call to A
  are UNAVAILABLE naming B (never a result from A's stale copy), A drops its copy (counted
  lease_lost or its write fenced), and the store holds B's state: a fresh replica resumes it
  where B left it, with outputs equal to an unbroken session's;
- rolling update: SIGTERM of A saves and releases its leases, so B resumes A's sessions at once
  (long before the lease would expire), exactly where they were;
- a closed session leaves no lease behind;
- the load signals (attnserve_load_*) of a replica: queued requests, running sessions, state
  bytes used and the budget.

Usage: session_lease_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import os
import queue
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402
import session_store_test as sst  # noqa: E402  (Redis, the stream helpers)

ARGS = None
LEASE_MS = 1500


class SessionLeaseTest(pct.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sst.ARGS = ARGS
        sst.SessionStoreTest.setUpClass.__func__(cls)

    @classmethod
    def tearDownClass(cls):
        sst.SessionStoreTest.tearDownClass.__func__(cls)

    # The helpers of the session store's test: start, stop, metric, append, stream, outputs,
    # prompts.
    start = sst.SessionStoreTest.start
    stop = sst.SessionStoreTest.stop
    metric = sst.SessionStoreTest.metric
    append = sst.SessionStoreTest.append
    stream = sst.SessionStoreTest.stream
    outputs = staticmethod(sst.SessionStoreTest.outputs)
    prompts = sst.SessionStoreTest.prompts

    def replica(self, redis, *flags):
        port = sst.free_port()
        server = self.start("--session_store=redis://127.0.0.1:%d" % redis.port,
                            "--port=%d" % port, "--advertise_address=127.0.0.1:%d" % port,
                            "--session_lease_ms=%d" % LEASE_MS, *flags)
        server.address = "127.0.0.1:%d" % port
        return server

    def owner_of(self, error):
        for key, value in error.trailing_metadata() or ():
            if key == "x-attnserve-session-owner":
                return value
        return None

    def redis_cli(self, redis, *args):
        return subprocess.run(["redis-cli", "-p", str(redis.port)] + list(args),
                              capture_output=True, text=True, timeout=10).stdout.strip()

    def wait_for_metric(self, server, name, value, **labels):
        deadline = time.monotonic() + 10
        while self.metric(server, name, **labels) < value and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.metric(server, name, **labels)

    def test_split_brain_a_paused_replica_never_serves_or_writes_its_stale_copy(self):
        pb = self.pb
        redis = sst.Redis()
        try:
            a = self.replica(redis, "--checkpoint_every_appends=1")
            b = self.replica(redis, "--checkpoint_every_appends=1")
            p = self.prompts(6, 11)
            _, unbroken = self.stream(b, pb.StreamOpen(model="mamba"),
                                      [self.append(k + 1, p[k]) for k in range(6)])
            opened, first = self.stream(a, pb.StreamOpen(model="mamba"),
                                        [self.append(1, p[0]), self.append(2, p[1])])
            sid = opened.session_id
            self.assertEqual(self.outputs(first[1]), self.outputs(unbroken[1]))
            self.assertIn(a.address, self.redis_cli(redis, "GET", "attnserve:lease:" + sid))

            # Held by A: B answers UNAVAILABLE naming A, for a stream and a unary call.
            with self.assertRaises(self.grpc.RpcError) as error:
                self.stream(b, pb.StreamOpen(session_id=sid), [self.append(3, p[2])])
            self.assertEqual(error.exception.code(), self.grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(self.owner_of(error.exception), a.address)
            with self.assertRaises(self.grpc.RpcError) as error:
                b.stub.Infer(pb.InferRequest(session_id=sid, tokens=[1]), timeout=30)
            self.assertEqual(error.exception.code(), self.grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(self.owner_of(error.exception), a.address)
            # Every other call about it alike: GetSession (SessionInfo.server is the holder, so
            # B does not answer for it), ExportSession, CloseSession.
            for call in (
                    lambda: b.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=30),
                    lambda: list(b.stub.ExportSession(
                        pb.ExportSessionRequest(session_id=sid), timeout=30)),
                    lambda: b.stub.CloseSession(pb.CloseSessionRequest(session_id=sid),
                                                timeout=30)):
                with self.assertRaises(self.grpc.RpcError) as error:
                    call()
                self.assertEqual(error.exception.code(), self.grpc.StatusCode.UNAVAILABLE)
                self.assertEqual(self.owner_of(error.exception), a.address)
                # And which session that holder holds (what a gateway keys its route by).
                self.assertIn(("x-attnserve-held-session", sid),
                              list(error.exception.trailing_metadata() or ()))
            info = a.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=30)
            self.assertEqual(info.server.advertise_address, a.address)

            # A stream stays open on A across the pause.
            requests = queue.Queue()
            requests.put(pb.StreamRequest(open=pb.StreamOpen(session_id=sid)))
            requests.put(self.append(3, p[2]))
            held = a.stub.Stream(iter(requests.get, None), timeout=60)
            self.assertEqual(next(held).opened.last_sequence_number, 2)
            self.assertEqual(self.outputs(next(held).result), self.outputs(unbroken[2]))
            # Its checkpoint after append 3 is written before A stops.
            self.assertEqual(self.wait_for_metric(a, "attnserve_session_store_operations_total",
                                                  3, op="put", result="ok"), 3)

            a.proc.send_signal(signal.SIGSTOP)
            try:
                time.sleep(LEASE_MS / 1000 + 1.0)
                # B takes it over from A's last checkpoint and moves it on.
                opened_b, moved = self.stream(b, pb.StreamOpen(session_id=sid),
                                              [self.append(4, p[3]), self.append(5, p[4])])
                self.assertEqual(opened_b.last_sequence_number, 3)
                self.assertEqual(self.outputs(moved[0]), self.outputs(unbroken[3]))
                self.assertEqual(self.outputs(moved[1]), self.outputs(unbroken[4]))
                self.assertIn(b.address, self.redis_cli(redis, "GET", "attnserve:lease:" + sid))
            finally:
                a.proc.send_signal(signal.SIGCONT)

            # A's open stream: its next append is refused, naming B (no result from A's copy).
            requests.put(self.append(4, p[5]))
            with self.assertRaises(self.grpc.RpcError) as error:
                for response in held:
                    self.fail("a response from the stale copy: %s" % response)
            self.assertEqual(error.exception.code(), self.grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(self.owner_of(error.exception), b.address)
            requests.put(None)
            with self.assertRaises(self.grpc.RpcError) as error:
                self.stream(a, pb.StreamOpen(session_id=sid), [self.append(6, p[5])])
            self.assertEqual(self.owner_of(error.exception), b.address)
            dropped = self.metric(a, "attnserve_session_evictions_total", reason="lease_lost")
            fenced = self.metric(a, "attnserve_session_store_operations_total", op="put",
                                 result="fenced")
            self.assertGreaterEqual(dropped + fenced, 1, a.output())

            # A drains (it holds nothing of the session now); the store holds B's state.
            self.assertEqual(self.stop(a), 0, a.output())
            self.assertEqual(self.stop(b), 0, b.output())
            c = self.replica(redis)
            opened_c, last = self.stream(c, pb.StreamOpen(session_id=sid),
                                         [self.append(6, p[5])])
            self.assertEqual(opened_c.last_sequence_number, 5)
            self.assertEqual(self.outputs(last[0]), self.outputs(unbroken[5]))
        finally:
            redis.stop()

    def test_sigterm_releases_leases_and_another_replica_resumes_at_once(self):
        pb = self.pb
        redis = sst.Redis()
        try:
            a = self.replica(redis, "--session_lease_ms=60000")
            b = self.replica(redis, "--session_lease_ms=60000")
            p = self.prompts(4, 5)
            sessions, unbroken = [], []
            for model in ("standard", "linear", "rwkv"):
                _, whole = self.stream(b, pb.StreamOpen(model=model),
                                       [self.append(k + 1, p[k]) for k in range(4)])
                unbroken.append(whole)
                opened, _ = self.stream(a, pb.StreamOpen(model=model),
                                        [self.append(k + 1, p[k]) for k in range(3)])
                sessions.append(opened.session_id)
            # The load signals a router reads, one value per replica.
            self.assertEqual(self.metric(a, "attnserve_load_queued_requests"), 0)
            self.assertEqual(self.metric(a, "attnserve_load_running_sessions"), 0)
            self.assertEqual(self.metric(a, "attnserve_load_state_budget_bytes"), 8 << 30)
            used = self.metric(a, "attnserve_load_state_bytes")
            self.assertEqual(used, sum(self.metric(a, "attnserve_session_state_bytes", variant=m)
                                       for m in ("standard", "linear", "rwkv")))
            self.assertGreater(used, 0)
            self.assertAlmostEqual(self.metric(a, "attnserve_load_state_usage_ratio"),
                                   used / (8 << 30), places=9)
            requests = queue.Queue()
            requests.put(pb.StreamRequest(open=pb.StreamOpen(session_id=sessions[1])))
            attached = a.stub.Stream(iter(requests.get, None), timeout=60)
            next(attached)  # opened: the stream holds the session
            self.assertEqual(self.metric(a, "attnserve_load_running_sessions"), 1)
            requests.put(None)
            for _ in attached:
                pass
            self.assertEqual(self.stop(a), 0, a.output())
            self.assertIn("released 3 leases", a.output())
            start = time.monotonic()
            for sid, whole in zip(sessions, unbroken):
                opened, resumed = self.stream(b, pb.StreamOpen(session_id=sid),
                                              [self.append(4, p[3])])
                self.assertEqual(opened.last_sequence_number, 3)
                self.assertEqual(self.outputs(resumed[0]), self.outputs(whole[3]))
            self.assertLess(time.monotonic() - start, 30)  # not after the 60 s lease

            # Closing removes the snapshot, the lease and its last holder.
            b.stub.CloseSession(pb.CloseSessionRequest(session_id=sessions[0]), timeout=30)
            deadline = time.monotonic() + 10
            keys = None
            while time.monotonic() < deadline:
                keys = self.redis_cli(redis, "EXISTS", "attnserve:session:" + sessions[0],
                                      "attnserve:lease:" + sessions[0],
                                      "attnserve:holder:" + sessions[0])
                if keys == "0":
                    break
                time.sleep(0.05)
            self.assertEqual(keys, "0")
        finally:
            redis.stop()


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
