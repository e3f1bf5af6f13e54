"""What the Python benchmarks share: the CPU's name for their tables, attnserve-server
started on free ports (its gRPC target read from its log), and the AttnServe client stubs."""

import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def attnserve_stubs():
    """(grpc, inference_pb2, inference_pb2_grpc) for attnserve.v1, generated from the repository's
    protos into a temporary folder (tests/integration/python_client_test.generate_stubs)."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import python_client_test as pct
    pct.generate_stubs(str(REPO), tempfile.mkdtemp(prefix="attnserve_stubs_"))
    import grpc
    from attnserve.v1 import inference_pb2, inference_pb2_grpc
    return grpc, inference_pb2, inference_pb2_grpc


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


class Server:
    """attnserve-server on 127.0.0.1 with a port of its choosing and no metrics port."""

    def __init__(self, build, *flags):
        self.proc = subprocess.Popen(
            [os.path.join(build, "server", "attnserve-server"), "--host=127.0.0.1", "--port=0",
             "--metrics_port=-1", "--http_port=-1", *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.lines = []
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            m = re.search(r"listening on [0-9.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.target = "127.0.0.1:%d" % self.port
                return
        raise RuntimeError("the server did not start:\n" + "\n".join(self.lines))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
