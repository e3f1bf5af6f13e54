#!/usr/bin/python3
"""Freed memory goes back to the kernel once the server is idle (issue #27).

The server keeps freed heap memory for reuse while it works (kernels/common/memory_reuse.h);
server/idle_memory_trimmer.h gives it back after --idle_memory_trim_s of idleness. Here: a
real attnserve-server, 1000 sessions of the default `standard` model (a KV cache each) opened,
one stream each, then closed; its resident memory must come back within 10% of where it was
before them.

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
        ids = []
        for _ in range(count):
            replies = list(stub.Stream(iter([
                pb.StreamRequest(open=pb.StreamOpen(model="standard")),
                pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=tokens,
                                                        output=pb.OutputSpec(kind=pb.OUTPUT_KIND_NONE)))]),
                timeout=60))
            ids.append(replies[0].opened.session_id)
            self.assertTrue(ids[-1])
        return ids

    def close_sessions(self, stub, ids):
        for sid in ids:
            stub.CloseSession(self.pb.CloseSessionRequest(session_id=sid), timeout=10)
        self.assertEqual(stub.ListSessions(self.pb.ListSessionsRequest(), timeout=10).total, 0)

    def settled_resident(self, pid, seconds=4.0):
        """Resident bytes after `seconds` of idleness (the trim comes after 1 s of it)."""
        time.sleep(seconds)
        return resident_bytes(pid)

    def serve(self, *flags):
        """A server with the idle trim after 1 s and `flags`, and a stub for it."""
        server = pct.Server(self.binary, "--idle_memory_trim_s=1", *flags)
        self.servers.append(server)
        channel = self.grpc.insecure_channel(server.target)
        self.channels.append(channel)
        return server, self.pb_grpc.AttnServeStub(channel)

    def resident_around(self, server, stub, tokens, warmup, count, while_open=None):
        """Resident bytes settled before `count` sessions of `tokens`, with them open, and
        settled after they were closed; first a warm-up of `warmup` such sessions, so that what
        stays is the server's (models, gRPC, the allocator's bookkeeping). `while_open` runs
        while they are open."""
        self.close_sessions(stub, self.open_sessions(stub, warmup, tokens))
        before = self.settled_resident(server.proc.pid)
        ids = self.open_sessions(stub, count, tokens)
        peak = resident_bytes(server.proc.pid)
        if while_open is not None:
            while_open()
        self.close_sessions(stub, ids)
        after = self.settled_resident(server.proc.pid)
        mib = lambda b: "%.1f MiB" % (b / 2**20)
        print("resident: before %s, with %d sessions of %d tokens %s, after they were closed %s"
              % (mib(before), count, len(tokens), mib(peak), mib(after)))
        return before, peak, after

    def test_resident_memory_returns_after_the_sessions_are_gone(self):
        server, stub = self.serve("--max_sessions=5000")
        listed = []
        before, peak, after = self.resident_around(
            server, stub, list(range(1, 33)), 20, SESSIONS, while_open=lambda: listed.append(
                stub.ListSessions(self.pb.ListSessionsRequest(), timeout=10).total))
        self.assertEqual(listed, [SESSIONS])
        # The sessions must have taken far more than the 10% allowed, or the test says nothing.
        self.assertGreater(peak - before, before * 0.3, "the sessions should have taken memory")
        self.assertLess(after, before * 1.10, "resident memory did not come back")
        self.assertIsNone(server.proc.poll())

    def test_kept_kv_buffers_are_unmapped_when_idle(self):
        """Sessions whose KV caches have mappings of their own (2 MiB or more: 3000 tokens of
        `standard` are 3 MB a tensor): closed, their buffers stay in the reuse pool
        (--kv_buffer_pool_bytes) while the server works, and the idle trim unmaps them."""
        server, stub = self.serve("--prefix_cache_bytes=0")
        before, peak, after = self.resident_around(
            server, stub, [1 + i % 4000 for i in range(3000)], 2, 12)
        # 12 sessions x 4 layers x 2 tensors x 3 MB: ~290 MB, above the pool's 256 MiB.
        self.assertGreater(peak - before, 200 * 2**20, "the sessions should have taken memory")
        self.assertLess(after, before * 1.10, "kept KV buffers were not unmapped when idle")
        self.assertIsNone(server.proc.poll())

if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
