#!/usr/bin/python3
"""attnserve-cli and attnserve-load against the built attnserve-server on loopback.

Starts attnserve-server on a free 127.0.0.1 port, runs every attnserve-cli subcommand with
--json (and a few in text mode), then attnserve-load for a few seconds in each mode and loop
kind, provoking errors (an unknown model, a length above linformer's maximum, streaming a
variant that cannot stream), and checks: counts add up (sent = succeeded + failed, errors by
gRPC code sum to failed), the JSON report validates against client/load/report.schema.json,
and the HTML report has one plot line per variant. Every subprocess has a timeout; the server
is stopped at the end.

RoutedSessionsTest starts two more servers with --instance_name and --advertise_address and
drives both tools with --route_sessions over "127.0.0.1:p1,127.0.0.1:p2": sessions resume,
show and close on the instance that holds them, whichever process opened them.

Usage: client_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

ARGS = None
SERVER = None
# A sequence above a model's max_sequence_length is refused as a limit (inference.proto:
# RESOURCE_EXHAUSTED for limits).
TOO_LONG_CODE = "RESOURCE_EXHAUSTED"


class Server:
    """attnserve-server on 127.0.0.1, gRPC and metrics on ports of its choosing."""

    def __init__(self, binary, port=0, extra=()):
        self.lines = []
        self.port = None
        self.metrics_url = None
        self.proc = subprocess.Popen(
            [binary, "--host=127.0.0.1", "--port=%d" % port, "--metrics_port=0", "--http_port=-1",
             "--intra_op_threads=1", "--max_new_tokens=64", "--drain_deadline_s=3"] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        listening = threading.Event()

        def pump():
            for line in self.proc.stdout:
                line = line.rstrip()
                self.lines.append(line)
                m = re.search(r"metrics on (\S+?)(/metrics)?$", line)
                if m and self.metrics_url is None:
                    self.metrics_url = "http://%s/metrics" % m.group(1)
                m = re.search(r"listening on (\S+):(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(2))
                    listening.set()
            listening.set()  # the process ended

        threading.Thread(target=pump, daemon=True).start()
        if not listening.wait(120) or self.port is None:
            self.stop()
            raise RuntimeError("attnserve-server did not start:\n" + "\n".join(self.lines))
        self.target = "127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def binary(*parts):
    return os.path.join(ARGS.build_dir, *parts)


def cli(*args, stdin=None, timeout=60):
    """Runs attnserve-cli against the server; returns the CompletedProcess."""
    return subprocess.run([binary("client", "attnserve-cli")] + list(args[:1]) +
                          ["--target=" + SERVER.target] + list(args[1:]),
                          input=stdin, capture_output=True, text=True, timeout=timeout)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load(*args, timeout=120):
    return subprocess.run([binary("client", "attnserve-load"), "--target=" + SERVER.target] +
                          list(args), capture_output=True, text=True, timeout=timeout)


# A JSON Schema subset, enough for report.schema.json: $ref to #/$defs, type, const, enum,
# required, properties, additionalProperties, items, minimum.
def validate(value, schema, root, path="$"):
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/$defs/"), ref
        validate(value, root["$defs"][ref[len("#/$defs/"):]], root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
        }
        if not any(checks[t](value) for t in types):
            raise AssertionError("%s: %r is not of type %s" % (path, value, types))
        if value is None:
            return
    if "const" in schema and value != schema["const"]:
        raise AssertionError("%s: %r != %r" % (path, value, schema["const"]))
    if "enum" in schema and value not in schema["enum"]:
        raise AssertionError("%s: %r not in %r" % (path, value, schema["enum"]))
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        raise AssertionError("%s: %r < %r" % (path, value, schema["minimum"]))
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                raise AssertionError("%s: missing %s" % (path, key))
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                validate(v, props[key], root, path + "." + key)
            else:
                extra = schema.get("additionalProperties", True)
                if extra is False:
                    raise AssertionError("%s: unexpected field %s" % (path, key))
                if isinstance(extra, dict):
                    validate(v, extra, root, path + "." + key)
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            validate(v, schema["items"], root, "%s[%d]" % (path, i))


class ClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        global SERVER
        for name in (("server", "attnserve-server"), ("client", "attnserve-cli"),
                     ("client", "attnserve-load")):
            if not os.access(binary(*name), os.X_OK):
                raise unittest.SkipTest("not built: " + binary(*name))
        SERVER = Server(binary("server", "attnserve-server"))
        deadline = time.time() + 60
        while cli("health", "--timeout=2").returncode != 0:
            if time.time() > deadline:
                raise RuntimeError("attnserve-server never became healthy")
            time.sleep(0.2)
        models = json_lines(cli("models", "--json").stdout)[0]["models"]
        cls.models = {m["name"]: m for m in models}
        with open(os.path.join(ARGS.source_dir, "client", "load", "report.schema.json")) as f:
            cls.schema = json.load(f)

    @classmethod
    def tearDownClass(cls):
        if SERVER is not None:
            SERVER.stop()

    def check_report(self, path):
        """Validates a JSON report and its counts; returns it."""
        with open(path) as f:
            report = json.load(f)
        validate(report, self.schema, self.schema)
        for r in report["results"]:
            self.assertEqual(r["sent"], r["succeeded"] + r["failed"], r)
            self.assertEqual(sum(r["errors"].values()), r["failed"], r)
            if r["succeeded"]:
                lat = r["latency_s"]
                self.assertLessEqual(lat["min"], lat["p50"])
                self.assertLessEqual(lat["p50"], lat["p90"])
                self.assertLessEqual(lat["p90"], lat["p99"])
                self.assertLessEqual(lat["p99"], lat["max"])
        return report

    def result(self, report, mode, variant, **kw):
        rows = [r for r in report["results"] if r["mode"] == mode and r["variant"] == variant
                and all(r[k] == v for k, v in kw.items())]
        self.assertTrue(rows, (mode, variant, kw))
        return rows

    # --- attnserve-cli ---

    def test_cli_health(self):
        p = cli("health", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json_lines(p.stdout), [{"status": "SERVING"}])
        self.assertEqual(cli("health").stdout.strip(), "SERVING")

    def test_cli_models(self):
        for name in ("standard", "linformer", "linear", "mamba"):
            self.assertIn(name, self.models)
        self.assertFalse(self.models["linformer"]["can_stream"])
        p = cli("models", "--json", "--name=mamba")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json_lines(p.stdout)[0]["name"], "mamba")
        p = cli("models", "--json", "--name=no-such-model")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(json_lines(p.stdout)[0]["error"]["code"], "NOT_FOUND")
        self.assertIn("NOT_FOUND", p.stderr)
        self.assertIn("standard", cli("models").stdout)

    def test_cli_infer(self):
        p = cli("infer", "--json", "--model=standard", "--tokens=1,2,3", "--output=top_k",
                "--top_k=3")
        self.assertEqual(p.returncode, 0, p.stderr)
        [resp] = json_lines(p.stdout)
        self.assertEqual(resp["model"], "standard")
        self.assertEqual(len(resp["outputs"]["top_k"]), 3)
        # Tokens from stdin, text output.
        p = cli("infer", "--model=mamba", "--output=last_logits", stdin="5 6 7\n8\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("model: mamba", p.stdout)
        self.assertIn("tokens: 4", p.stdout)
        # Above linformer's maximum: refused, the code printed by name, exit 1.
        too_long = int(self.models["linformer"]["max_sequence_length"]) + 1
        p = cli("infer", "--json", "--model=linformer", "--random_tokens=%d" % too_long)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(json_lines(p.stdout)[0]["error"]["code"], TOO_LONG_CODE)
        self.assertIn(TOO_LONG_CODE + ": ", p.stderr)
        p = cli("infer", "--tokens=1,x")
        self.assertEqual(p.returncode, 2)

    def test_cli_stream(self):
        tokens = " ".join(str(i % 50) for i in range(200))
        p = cli("stream", "--json", "--model=mamba", "--chunk=64", "--output=none",
                stdin=tokens)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = json_lines(p.stdout)
        self.assertIn("opened", lines[0])
        results = [l["result"] for l in lines if "result" in l]
        self.assertEqual([int(r["sequence_number"]) for r in results], [1, 2, 3, 4])
        self.assertEqual([int(r["position"]) for r in results], [64, 128, 192, 200])
        self.assertIn("closed", lines[-1])
        p = cli("stream", "--model=linformer", "--tokens=1,2,3")
        self.assertEqual(p.returncode, 1)
        self.assertIn("FAILED_PRECONDITION", p.stderr)

    def test_cli_generate(self):
        p = cli("generate", "--json", "--model=mamba", "--tokens=1,2,3", "--max_new_tokens=5")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = json_lines(p.stdout)
        self.assertEqual(len([l for l in lines if "generated" in l]), 5)
        p = cli("generate", "--model=linear", "--tokens=1,2,3", "--max_new_tokens=4")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.split()), 4)
        self.assertTrue(all(t.isdigit() for t in p.stdout.split()), p.stdout)
        # In groups of 3: the same ids on stdout; two GeneratedTokens messages in --json.
        p = cli("generate", "--model=linear", "--tokens=1,2,3", "--max_new_tokens=4",
                "--stream_interval=3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.split()), 4)
        p = cli("generate", "--json", "--model=linear", "--tokens=1,2,3", "--max_new_tokens=4",
                "--stream_interval=3")
        self.assertEqual(p.returncode, 0, p.stderr)
        groups = [l for l in json_lines(p.stdout) if "generated_tokens" in l]
        self.assertEqual([len(g["generated_tokens"]["tokens"]) for g in groups], [3, 1])

    def test_cli_sessions(self):
        p = cli("stream", "--json", "--model=linear", "--keep_session", "--tokens=1,2,3,4,5",
                "--chunk=2")
        self.assertEqual(p.returncode, 0, p.stderr)
        sid = json_lines(p.stdout)[0]["opened"]["session_id"]
        listed = json_lines(cli("sessions", "--json").stdout)[0]
        self.assertIn(sid, [s["session_id"] for s in listed["sessions"]])
        p = cli("sessions", "--json", "--id=" + sid)
        self.assertEqual(p.returncode, 0, p.stderr)
        info = json_lines(p.stdout)[0]
        self.assertEqual(int(info["position"]), 5)
        self.assertEqual(int(info["last_sequence_number"]), 3)
        self.assertEqual(cli("sessions", "--json", "--close=" + sid).returncode, 0)
        p = cli("sessions", "--json", "--id=" + sid)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(json_lines(p.stdout)[0]["error"]["code"], "NOT_FOUND")

    def test_cli_a_resumed_session_stays_open_unless_asked_to_close(self):
        # Issue #27: generate --session=ID closed the session it resumed.
        p = cli("stream", "--json", "--model=linear", "--keep_session", "--tokens=1,2,3")
        self.assertEqual(p.returncode, 0, p.stderr)
        sid = json_lines(p.stdout)[0]["opened"]["session_id"]
        for sub, extra in (("generate", ["--max_new_tokens=2"]), ("stream", [])):
            p = cli(sub, "--session=" + sid, "--tokens=4", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            p = cli("sessions", "--json", "--id=" + sid)
            self.assertEqual(p.returncode, 0, "%s --session closed the session: %s" % (sub, p.stdout))
        p = cli("generate", "--session=" + sid, "--tokens=5", "--max_new_tokens=1",
                "--close_session")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = cli("sessions", "--json", "--id=" + sid)
        self.assertEqual(json_lines(p.stdout)[0]["error"]["code"], "NOT_FOUND")
        # A fork of a kept session: a new session, at the source's position.
        p = cli("stream", "--json", "--model=linear", "--keep_session", "--tokens=1,2,3")
        source = json_lines(p.stdout)[0]["opened"]["session_id"]
        p = cli("stream", "--json", "--fork_from=" + source, "--keep_session", "--tokens=4")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = json_lines(p.stdout)
        fork = lines[0]["opened"]["session_id"]
        self.assertNotEqual(fork, source)
        self.assertEqual(int(lines[0]["opened"]["position"]), 3)
        self.assertEqual([int(l["result"]["position"]) for l in lines if "result" in l], [4])
        info = json_lines(cli("sessions", "--json", "--id=" + source).stdout)[0]
        self.assertEqual(int(info["position"]), 3, "the source is untouched")
        p = cli("stream", "--fork_from=" + source, "--session=" + source, "--tokens=4")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("go apart", p.stderr + p.stdout)
        self.assertEqual(cli("sessions", "--close=" + fork).returncode, 0)
        self.assertEqual(cli("sessions", "--close=" + source).returncode, 0)
        # A new session is still closed at the end without --keep_session.
        p = cli("stream", "--json", "--model=linear", "--tokens=1,2")
        sid = json_lines(p.stdout)[0]["opened"]["session_id"]
        p = cli("sessions", "--json", "--id=" + sid)
        self.assertEqual(json_lines(p.stdout)[0]["error"]["code"], "NOT_FOUND")

    def test_cli_sessions_export_import(self):
        p = cli("stream", "--json", "--model=mamba", "--keep_session", "--tokens=1,2,3,4,5,6,7",
                "--chunk=3", "--output=none")
        self.assertEqual(p.returncode, 0, p.stderr)
        sid = json_lines(p.stdout)[0]["opened"]["session_id"]
        other = Server(binary("server", "attnserve-server"))  # B; SERVER is A
        self.addCleanup(other.stop)

        def on_b(*args):
            return subprocess.run([binary("client", "attnserve-cli"), args[0],
                                   "--target=" + other.target] + list(args[1:]),
                                  capture_output=True, text=True, timeout=60)

        with tempfile.TemporaryDirectory() as tmp:
            snapshot = os.path.join(tmp, "session.snap")
            p = cli("sessions", "--id=" + sid, "--export=" + snapshot)
            self.assertEqual(p.returncode, 0, p.stderr)
            size = os.path.getsize(snapshot)
            self.assertEqual(p.stdout.strip(),
                             "exported session %s (%d bytes) to %s" % (sid, size, snapshot))
            self.assertEqual(os.stat(snapshot).st_mode & 0o777, 0o600)
            self.assertFalse(os.path.exists(snapshot + ".tmp"))
            # On B: the same session, at the same position.
            p = on_b("sessions", "--json", "--import=" + snapshot)
            self.assertEqual(p.returncode, 0, p.stderr)
            imported = json_lines(p.stdout)[0]
            self.assertEqual((imported["session_id"], int(imported["position"])), (sid, 7))
            p = on_b("sessions", "--json", "--id=" + sid)
            self.assertEqual(p.returncode, 0, p.stderr)
            info = json_lines(p.stdout)[0]
            self.assertEqual((info["model"], int(info["position"]),
                              int(info["last_sequence_number"])), ("mamba", 7, 3))
            # One byte flipped in the middle: refused as corrupt.
            with open(snapshot, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0xFF
            damaged = os.path.join(tmp, "damaged.snap")
            with open(damaged, "wb") as f:
                f.write(data)
            p = on_b("sessions", "--import=" + damaged)
            self.assertEqual(p.returncode, 1)
            self.assertIn("DATA_LOSS", p.stderr)
            # A holds the session already.
            p = cli("sessions", "--json", "--import=" + snapshot)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(json_lines(p.stdout)[0]["error"]["code"], "ALREADY_EXISTS")
            self.assertIn("ALREADY_EXISTS", p.stderr)
            # Files that cannot be read or written are named; usage errors exit 2.
            missing = os.path.join(tmp, "missing.snap")
            p = cli("sessions", "--import=" + missing)
            self.assertEqual(p.returncode, 2)
            self.assertIn("cannot read " + missing, p.stderr)
            p = cli("sessions", "--id=" + sid, "--export=" + os.path.join(missing, "x"))
            self.assertEqual(p.returncode, 2)
            self.assertIn("cannot write " + os.path.join(missing, "x"), p.stderr)
            for args in (["--export=" + snapshot], ["--id=" + sid, "--export=x", "--import=y"],
                         ["--close=" + sid, "--import=" + snapshot]):
                p = cli("sessions", *args)
                self.assertEqual(p.returncode, 2, args)
        self.assertEqual(cli("sessions", "--close=" + sid).returncode, 0)

    def test_cli_usage(self):
        for sub in ("models", "infer", "stream", "generate", "sessions", "health"):
            p = subprocess.run([binary("client", "attnserve-cli"), sub, "--help"],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 0)
            self.assertIn("usage: attnserve-cli " + sub, p.stdout)
            self.assertIn("--target", p.stdout)
        p = cli("health", "--chunk=3")  # another subcommand's flag
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown flag", p.stderr)
        p = subprocess.run([binary("client", "attnserve-cli"), "frobnicate"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 2)

    # --- attnserve-load ---

    def test_load_closed_loop_report(self):
        with tempfile.TemporaryDirectory() as tmp:
            js, html = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.html")
            args = ["--variants=standard,mamba,no-such-model", "--mode=unary",
                    "--lengths=32,128", "--concurrency=1,2", "--warmup=0.2", "--duration=1",
                    "--timeout=20", "--json=" + js, "--html=" + html]
            if SERVER.metrics_url:
                args.append("--metrics_url=" + SERVER.metrics_url)
            p = load(*args)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("p50_ms", p.stdout)
            report = self.check_report(js)
            self.assertEqual(len(report["results"]), 3 * 2 * 2)
            for r in self.result(report, "unary", "no-such-model"):
                self.assertGreater(r["failed"], 0)
                self.assertEqual(list(r["errors"]), ["NOT_FOUND"])
                self.assertIsNone(r["latency_s"])
            for variant in ("standard", "mamba"):
                for r in self.result(report, "unary", variant):
                    self.assertGreater(r["succeeded"], 0, r)
                    self.assertEqual(r["served_by"], {variant: r["succeeded"]})
                    self.assertGreater(r["tokens_per_s"], 0)
                    if SERVER.metrics_url:
                        self.assertIsNotNone(r["server_cpu_s"])
                        self.assertGreaterEqual(r["server_cpu_s"], 0)
            with open(html) as f:
                page = f.read()
            self.assertNotIn("<script", page)
            figures = re.findall(r"<figure.*?</figure>", page, re.S)
            # Against length: 3 metrics x 2 load points; against concurrency: 2 x 2 lengths.
            self.assertEqual(len(figures), 10)
            for fig in figures:
                lines = re.findall(r'<polyline class="series" data-series="([^"]+)"', fig)
                self.assertEqual(sorted(lines), ["mamba", "standard"], fig[:200])
                self.assertIn("no-such-model (no data)", fig)

    def test_load_streams_errors_and_generate(self):
        too_long = int(self.models["linformer"]["max_sequence_length"]) + 1
        with tempfile.TemporaryDirectory() as tmp:
            js = os.path.join(tmp, "s.json")
            # Streams: linformer cannot (FAILED_PRECONDITION), linear can.
            p = load("--variants=linformer,linear", "--mode=stream", "--lengths=130",
                     "--chunk=64", "--requests=4", "--duration=10", "--warmup=0",
                     "--timeout=20", "--json=" + js)
            self.assertEqual(p.returncode, 0, p.stderr)
            report = self.check_report(js)
            [lf] = self.result(report, "stream", "linformer")
            self.assertEqual((lf["sent"], lf["errors"]), (4, {"FAILED_PRECONDITION": 4}))
            [ln] = self.result(report, "stream", "linear")
            self.assertEqual((ln["sent"], ln["succeeded"], ln["tokens_in"]), (4, 4, 4 * 130))
            self.assertGreater(ln["state_bytes"]["max"], 0)
            self.assertLessEqual(ln["first_result_s"]["p50"], ln["latency_s"]["p50"])
            # A length above linformer's maximum: refused with TOO_LONG_CODE.
            p = load("--variants=linformer", "--mode=unary", "--lengths=%d" % too_long,
                     "--requests=3", "--duration=10", "--warmup=0", "--timeout=20",
                     "--json=" + js)
            self.assertEqual(p.returncode, 0, p.stderr)
            [r] = self.check_report(js)["results"]
            self.assertEqual((r["sent"], r["errors"]), (3, {TOO_LONG_CODE: 3}))
            # Generation on every model that streams; linformer is skipped.
            p = load("--variants=all", "--mode=generate", "--lengths=16", "--max_new_tokens=4",
                     "--requests=2", "--duration=10", "--warmup=0", "--timeout=30",
                     "--json=" + js)
            self.assertEqual(p.returncode, 0, p.stderr)
            report = self.check_report(js)
            self.assertIn("linformer", [s["variant"] for s in report["skipped"]])
            streaming = [n for n, m in self.models.items() if m["can_stream"]]
            self.assertEqual(sorted(r["variant"] for r in report["results"]), sorted(streaming))
            for r in report["results"]:
                self.assertEqual((r["succeeded"], r["tokens_out"]), (2, 8), r)

    def test_load_open_loop(self):
        with tempfile.TemporaryDirectory() as tmp:
            js = os.path.join(tmp, "o.json")
            start = time.time()
            p = load("--variants=mamba", "--mode=unary", "--lengths=32", "--rps=20",
                     "--warmup=0.5", "--duration=1.5", "--timeout=10", "--json=" + js)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertLess(time.time() - start, 30)
            [r] = self.check_report(js)["results"]
            self.assertEqual(r["load"], {"loop": "open", "concurrency": None, "rps": 20.0})
            # 1.5 s at 20/s: 30 requests measured, whatever the server's speed.
            self.assertEqual(r["sent"], 30)
            self.assertEqual(r["sent"], r["succeeded"] + r["failed"])

    def test_load_through_both_protocols(self):
        # The same phases through AttnServe and the Open Inference Protocol, in one run.
        with tempfile.TemporaryDirectory() as tmp:
            js = os.path.join(tmp, "p.json")

            def run(*args):
                p = load("--protocol=attnserve,oip", "--variants=mamba", "--requests=3",
                         "--duration=10", "--warmup=0", "--timeout=20", "--json=" + js, *args)
                self.assertEqual(p.returncode, 0, p.stderr)
                return self.check_report(js)

            report = run("--lengths=70", "--mode=unary,stream,generate", "--chunk=32",
                         "--max_new_tokens=3")
            for mode in ("unary", "stream", "generate"):
                for name in (mode, "oip:" + mode):
                    [r] = self.result(report, name, "mamba")
                    self.assertEqual((r["sent"], r["succeeded"]), (3, 3), r)
                    self.assertEqual(r["tokens_in"], 3 * 70, r)
                    self.assertEqual(r["tokens_out"], 3 * 3 if mode == "generate" else 0, r)
                    self.assertEqual(r["served_by"], {"mamba": 3}, r)
            # Generated tokens in groups of 2 (the last one alone): every one counted.
            report = run("--lengths=20", "--mode=generate", "--max_new_tokens=5",
                         "--stream_interval=2")
            self.assertEqual(report["config"]["stream_interval"], 2)
            for name in ("generate", "oip:generate"):
                [r] = self.result(report, name, "mamba")
                self.assertEqual((r["succeeded"], r["tokens_out"]), (3, 15), r)

    def test_load_usage_errors(self):
        p = load("--duration=0", "--requests=0")
        self.assertEqual(p.returncode, 2)
        p = load("--mode=sideways")
        self.assertEqual(p.returncode, 2)
        p = load("--protocol=rest")
        self.assertEqual(p.returncode, 2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_opens(metrics_url):
    """attnserve_requests_total{rpc="StreamOpen"} summed over its other labels."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("attnserve_requests_total{") and 'rpc="StreamOpen"' in line)


class RoutedSessionsTest(unittest.TestCase):
    """Two instances; both tools route sessions over them with --route_sessions."""

    @classmethod
    def setUpClass(cls):
        for name in (("server", "attnserve-server"), ("client", "attnserve-cli"),
                     ("client", "attnserve-load")):
            if not os.access(binary(*name), os.X_OK):
                raise unittest.SkipTest("not built: " + binary(*name))
        cls.servers = {}
        try:
            for name in ("routed-a", "routed-b"):
                port = free_port()
                cls.servers[name] = Server(
                    binary("server", "attnserve-server"), port,
                    ["--instance_name=" + name, "--advertise_address=127.0.0.1:%d" % port])
        except Exception:
            cls.tearDownClass()
            raise
        cls.address = {n: s.target for n, s in cls.servers.items()}
        cls.target = ",".join(s.target for s in cls.servers.values())

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers.values():
            s.stop()

    def cli(self, *args, target=None):
        return subprocess.run([binary("client", "attnserve-cli"), args[0],
                               "--target=" + (target or self.target)] + list(args[1:]),
                              capture_output=True, text=True, timeout=60)

    def test_sessions_follow_their_instance(self):
        # New sessions from separate processes, until both instances hold one (each process
        # starts its round-robin at a random instance).
        held = {}  # session id -> instance name
        for _ in range(16):
            p = self.cli("stream", "--json", "--route_sessions", "--model=linear",
                         "--keep_session", "--tokens=1,2,3,4,5", "--chunk=2")
            self.assertEqual(p.returncode, 0, p.stderr)
            opened = json_lines(p.stdout)[0]["opened"]
            self.assertEqual(opened["server"]["advertise_address"],
                             self.address[opened["server"]["instance_name"]])
            held[opened["session_id"]] = opened["server"]["instance_name"]
            if len(set(held.values())) == 2:
                break
        self.assertEqual(set(held.values()), set(self.servers), held)

        for sid, instance in held.items():
            # Resumed by a new process: found on its instance, state intact.
            p = self.cli("stream", "--json", "--session=" + sid, "--tokens=6,7", "--chunk=2",
                         "--keep_session", "--route_sessions")
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = json_lines(p.stdout)
            self.assertEqual(lines[0]["opened"]["server"]["instance_name"], instance)
            self.assertEqual(int(lines[0]["opened"]["position"]), 5)
            self.assertEqual([int(l["result"]["position"]) for l in lines if "result" in l], [7])
            p = self.cli("infer", "--json", "--session=" + sid, "--tokens=8", "--route_sessions")
            self.assertEqual(p.returncode, 0, p.stderr)
            [resp] = json_lines(p.stdout)
            self.assertEqual((resp["server"]["instance_name"], int(resp["session_position"])),
                             (instance, 8))
            p = self.cli("sessions", "--json", "--id=" + sid, "--route_sessions")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json_lines(p.stdout)[0]["server"]["instance_name"], instance)
            # Asked of the other instance alone (no routing): NOT_FOUND naming that instance.
            [other] = [n for n in self.servers if n != instance]
            p = self.cli("sessions", "--json", "--id=" + sid, target=self.address[other])
            self.assertEqual(p.returncode, 1)
            error = json_lines(p.stdout)[0]["error"]
            self.assertEqual(error["code"], "NOT_FOUND")
            self.assertIn("instance '%s' at %s" % (other, self.address[other]), error["message"])

        # One listing of every instance's sessions, each naming its instance.
        p = self.cli("sessions", "--json", "--route_sessions")
        self.assertEqual(p.returncode, 0, p.stderr)
        listed = {s["session_id"]: s["server"]["instance_name"]
                  for s in json_lines(p.stdout)[0]["sessions"]}
        self.assertEqual({k: listed.get(k) for k in held}, held)

        for sid in held:
            p = self.cli("sessions", "--json", "--close=" + sid, "--route_sessions")
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.cli("sessions", "--json", "--id=" + sid, "--route_sessions")
            self.assertEqual(p.returncode, 1)
            error = json_lines(p.stdout)[0]["error"]
            self.assertEqual(error["code"], "NOT_FOUND")
            for address in self.address.values():
                self.assertIn(address, error["message"])

    def test_load_spreads_streams_over_instances(self):
        before = {n: stream_opens(s.metrics_url) for n, s in self.servers.items()}
        p = subprocess.run([binary("client", "attnserve-load"), "--target=" + self.target,
                            "--route_sessions", "--variants=linear", "--mode=stream",
                            "--lengths=32", "--chunk=16", "--requests=4", "--duration=10",
                            "--warmup=0", "--timeout=20"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("2 instance(s)", p.stderr)
        self.assertIn("4 ok, 0 failed", p.stderr)
        after = {n: stream_opens(s.metrics_url) for n, s in self.servers.items()}
        # One at a time, in turn: two streams on each instance.
        self.assertEqual({n: after[n] - before[n] for n in after}, {n: 2 for n in after})


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
