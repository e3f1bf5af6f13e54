#!/usr/bin/python3
"""Freed memory goes back to the kernel once the server is idle (issue #27).

The server keeps freed heap memory for reuse while it works (kernels/common/memory_reuse.h);
server/idle_memory_trimmer.h gives it back after --idle_memory_trim_s of idleness. Here: a
real attnserve-server, 1000 sessions opened (one stream each) and left to expire; its resident
memory must come back within 10% of where it was before them.

Usage: memory_return_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402  (Server, generate_stubs)

ARGS = None
SESSIONS = 1000


def resident_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class MemoryReturnTest(pct.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_memory_")
        pct.generate_stubs(ARGS.source_dir, cls.tmp)
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        cls.grpc, cls.pb, cls.pb_grpc = grpc, inference_pb2, inference_pb2_grpc
        cls.binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")

    def open_sessions(self, stub, count, tokens):
        pb = self.pb
        for _ in range(count):
            replies = list(stub.Stream(iter([
                pb.StreamRequest(open=pb.StreamOpen(model="mamba", ttl_seconds=2)),
                pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=tokens))]),
                timeout=60))
            self.assertTrue(replies[0].opened.session_id)

    def wait_for_no_sessions(self, stub):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if stub.ListSessions(self.pb.ListSessionsRequest(), timeout=10).total == 0:
                return
            time.sleep(0.5)
        self.fail("the sessions did not expire")

    def settled_resident(self, pid, seconds=4.0):
        """Resident bytes after `seconds` of idleness (the trim comes after 1 s of it)."""
        time.sleep(seconds)
        return resident_bytes(pid)

    def test_resident_memory_returns_after_sessions_expire(self):
        server = pct.Server(self.binary, "--idle_memory_trim_s=1", "--max_sessions=5000")
        self.servers.append(server)
        channel = self.grpc.insecure_channel(server.target)
        self.channels.append(channel)
        stub = self.pb_grpc.AttnServeStub(channel)
        tokens = list(range(1, 65))
        # A warm-up of the same work, so that what stays is the server's (models, gRPC, the
        # allocator's bookkeeping), then the baseline.
        self.open_sessions(stub, 20, tokens)
        self.wait_for_no_sessions(stub)
        before = self.settled_resident(server.proc.pid)
        self.open_sessions(stub, SESSIONS, tokens)
        peak = resident_bytes(server.proc.pid)
        listed = stub.ListSessions(self.pb.ListSessionsRequest(), timeout=10).total
        self.wait_for_no_sessions(stub)
        after = self.settled_resident(server.proc.pid)
        mib = lambda b: "%.1f MiB" % (b / 2**20)
        print("resident: before %s, with %d sessions %s, after they expired %s"
              % (mib(before), listed, mib(peak), mib(after)))
        self.assertGreater(peak - before, 40 << 20, "the sessions should have taken memory")
        self.assertLess(after, before * 1.10, "resident memory did not come back")
        self.assertIsNone(server.proc.poll())


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
