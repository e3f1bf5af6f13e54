"""Resident memory of attnserve-server per --weight_precision on one model folder: what the
weights cost a user in each format (issue #25: 8-bit weights must not take more memory than
float32 ones).

For each precision it starts the server on the folder, waits until it listens and then for the
idle trim (--idle_memory_trim_s, which hands the loader's freed memory back), and reads VmRSS from
/proc. The baseline in the same run is float32: "saved" is its RSS minus each precision's, to
set against the safetensors' size (the libraries, threads and buffers are the same in every
row).

  /usr/bin/python3 bench/weight_memory.py --build-dir build --repository /tmp/bd/repo \\
      --policy mamba-130m
"""

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import Server, cpu_name  # noqa: E402


def resident_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 1024


def settled_rss(build, *flags, wait_s=12):
    server = Server(build, "--idle_memory_trim_s=2", *flags)
    try:
        time.sleep(wait_s)
        return resident_mib(server.proc.pid)
    finally:
        server.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--repository", required=True, help="a model folder (attnserve or Hugging Face)")
    p.add_argument("--policy", required=True, help="the server's --policy for the folder's model")
    p.add_argument("--precisions", default="fp32,bf16,int8")
    args = p.parse_args()
    weights = sum(f.stat().st_size for f in Path(args.repository).rglob("*.safetensors"))
    print(f"CPU: {cpu_name()}; {time.strftime('%Y-%m-%d %H:%M')}; {args.repository}: "
          f"{weights / 2**20:.0f} MiB of safetensors")
    print(f"{'precision':>10} {'RSS MiB':>9} {'x fp32':>7} {'saved MiB':>10}")
    fp32 = None
    for precision in args.precisions.split(","):
        rss = settled_rss(args.build_dir, f"--model_repository={args.repository}",
                          f"--policy={args.policy}", f"--weight_precision={precision}")
        fp32 = rss if precision == "fp32" else fp32
        if fp32 is None:
            print(f"{precision:>10} {rss:>9.0f}")
        else:
            print(f"{precision:>10} {rss:>9.0f} {rss / fp32:>7.2f} {fp32 - rss:>10.0f}")

if __name__ == "__main__":
    main()
