"""What the Python benchmarks share: the CPU's name for their tables, and attnserve-server
started on free ports (its gRPC target read from its log)."""

import os
import platform
import re
import subprocess


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
             "--metrics_port=-1", *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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
