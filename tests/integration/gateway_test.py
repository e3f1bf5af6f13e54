#!/usr/bin/python3
"""Many replicas as one service, through the real gateway: scripts/cluster.sh starts 3
attnserve-server replicas on one real redis-server (leases, --checkpoint_every_appends=1) behind
HAProxy (deploy/k8s/overlays/gateway/haproxy.cfg); Python gRPC clients reach them only through
the gateway's one address, with client/python/attnserve_session.py's documented retry.

- routing: new sessions spread over the replicas; every later call of a session reaches the
  replica that holds it (learnt from the x-attnserve-session header of its first answer);
- SIGKILL: 50 sessions streaming; the replica holding the most is SIGKILLed mid-run; every
  session goes on through the same address on another replica, no acknowledged append is lost
  (each resume starts at or after the last append acknowledged), and every append's outputs
  equal those of an unbroken run of the same appends;
- SIGTERM (a rolling update): the draining replica is taken out of the gateway by its /ready
  check, its sessions move with no error at the client beyond the retry, outputs unchanged;
- two gateways: a session taken over through the second gateway (its holder paused past its
  lease) is reached through the first with at most one refused call, once the old holder runs
  again and names the new one.

Usage: gateway_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import collections
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402

ARGS = None
REPLICAS = 3
SESSIONS = 50
APPENDS = 6


def free_base_port():
    """A base port P with P..P+3, P+98..P+103 and the second gateway's P+92 and P+82 free
    (scripts/cluster.sh's layout)."""
    for base in range(20000 + os.getpid() % 20000, 60000, 211):
        ports = list(range(base, base + REPLICAS + 1)) + \
            list(range(base + 98, base + 101 + REPLICAS)) + [base + 92, base + 82]
        free = True
        for p in ports:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    free = False
                    break
        if free:
            return base
    raise RuntimeError("no free ports")


class Cluster:
    """scripts/cluster.sh start ... stop."""

    def __init__(self, source_dir, build_dir, *flags):
        self.script = os.path.join(source_dir, "scripts", "cluster.sh")
        self.dir = tempfile.mkdtemp(prefix="attnserve_cluster_")
        self.port = free_base_port()
        self.build_dir = os.path.abspath(build_dir)
        try:
            self.run("start", "--replicas", str(REPLICAS), "--gateways", "2", "--port",
                     str(self.port), "--build-dir", self.build_dir, "--",
                     "--intra_op_threads=1", *flags)
        except Exception:
            self.stop()
            raise
        self.gateway = "127.0.0.1:%d" % self.port
        # A second HAProxy in front of the same replicas (as a gateway Deployment of two).
        self.second_gateway = "127.0.0.1:%d" % (self.port + 92)

    def run(self, *args):
        env = dict(os.environ, BUILD_DIR=self.build_dir)
        done = subprocess.run([self.script, args[0], "--dir", self.dir] + list(args[1:]),
                              capture_output=True, text=True, timeout=300, env=env)
        if done.returncode != 0:
            raise RuntimeError("cluster.sh %s failed:\n%s%s\n%s" % (
                args[0], done.stdout, done.stderr, self.logs()))
        return done.stdout

    def logs(self):
        text = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text.append("== %s\n%s" % (name, "".join(f.readlines()[-15:])))
        return "\n".join(text)

    def replica_of(self, instance_name):
        return int(instance_name.rsplit("-", 1)[1])

    def stop(self):
        try:
            self.run("stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class GatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for tool in ("redis-server",):
            if shutil.which(tool) is None:
                raise unittest.SkipTest("%s is not installed" % tool)
        if shutil.which("haproxy") is None and not os.path.exists("/usr/sbin/haproxy"):
            raise unittest.SkipTest("haproxy is not installed")
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_gateway_")
        pct.ARGS = ARGS
        pct.generate_stubs(ARGS.source_dir, os.path.join(cls.tmp, "stubs"))
        sys.path.insert(0, os.path.join(os.path.abspath(ARGS.source_dir), "client", "python"))
        import grpc
        import attnserve_session
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        cls.grpc, cls.pb, cls.pb_grpc = grpc, inference_pb2, inference_pb2_grpc
        cls.client = attnserve_session

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.cluster = Cluster(ARGS.source_dir, ARGS.build_dir)
        self.channel = self.grpc.insecure_channel(self.cluster.gateway)
        self.grpc.channel_ready_future(self.channel).result(timeout=30)

    def tearDown(self):
        self.channel.close()
        self.cluster.stop()

    # ---- helpers ----

    def prompts(self, session):
        """APPENDS token lists for one session, the odd ones a single token (decode steps)."""
        return [[(session * 131 + i * 17 + k * 7) % 4096 for k in range(1 if i % 2 else 4 + i)]
                for i in range(APPENDS)]

    def session(self, model="mamba"):
        return self.client.ResumableSession(self.channel, self.pb, self.pb_grpc, model=model,
                                            retry_deadline_s=60)

    @staticmethod
    def logits(result):
        return np.array(result.outputs.tensor.float_data, dtype=np.float64)

    def assert_same(self, got, want, what):
        self.assertEqual(len(got), len(want), what)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)

    def unbroken(self, n):
        """Each session's outputs, run through the gateway with no failure."""
        runs = []
        for s in range(n):
            session = self.session()
            runs.append([self.logits(session.append(p)) for p in self.prompts(s)])
            session.close()
        return runs

    def interrupted(self, n, fault):
        """n sessions; after the first half of their appends, fault(owners) hits a replica;
        then the rest. Returns (outputs, sessions, owners before the fault)."""
        sessions = [self.session() for _ in range(n)]
        self.sessions = sessions
        outputs = [[] for _ in range(n)]
        acknowledged = [0] * n
        half = APPENDS // 2
        for k in range(half):
            for s, session in enumerate(sessions):
                result = session.append(self.prompts(s)[k])
                self.assertTrue(result.stored, "with --checkpoint_every_appends=1 every result "
                                "is stored before it is sent")
                acknowledged[s] = result.sequence_number
                outputs[s].append(self.logits(result))
        owners = [session.opened.server.instance_name for session in sessions]
        fault(owners)
        for k in range(half, APPENDS):
            for s, session in enumerate(sessions):
                resumes = session.resumes
                result = session.append(self.prompts(s)[k])
                if session.resumes > resumes:
                    # No acknowledged append lost: the store had everything acknowledged.
                    self.assertGreaterEqual(session.opened.last_sequence_number, acknowledged[s],
                                            "session %d resumed before its last acknowledged "
                                            "append" % s)
                acknowledged[s] = result.sequence_number
                outputs[s].append(self.logits(result))
        return outputs, sessions, owners

    # ---- tests ----

    def test_sessions_spread_and_each_call_reaches_its_holder(self):
        sessions = [self.session() for _ in range(9)]
        for s, session in enumerate(sessions):
            session.append(self.prompts(s)[0])
        owners = collections.Counter(s.opened.server.instance_name for s in sessions)
        self.assertEqual(len(owners), REPLICAS, "new sessions spread: %s" % owners)
        stub = self.pb_grpc.AttnServeStub(self.channel)
        for session in sessions:
            sid = session.session_id
            holder = session.opened.server.instance_name
            session.close()
            # A new stream, a unary Infer and GetSession through the gateway all reach the holder.
            resumed = self.client.ResumableSession(self.channel, self.pb, self.pb_grpc,
                                                   session_id=sid)
            self.assertEqual(resumed.opened.server.instance_name, holder)
            self.assertEqual(resumed.resumes, 0)
            resumed.close()
            meta = [(self.client.SESSION_HEADER, sid)]
            reply = stub.Infer(self.pb.InferRequest(session_id=sid, tokens=[7]), timeout=30,
                               metadata=meta)
            self.assertEqual(reply.server.instance_name, holder)
            self.assertTrue(reply.stored)
            info = stub.GetSession(self.pb.GetSessionRequest(session_id=sid), timeout=30,
                                   metadata=meta)
            self.assertEqual(info.session_id, sid)

    def test_a_session_moved_behind_another_gateway_is_reached_through_this_one(self):
        # Opened through gateway 1 on replica H; H paused past its lease; taken over through
        # gateway 2 by replica X (gateway 1 never sees that); H runs again. Gateway 1's table
        # still says H, which answers UNAVAILABLE naming X: gateway 1 learns X from that answer,
        # and the retry reaches X. Before, every retry went back to H.
        pb, C = self.pb, self.grpc.StatusCode
        stub = self.pb_grpc.AttnServeStub(self.channel)
        # Gateway 1 learns which server each replica's address is from the answers it relays:
        # sessionless calls go to each replica in turn (leastconn, all idle).
        for _ in range(3 * REPLICAS):
            stub.ListModels(pb.ListModelsRequest(), timeout=30)
        opened = list(stub.Stream(iter([
            pb.StreamRequest(open=pb.StreamOpen(model="mamba")),
            pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=[1, 2, 3]))]),
            timeout=60))  # the stream ends, the session stays (no close)
        sid = opened[0].opened.session_id
        holder = opened[0].opened.server.instance_name
        meta = [(self.client.SESSION_HEADER, sid)]
        self.assertEqual(stub.Infer(pb.InferRequest(session_id=sid, tokens=[4]), timeout=30,
                                    metadata=meta).server.instance_name, holder)

        h = self.cluster.replica_of(holder)
        self.cluster.run("kill", str(h), "STOP")
        time.sleep(1)  # both gateways' checks (every 250 ms) mark H down
        try:
            other = self.grpc.insecure_channel(self.cluster.second_gateway)
            self.addCleanup(other.close)
            second = self.pb_grpc.AttnServeStub(other)
            deadline, taker = time.monotonic() + 30, None
            while taker is None and time.monotonic() < deadline:
                try:
                    reply = second.Infer(pb.InferRequest(session_id=sid, tokens=[5]), timeout=10,
                                         metadata=meta)
                    taker = reply.server.instance_name
                except self.grpc.RpcError as e:
                    self.assertIn(e.code(), (C.UNAVAILABLE, C.CANCELLED, C.DEADLINE_EXCEEDED),
                                  e.details())
                    time.sleep(0.2)  # until H's lease expires
            self.assertIsNotNone(taker, "no replica took the session over through gateway 2")
            self.assertNotEqual(taker, holder)
        finally:
            self.cluster.run("kill", str(h), "CONT")
        time.sleep(2)  # gateway 1 checks H up again (rise 2, every 250 ms)

        # Through gateway 1: at most one refused call (H's answer), then X answers.
        refused, reply = 0, None
        for _ in range(5):
            try:
                reply = stub.Infer(pb.InferRequest(session_id=sid, tokens=[6]), timeout=10,
                                   metadata=meta)
                break
            except self.grpc.RpcError as e:
                self.assertEqual(e.code(), C.UNAVAILABLE, e.details())
                refused += 1
        self.assertIsNotNone(reply, "gateway 1 never reached the holder")
        self.assertEqual(reply.server.instance_name, taker)
        self.assertLessEqual(refused, 1)
        self.assertEqual(reply.session_position, 6)  # 3 + 1 + 1 + 1: nothing lost or doubled
        # Every later call goes there at once, closing included.
        info = stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10, metadata=meta)
        self.assertEqual(info.server.instance_name, taker)
        stub.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=10, metadata=meta)

    def test_sigkill_of_a_replica_mid_run_loses_no_acknowledged_append(self):
        unbroken = self.unbroken(SESSIONS)
        killed = []

        def kill_the_busiest(owners):
            busiest, count = collections.Counter(owners).most_common(1)[0]
            self.assertGreater(count, 0)
            killed.append(busiest)
            self.cluster.run("kill", str(self.cluster.replica_of(busiest)), "KILL")

        outputs, sessions, owners = self.interrupted(SESSIONS, kill_the_busiest)
        moved = 0
        for s, session in enumerate(sessions):
            for k in range(APPENDS):
                self.assert_same(outputs[s][k], unbroken[s][k], "session %d append %d" % (s, k + 1))
            if owners[s] == killed[0]:
                moved += 1
                self.assertGreaterEqual(session.resumes, 1)
                self.assertNotEqual(session.opened.server.instance_name, killed[0])
            else:
                self.assertEqual(session.resumes, 0, "session %d was on a live replica" % s)
        self.assertGreaterEqual(moved, SESSIONS // REPLICAS)

    def test_sigterm_rolling_update_moves_sessions_with_one_retry(self):
        n = 12
        unbroken = self.unbroken(n)
        stopped = []

        def terminate_one(owners):
            first = owners[0]
            stopped.append(first)
            replica = self.cluster.replica_of(first)
            self.cluster.run("kill", str(replica), "TERM")
            # Draining once its /ready says so (in Kubernetes the preStop pause covers this).
            ready = "http://127.0.0.1:%d/ready" % (self.cluster.port + 100 + replica)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(ready, timeout=1).read()
                except urllib.error.HTTPError as e:
                    self.assertEqual(e.code, 503)
                    break
                except OSError:
                    break  # gone already
                time.sleep(0.02)
            # Between turns the clients' streams end (as a chat client's do); the drain, which
            # waits for open streams, then saves and releases the sessions at once.
            for session in self.sessions:
                session.close()

        outputs, sessions, owners = self.interrupted(n, terminate_one)
        for s, session in enumerate(sessions):
            for k in range(APPENDS):
                self.assert_same(outputs[s][k], unbroken[s][k], "session %d append %d" % (s, k + 1))
            if owners[s] == stopped[0]:
                self.assertGreaterEqual(session.resumes, 1)
                self.assertNotEqual(session.opened.server.instance_name, stopped[0])


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
