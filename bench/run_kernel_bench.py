#!/usr/bin/python3
"""Kernel benchmark: attnserve's C++ mixers against the seeds' PyTorch code.

Runs every case as its own subprocess (attnserve_kernel_bench from --build-dir, and
bench/baselines/seed_baselines.py under --python), pairs each attnserve case with its
baseline and prints two tables: prefill throughput per length, and the cost of one decode
step after a short and a long context. Both sides time the whole mixer, projections
included. Needs no torch itself; the baselines need /usr/bin/python3 with python3-torch.

  /usr/bin/python3 bench/run_kernel_bench.py --build-dir build --json bench.json
  /usr/bin/python3 bench/run_kernel_bench.py --quick        # smoke run, tiny sizes

Exit status 1 if any case failed (crashed, printed no result, or reported an error);
skipped cases (memory or time cap) and missed speed targets do not fail the run.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE_SCRIPT = REPO / "bench" / "baselines" / "seed_baselines.py"
MIB = 1 << 20
GIB = 1 << 30

# (attnserve case, baseline case, lengths). A case may pair with more than one baseline.
# *_core cases time the kernel alone on precomputed inputs (attention core on q, k, v; mamba's
# scan with its D skip and gate), no projections; the others the whole mixer, projections
# included, on both sides.
ATTN_LENGTHS = [1024, 4096, 16384]
MAMBA_LENGTHS = [1024, 2048, 4096, 16384]
PREFILL_PAIRS = [
    ("standard_causal", "standard_full", ATTN_LENGTHS),
    ("standard_causal_core", "standard_full_core", ATTN_LENGTHS),
    ("linformer", "linformer", ATTN_LENGTHS),
    ("linear_causal", "causal_linear_step", ATTN_LENGTHS),
    ("linear_causal", "causal_linear_step_batched", ATTN_LENGTHS),
    ("linear_causal_core", "causal_linear_step_core", ATTN_LENGTHS),
    ("linear_causal_core", "causal_linear_step_batched_core", ATTN_LENGTHS),
    ("mamba_prefill", "mamba_loop", MAMBA_LENGTHS),
    ("mamba_scan_core", "mamba_loop_core", MAMBA_LENGTHS),
]
STEP_CASES = ["standard_step", "linear_step", "mamba_step"]
CONTEXTS = [1024, 32768]

# Speed-up targets: (attnserve case, baseline case, L) -> minimum attnserve/baseline.
# Judged in both scopes, whole mixer and core.
SPEEDUP_TARGETS = {
    ("mamba_prefill", "mamba_loop", 2048): 15.0,
    ("mamba_scan_core", "mamba_loop_core", 2048): 15.0,
    ("linear_causal", "causal_linear_step", 4096): 30.0,
    ("linear_causal_core", "causal_linear_step_core", 4096): 30.0,
    ("standard_causal", "standard_full", 4096): 8.0,
    ("standard_causal_core", "standard_full_core", 4096): 8.0,
}
# Ours must run at this length where the L×L baseline needs at least this much memory.
RUNS_WHERE_LXL_CANNOT = {
    ("standard_causal", "standard_full", 16384): 8 * GIB,
    ("standard_causal_core", "standard_full_core", 16384): 8 * GIB,
}
# Step cases whose long-context step must stay within this factor of the short-context one.
STEP_RATIO_TARGETS = {"linear_step": 1.2, "mamba_step": 1.2}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(REPO / "build"),
                   help="CMake build tree with bench/attnserve_kernel_bench (default: build/)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with torch for the baselines")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5, help="timed prefill runs, attnserve")
    p.add_argument("--baseline-repeats", type=int, default=3, help="timed runs, baselines")
    p.add_argument("--steps", type=int, default=256, help="timed Step calls per step case")
    p.add_argument("--lengths", type=int, nargs="+",
                   help="override the prefill lengths of every pair")
    p.add_argument("--contexts", type=int, nargs=2, default=CONTEXTS, metavar=("SHORT", "LONG"))
    p.add_argument("--only", nargs="+", metavar="CASE",
                   help="run only rows whose attnserve or baseline case is listed")
    p.add_argument("--no-baselines", action="store_true", help="attnserve cases only")
    p.add_argument("--mem-cap-gib", type=float, default=12.0,
                   help="baselines estimated to need more are skipped")
    p.add_argument("--time-cap-s", type=float, default=120.0,
                   help="timed runs of a case are cut (to at least one) to fit in about "
                        "this; a baseline whose warm-up exceeds it is skipped; a subprocess "
                        "is killed after 3x this + 60 s")
    p.add_argument("--wait-idle-s", type=float, default=0,
                   help="before each case wait (at most this long) until the CPUs are >= 85%% "
                        "idle, so that other jobs skew the timings less; 0: do not wait")
    p.add_argument("--omp-wait-policy", default="PASSIVE",
                   help="OMP_WAIT_POLICY for both sides (empty: inherit). PASSIVE by default: "
                        "with libgomp's spinning default, 2 threads on 2 shared cores run "
                        "up to 20x slower whenever another process wants a core")
    p.add_argument("--malloc-reuse", action="store_true",
                   help="both sides: glibc keeps freed memory (GLIBC_TUNABLES mmap_max=0, "
                        "high trim_threshold), so tensors over 32 MiB are not mmap-ed and "
                        "page-faulted afresh on every call (costly in VMs)")
    p.add_argument("--json", metavar="FILE", help="write every result and target here")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tiny sizes, one repeat; checks for errors, not speed")
    args = p.parse_args()
    if args.quick:
        args.lengths = args.lengths or [128]
        args.contexts = [64, 256]
        args.repeats = args.baseline_repeats = 1
        args.steps = 16
        args.time_cap_s = min(args.time_cap_s, 60.0)
    return args


def find_binary(build_dir):
    build = Path(build_dir)
    for candidate in (build / "bench" / "attnserve_kernel_bench",
                      build / "attnserve_kernel_bench"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    sys.exit(f"run_kernel_bench: no attnserve_kernel_bench under {build}; build it with\n"
             f"  cmake --build {build} --target attnserve_kernel_bench")


def cpu_idle_fraction(window_s=2.0):
    """Fraction of all CPUs' time spent idle over the next window_s seconds (/proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total
    idle0, total0 = sample()
    time.sleep(window_s)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_for_idle(max_wait_s, threshold=0.85):
    """Waits until the CPUs are mostly idle (others' builds would skew timings), at most
    max_wait_s; returns the idle fraction seen last."""
    deadline = time.monotonic() + max_wait_s
    while True:
        idle = cpu_idle_fraction()
        if idle >= threshold or time.monotonic() >= deadline:
            return idle
        time.sleep(5)


# glibc keeps freed memory for reuse instead of returning blocks over 32 MiB to the kernel:
# a steady-state server's allocator, without the first-touch page faults of a fresh mmap.
MALLOC_REUSE_TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"


def run_json(cmd, timeout_s, threads, label, wait_idle_s=0, omp_wait_policy="",
             malloc_reuse=False):
    """Runs one case; returns its JSON result, or an error/skip record, never raises."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if omp_wait_policy:
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    if malloc_reuse:
        env["GLIBC_TUNABLES"] = MALLOC_REUSE_TUNABLES
    idle = wait_for_idle(wait_idle_s) if wait_idle_s > 0 else None
    print(f"  {label} ...", end="", flush=True, file=sys.stderr)
    start = time.monotonic()
    load = os.getloadavg()[0]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        print(" timed out", file=sys.stderr)
        return {"status": "skipped", "reason": f"killed after {timeout_s:.0f} s (time cap)"}
    wall = time.monotonic() - start
    result = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except json.JSONDecodeError:
                pass
    if result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        result = {"status": "error",
                  "reason": f"exit {proc.returncode}, no result: " + " | ".join(tail)}
    elif proc.returncode != 0 and result.get("status") == "ok":
        result = dict(result, status="error", reason=f"exit {proc.returncode}")
    result["wall_s"] = round(wall, 2)
    result["loadavg_at_start"] = load
    if idle is not None:
        result["cpu_idle_before"] = round(idle, 3)
    result["command"] = " ".join(shlex.quote(str(c)) for c in cmd)
    print(f" {result['status']} ({wall:.1f} s)", file=sys.stderr)
    return result


def machine_info():
    model = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(), "kernel": platform.release()}


def fmt_rate(r):
    if r is None:
        return "-"
    if r.get("status") != "ok":
        return r.get("status", "?")
    return f"{r['tokens_per_s']:,.0f}"


def fmt_mib(r):
    if r is None or r.get("status") != "ok":
        return "-"
    return f"{r['peak_rss_increase_bytes'] / MIB:,.1f}"


def print_table(headers, rows):
    widths = [max(len(str(h)), *(len(str(row[i])) for row in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(f"{h:<{w}}" for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(f"{str(c):<{w}}" for c, w in zip(row, widths)))


def main():
    args = parse_args()
    binary = find_binary(args.build_dir)
    timeout_s = 3 * args.time_cap_s + 60
    load_start = os.getloadavg()
    only = set(args.only or [])

    def wanted(*cases):
        return not only or bool(only.intersection(cases))

    results = {}  # (impl, case, L or context) -> result

    def ours(case, length, step=False):
        key = ("attnserve", case, length)
        if key not in results:
            cmd = [str(binary), "--case", case, "--threads", str(args.threads)]
            if step:
                cmd += ["--context", str(length), "--steps", str(args.steps)]
            else:
                cmd += ["--seq-len", str(length), "--repeats", str(args.repeats),
                        "--time-cap-s", str(int(args.time_cap_s))]
            results[key] = run_json(cmd, timeout_s, args.threads, f"attnserve {case} {length}",
                                    args.wait_idle_s, args.omp_wait_policy, args.malloc_reuse)
        return results[key]

    def baseline(case, length):
        key = ("baseline", case, length)
        if key not in results:
            cmd = [args.python, str(BASELINE_SCRIPT), "--case", case, "--seq-len", str(length),
                   "--threads", str(args.threads), "--repeats", str(args.baseline_repeats),
                   "--mem-cap-gib", str(args.mem_cap_gib), "--time-cap-s", str(args.time_cap_s)]
            results[key] = run_json(cmd, timeout_s, args.threads, f"baseline {case} {length}",
                                    args.wait_idle_s, args.omp_wait_policy, args.malloc_reuse)
        return results[key]

    print(f"kernel bench: {binary}, {args.threads} threads, "
          f"OMP_WAIT_POLICY={args.omp_wait_policy or '(inherited)'}, "
          f"malloc {'reuse' if args.malloc_reuse else 'default'}, "
          f"load average {load_start[0]:.2f} at start", file=sys.stderr)

    # --- prefill ---------------------------------------------------------------------
    prefill_rows, targets = [], []
    for our_case, base_case, lengths in PREFILL_PAIRS:
        if not wanted(our_case, base_case):
            continue
        for L in args.lengths or lengths:
            o = ours(our_case, L)
            b = None if args.no_baselines else baseline(base_case, L)
            speedup = best_speedup = None
            if o.get("status") == "ok" and b is not None and b.get("status") == "ok":
                speedup = o["tokens_per_s"] / b["tokens_per_s"]
                # Best run against best run: interference from other jobs only slows a run
                # down, so on a shared machine the minima are the steadier estimate.
                if o.get("min_seconds") and b.get("min_seconds"):
                    best_speedup = b["min_seconds"] / o["min_seconds"]
            verdict = ""
            if not args.quick:
                goal = SPEEDUP_TARGETS.get((our_case, base_case, L))
                if goal is not None and b is not None:
                    ok = speedup is not None and speedup >= goal
                    verdict = f"{'PASS' if ok else 'MISS'} (>= {goal:g}x)"
                    targets.append({"target": f"{our_case} L={L} >= {goal:g}x {base_case}",
                                    "pass": ok, "value": speedup, "goal": goal})
                lxl = RUNS_WHERE_LXL_CANNOT.get((our_case, base_case, L))
                if lxl is not None and b is not None:
                    need = (b.get("estimated_peak_bytes") or 0) if b.get("status") != "ok" \
                        else b["peak_rss_increase_bytes"]
                    ok = o.get("status") == "ok" and need >= lxl
                    verdict = (f"{'PASS' if ok else 'MISS'} (ours runs; L×L needs "
                               f"{need / GIB:.1f} GiB)")
                    targets.append({"target": f"{our_case} runs at L={L} where L×L needs "
                                              f">= {lxl / GIB:g} GiB",
                                    "pass": ok, "value": need, "goal": lxl})
            prefill_rows.append({"case": our_case, "baseline": base_case, "L": L,
                                 "attnserve": o, "baseline_result": b, "speedup": speedup,
                                 "best_speedup": best_speedup,
                                 "target": verdict})

    # --- steps -----------------------------------------------------------------------
    step_rows = []
    short, long_ = args.contexts
    for case in STEP_CASES:
        if not wanted(case):
            continue
        a, z = ours(case, short, step=True), ours(case, long_, step=True)
        ratio = None
        if a.get("status") == "ok" and z.get("status") == "ok":
            ratio = z["seconds"] / a["seconds"]
        verdict = ""
        goal = STEP_RATIO_TARGETS.get(case)
        if goal is not None and not args.quick:
            ok = ratio is not None and ratio <= goal
            verdict = f"{'PASS' if ok else 'MISS'} (<= {goal:g}x)"
            targets.append({"target": f"{case} at {long_} context within {goal:g}x of {short}",
                            "pass": ok, "value": ratio, "goal": goal})
        step_rows.append({"case": case, "short": a, "long": z, "ratio": ratio,
                          "target": verdict})

    load_end = os.getloadavg()

    # --- report ----------------------------------------------------------------------
    print()
    print(f"Prefill: whole mixer incl. projections on both sides (*_core rows: the kernel "
          f"alone, attention or scan, on precomputed inputs); batch 1, float32, "
          f"{args.threads} threads "
          f"(OMP_WAIT_POLICY={args.omp_wait_policy or 'inherited'}, "
          f"malloc {'reuse' if args.malloc_reuse else 'default'}); "
          f"tok/s = L / median time; speedup = ratio of medians, (best) = of fastest runs; "
          f"MiB = peak RSS increase during the runs")
    print_table(
        ["case", "L", "attnserve tok/s", "baseline", "baseline tok/s", "speedup", "(best)",
         "attnserve MiB", "baseline MiB", "target"],
        [[r["case"], r["L"], fmt_rate(r["attnserve"]), r["baseline"],
          fmt_rate(r["baseline_result"]),
          f"{r['speedup']:.1f}x" if r["speedup"] is not None else "-",
          f"{r['best_speedup']:.1f}x" if r["best_speedup"] is not None else "-",
          fmt_mib(r["attnserve"]), fmt_mib(r["baseline_result"]), r["target"]]
         for r in prefill_rows])
    for r in prefill_rows:
        for side in ("attnserve", "baseline_result"):
            res = r[side]
            if res is not None and res.get("status") != "ok":
                print(f"  {r['case'] if side == 'attnserve' else r['baseline']} L={r['L']}: "
                      f"{res.get('status')}: {res.get('reason')}")

    if step_rows:
        print()
        print(f"Decode step: median of {args.steps} Step calls after a prefilled context "
              f"(batch 1)")

        def us(res):
            return f"{res['seconds'] * 1e6:,.1f}" if res.get("status") == "ok" else \
                res.get("status", "?")

        def state_mib(res):
            return f"{res['state_bytes'] / MIB:,.2f}" if res.get("status") == "ok" else "-"

        print_table(
            ["case", f"µs/step @{short}", f"µs/step @{long_}", f"{long_}/{short}",
             f"state MiB @{short}", f"state MiB @{long_}", "target"],
            [[r["case"], us(r["short"]), us(r["long"]),
              f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-",
              state_mib(r["short"]), state_mib(r["long"]), r["target"]] for r in step_rows])
        for r in step_rows:
            for res in (r["short"], r["long"]):
                if res.get("status") != "ok":
                    print(f"  {r['case']}: {res.get('status')}: {res.get('reason')}")

    print()
    print(f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end "
          f"({os.cpu_count()} CPUs)")
    errors = [res for res in results.values() if res.get("status") == "error"]
    if targets:
        passed = sum(t["pass"] for t in targets)
        print(f"targets: {passed}/{len(targets)} PASS")
    if errors:
        print(f"{len(errors)} case(s) failed", file=sys.stderr)

    if args.json:
        doc = {
            "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
            "machine": machine_info(),
            "threads": args.threads,
            "omp_wait_policy": args.omp_wait_policy,
            "malloc_reuse": args.malloc_reuse,
            "loadavg_start": load_start,
            "loadavg_end": load_end,
            "results": [dict(v, impl=k[0], case=k[1], key_length=k[2])
                        for k, v in results.items()],
            "prefill": [{k: v for k, v in r.items()
                         if k not in ("attnserve", "baseline_result")} for r in prefill_rows],
            "steps": [{"case": r["case"], "ratio": r["ratio"], "target": r["target"]}
                      for r in step_rows],
            "targets": targets,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
