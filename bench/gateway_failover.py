#!/usr/bin/python3
"""Failover through the gateway, and what the gateway adds (docs/benchmarks.md, "Gateway").

scripts/cluster.sh starts 3 replicas (redis store, leases of --lease-ms, a checkpoint every
append) behind HAProxy. Then:

1. Failover: 50 sessions stream appends of one token (a decode step each) from 50 threads
   through the gateway, with client/python/attnserve_session.py's retry. Each round SIGKILLs one
   replica; for every session it held, the time from the SIGKILL to that session's next result
   is one sample. Rounds go on (the killed replica restarted between them, the next one killed)
   until at least 50 samples; p50, p99 and max.
2. Added latency, same run, same replica, alternating direct and gateway: a unary Infer of one
   token without a session (p50 over N calls), and the interval between streamed tokens of a
   64-token greedy generation (p50 over the tokens).

Usage: bench/gateway_failover.py [--build-dir build] [--lease-ms 2000] [--calls 300]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gateway_test as gt  # noqa: E402  (Cluster, free ports)
import python_client_test as pct  # noqa: E402  (generate_stubs)


def pct_of(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--lease-ms", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="attnserve_gwbench_")
    pct.generate_stubs(ROOT, os.path.join(tmp, "stubs"))
    import grpc
    import attnserve_session as client
    from attnserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc

    cluster = gt.Cluster(ROOT, args.build_dir, "--session_lease_ms=%d" % args.lease_ms)
    try:
        channel = grpc.insecure_channel(cluster.gateway)
        grpc.channel_ready_future(channel).result(timeout=30)

        # ---- 1. failover ----
        sessions = [client.ResumableSession(channel, pb, pb_grpc, model="mamba",
                                            retry_deadline_s=60) for _ in range(args.sessions)]
        for s, session in enumerate(sessions):
            session.append([(s * 7 + k) % 4096 for k in range(16)])
        stop = threading.Event()
        lock = threading.Lock()
        last_result = [0.0] * len(sessions)   # monotonic time of each session's latest result
        first_after = [None] * len(sessions)  # ... and of its first result after the kill
        kill_time = [None]
        errors = []

        def drive(s):
            session = sessions[s]
            token = s
            while not stop.is_set():
                try:
                    session.append([token % 4096])
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append("session %d (resumed %d times, at %.1f s): %s" % (
                        s, session.resumes, time.monotonic() - started, e))
                    return
                token += 1
                with lock:
                    last_result[s] = time.monotonic()
                    if kill_time[0] is not None and first_after[s] is None:
                        first_after[s] = last_result[s]

        threads = [threading.Thread(target=drive, args=(s,), daemon=True)
                   for s in range(len(sessions))]
        for t in threads:
            t.start()
        samples, rounds = [], 0
        started = time.monotonic()
        victim = 1
        while len(samples) < args.sessions and rounds < 6 and not errors:
            time.sleep(1.0)
            holders = [session.opened.server.instance_name for session in sessions]
            held = [s for s, h in enumerate(holders) if h == "replica-%d" % victim]
            with lock:
                first_after[:] = [None] * len(sessions)
                kill_time[0] = killed_at = time.monotonic()
            cluster.run("kill", str(victim), "KILL")
            deadline = killed_at + 60
            while time.monotonic() < deadline:
                with lock:
                    done = all(last_result[s] > killed_at for s in held)
                if done:
                    break
                time.sleep(0.01)
            with lock:
                samples += [first_after[s] - killed_at for s in held if first_after[s] is not None]
                kill_time[0] = None
                late = sum(1 for s in held if last_result[s] <= killed_at)
            print("round %d: killed replica-%d holding %d sessions; %d not back in 60 s" %
                  (rounds + 1, victim, len(held), late), file=sys.stderr, flush=True)
            if late and os.environ.get("GW_DEBUG"):
                import traceback
                frames = sys._current_frames()
                for s in held:
                    if last_result[s] <= killed_at and threads[s].ident in frames:
                        ss = sessions[s]
                        stack = [line for line in traceback.format_stack(frames[threads[s].ident])
                                 if "attnserve_session" in line]
                        port = int(ss.opened.server.advertise_address.rsplit(":", 1)[1])
                        try:
                            info = pb_grpc.AttnServeStub(grpc.insecure_channel(
                                "127.0.0.1:%d" % port)).GetSession(
                                pb.GetSessionRequest(session_id=ss.session_id), timeout=5)
                            where = "server at seq %d pos %d" % (info.last_sequence_number,
                                                                 info.position)
                        except grpc.RpcError as e:
                            where = "GetSession: %s %s" % (e.code(), e.details()[:100])
                        print("session %d on %s: client next seq %d, kept %s, resumes %d; %s\n%s"
                              % (s, ss.opened.server.instance_name, ss.next_sequence,
                                 [k for k, _ in ss.kept], ss.resumes, where, "".join(stack)),
                              file=sys.stderr)
            cluster.run("restart", str(victim))
            rounds += 1
            victim = victim % gt.REPLICAS + 1
        stop.set()
        for t in threads:
            t.join(30)
        for session in sessions:
            session.close()
        if errors:
            raise SystemExit("a session failed: %s" % errors[0])

        # ---- 2. added latency ----
        direct = grpc.insecure_channel("127.0.0.1:%d" % (cluster.port + 1))
        grpc.channel_ready_future(direct).result(timeout=30)
        stubs = {"direct": pb_grpc.AttnServeStub(direct),
                 "gateway": pb_grpc.AttnServeStub(channel)}
        unary = {"direct": [], "gateway": []}
        request = pb.InferRequest(model="mamba", tokens=[1, 2, 3, 4],
                                  output=pb.OutputSpec(kind=pb.OUTPUT_KIND_NONE))
        for name, stub in stubs.items():  # warm up
            for _ in range(20):
                stub.Infer(request, timeout=30)
        for i in range(args.calls):
            for name in (("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")):
                start = time.perf_counter()
                stubs[name].Infer(request, timeout=30)
                unary[name].append(time.perf_counter() - start)
        per_token = {"direct": [], "gateway": []}
        first_token = {"direct": [], "gateway": []}
        whole = {"direct": [], "gateway": []}
        spec = pb.GenerateSpec(max_new_tokens=64, temperature=0)
        for i in range(10):
            for name in (("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")):
                opening = pb.StreamRequest(open=pb.StreamOpen(model="mamba"))
                append = pb.StreamRequest(append=pb.StreamAppend(
                    sequence_number=1, tokens=[5, 6, 7], generate=spec,
                    output=pb.OutputSpec(kind=pb.OUTPUT_KIND_TOP_K, top_k=1)))
                times = []
                start = time.perf_counter()
                for response in stubs[name].Stream(iter([opening, append]), timeout=60):
                    if response.WhichOneof("kind") == "generated":
                        times.append(time.perf_counter())
                per_token[name] += [b - a for a, b in zip(times, times[1:])]
                first_token[name].append(times[0] - start)
                whole[name].append(times[-1] - start)
        direct.close()
        channel.close()
    finally:
        cluster.stop()

    print("# gateway_failover: %d replicas behind HAProxy %s, leases of %d ms, CPU %s, %d cores"
          % (gt.REPLICAS, subprocess.run(["/usr/sbin/haproxy", "-v"], capture_output=True,
                                         text=True).stdout.split()[2], args.lease_ms,
             cpu_model(), os.cpu_count()))
    print()
    print("| failover: SIGKILL of the owner to the session's next result | value |")
    print("|---|---|")
    print("| rounds (a replica killed in each) | %d |" % rounds)
    print("| samples (sessions the killed replica held) | %d |" % len(samples))
    if samples:
        print("| p50 | %.3f s |" % pct_of(samples, 50))
        print("| p99 | %.3f s |" % pct_of(samples, 99))
        print("| max | %.3f s |" % max(samples))
    print()
    print("| added by the gateway | direct | through HAProxy | added |")
    print("|---|---|---|---|")
    for label, data in (("unary Infer, 4 tokens, p50", unary),
                        ("stream: open to first of 64 generated tokens, p50", first_token),
                        ("stream: open to the 64th token, p50", whole),
                        ("streamed token interval, p50", per_token)):
        d, g = statistics.median(data["direct"]) * 1e3, statistics.median(data["gateway"]) * 1e3
        print("| %s | %.3f ms | %.3f ms | %+.3f ms |" % (label, d, g, g - d))


if __name__ == "__main__":
    main()
