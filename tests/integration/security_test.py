#!/usr/bin/python3
"""Transport security, authentication and session isolation: attnserve-server processes with
TLS, mutual TLS and a tokens file, certificates made by `openssl` here, driven by Debian's
python3-grpcio.

- TLS: a plaintext client is refused; a client trusting another CA is refused; rotating the
  server certificate's files is picked up by new connections without a restart.
- mutual TLS: a client without a certificate, or with one from another CA, is refused; one from
  the CA works, its subject is its principal.
- tokens: none, wrong, or revoked (the file edited) gives UNAUTHENTICATED; the right one works.
- isolation: principal B cannot see, list, read, append to, close or export principal A's
  session, and gets the same answer as for an id that never existed; an admin can.
- the plaintext health port answers without credentials; the CLI connects with TLS and a
  token from $ATTNSERVE_TOKEN.

Usage: security_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import hashlib
import os
import re
import shutil
import ssl
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402  (Server, generate_stubs)

ARGS = None


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_ca(folder, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".crt", "-days", "2", "-subj",
            "/CN=" + name, cwd=folder)


def make_cert(folder, ca, name, subject, server=False):
    """A key and a certificate signed by `ca`; a server one names localhost and 127.0.0.1."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject, cwd=folder)
    ext = os.path.join(folder, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n" if server else
                "extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", ext, cwd=folder)


def read(path):
    with open(path, "rb") as f:
        return f.read()


class SecurityTest(pct.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_security_")
        pct.generate_stubs(ARGS.source_dir, os.path.join(cls.tmp, "stubs"))
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        from attnserve_health import health_pb2, health_pb2_grpc
        cls.grpc, cls.pb, cls.pb_grpc = grpc, inference_pb2, inference_pb2_grpc
        cls.health_pb, cls.health_grpc = health_pb2, health_pb2_grpc
        cls.binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
        cls.cli = os.path.join(os.path.abspath(ARGS.build_dir), "client", "attnserve-cli")
        d = cls.certs = os.path.join(cls.tmp, "certs")
        os.makedirs(d)
        make_ca(d, "ca")
        make_ca(d, "other-ca")
        make_cert(d, "ca", "server", "/CN=localhost", server=True)
        make_cert(d, "ca", "server2", "/CN=localhost", server=True)  # the rotated one
        make_cert(d, "ca", "alice", "/O=team/CN=alice")
        make_cert(d, "ca", "bob", "/O=team/CN=bob")
        make_cert(d, "other-ca", "mallory", "/O=team/CN=alice")
        make_cert(d, "ca", "admin", "/O=team/CN=admin")  # subject "CN=admin,O=team"
        make_cert(d, "ca", "fragment", "/O=team")  # subject "O=team": a part of the admin's
        with open(os.path.join(d, "garbage.key"), "w") as f:
            f.write("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
        cls.tokens = {"alice": "alice-token-1", "bob": "bob-token-2", "root": "root-token-3"}
        cls.tokens_file = os.path.join(cls.tmp, "tokens")
        cls.write_tokens(cls.tokens)

    @classmethod
    def write_tokens(cls, tokens):
        lines = ["# principal: sha256 of the token"]
        lines += ["%s: %s" % (p, hashlib.sha256(t.encode()).hexdigest()) for p, t in tokens.items()]
        with open(cls.tokens_file + ".new", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(cls.tokens_file + ".new", cls.tokens_file)  # as a Secret's update: atomic

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----

    def start(self, *flags):
        server = pct.Server(self.binary, *flags)
        self.servers.append(server)
        health = re.search(r"health \(plaintext.*\) on [^:]+:(\d+)", server.output())
        server.health_port = int(health.group(1)) if health else None
        return server

    def start_with_live_tls_files(self, folder):
        """A server on copies of its TLS files (tls.crt, tls.key in tmp/`folder`) that the test
        rotates, re-read every second, with tokens; returns the folder and the server."""
        live = os.path.join(self.tmp, folder)
        os.makedirs(live, exist_ok=True)
        for ext in ("crt", "key"):
            shutil.copy(os.path.join(self.certs, "server." + ext), os.path.join(live, "tls." + ext))
        server = self.start("--tls_cert=" + os.path.join(live, "tls.crt"),
                            "--tls_key=" + os.path.join(live, "tls.key"),
                            "--tls_reload_interval_s=1", "--auth_tokens_file=" + self.tokens_file)
        return live, server

    def channel(self, server, ca="ca", cert=None, token=None, plaintext=False):
        grpc = self.grpc
        target = "localhost:%d" % server.port
        if plaintext:
            channel = grpc.insecure_channel(target)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=read(os.path.join(self.certs, ca + ".crt")),
                private_key=read(os.path.join(self.certs, cert + ".key")) if cert else None,
                certificate_chain=read(os.path.join(self.certs, cert + ".crt")) if cert else None)
            if token:
                creds = grpc.composite_channel_credentials(
                    creds, grpc.access_token_call_credentials(token))
            channel = grpc.secure_channel(target, creds)
        self.channels.append(channel)
        return self.pb_grpc.AttnServeStub(channel)

    def code(self, call):
        try:
            call()
        except self.grpc.RpcError as error:
            return error.code(), error.details()
        return self.grpc.StatusCode.OK, ""

    def list_models(self, stub):
        return self.code(lambda: stub.ListModels(self.pb.ListModelsRequest(), timeout=10))

    def open_session(self, stub):
        pb = self.pb
        responses = list(stub.Stream(iter([
            pb.StreamRequest(open=pb.StreamOpen(model="mamba")),
            pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=[1, 2, 3]))]),
            timeout=30))
        return responses[0].opened.session_id

    def tls_flags(self, mutual=False, tokens=True):
        d = self.certs
        flags = ["--tls_cert=" + os.path.join(d, "server.crt"),
                 "--tls_key=" + os.path.join(d, "server.key"), "--tls_reload_interval_s=1",
                 "--health_port=0", "--health_host=127.0.0.1", "--reflection=false",
                 "--admin_principals=root"]
        if mutual:
            flags.append("--tls_client_ca=" + os.path.join(d, "ca.crt"))
        if tokens:
            flags.append("--auth_tokens_file=" + self.tokens_file)
        return flags

    def server_serial(self, server):
        """The serial number of the certificate a new TLS connection to `server` gets."""
        context = ssl.create_default_context(cafile=os.path.join(self.certs, "ca.crt"))
        context.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                return tls.getpeercert()["serialNumber"]

    # ---- tests ----

    def test_tls_refuses_plaintext_and_strangers_and_reloads_its_certificate(self):
        grpc = self.grpc
        d = self.certs
        live, server = self.start_with_live_tls_files("live")
        self.assertIn("transport TLS", server.output())
        token = self.tokens["alice"]
        self.assertEqual(self.list_models(self.channel(server, token=token))[0], grpc.StatusCode.OK)
        self.assertEqual(self.list_models(self.channel(server, plaintext=True))[0],
                         grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.list_models(self.channel(server, ca="other-ca", token=token))[0],
                         grpc.StatusCode.UNAVAILABLE)
        # Rotation: new files, swapped in place; new connections get the new certificate.
        kept = self.channel(server, token=token)
        self.assertEqual(self.list_models(kept)[0], grpc.StatusCode.OK)
        before = self.server_serial(server)
        for ext in ("crt", "key"):
            shutil.copy(os.path.join(d, "server2." + ext), os.path.join(live, "tls." + ext + ".new"))
        os.replace(os.path.join(live, "tls.key.new"), os.path.join(live, "tls.key"))
        os.replace(os.path.join(live, "tls.crt.new"), os.path.join(live, "tls.crt"))
        deadline = time.monotonic() + 15
        after = before
        while after == before and time.monotonic() < deadline:
            time.sleep(0.5)
            after = self.server_serial(server)
        self.assertNotEqual(after, before, "the rotated certificate was not picked up")
        self.assertEqual(self.list_models(self.channel(server, token=token))[0], grpc.StatusCode.OK)
        self.assertEqual(self.list_models(kept)[0], grpc.StatusCode.OK)
        self.assertEqual(server.proc.poll(), None)

    def test_mutual_tls_requires_a_certificate_from_its_ca(self):
        grpc = self.grpc
        server = self.start(*self.tls_flags(mutual=True, tokens=False))
        self.assertIn("transport mutual TLS", server.output())
        self.assertNotEqual(self.list_models(self.channel(server))[0], grpc.StatusCode.OK)
        self.assertNotEqual(self.list_models(self.channel(server, cert="mallory"))[0],
                            grpc.StatusCode.OK)
        alice, bob = self.channel(server, cert="alice"), self.channel(server, cert="bob")
        self.assertEqual(self.list_models(alice)[0], grpc.StatusCode.OK)
        # The certificate's subject is the principal: bob does not see alice's session.
        sid = self.open_session(alice)
        get = lambda stub: self.code(lambda: stub.GetSession(
            self.pb.GetSessionRequest(session_id=sid), timeout=10))
        self.assertEqual(get(alice)[0], grpc.StatusCode.OK)
        self.assertEqual(get(bob)[0], grpc.StatusCode.NOT_FOUND)

    def test_tokens_none_wrong_revoked_and_right(self):
        grpc = self.grpc
        server = self.start(*self.tls_flags())
        self.assertEqual(self.list_models(self.channel(server))[0], grpc.StatusCode.UNAUTHENTICATED)
        code, details = self.list_models(self.channel(server, token="guess"))
        self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED)
        self.assertNotIn("guess", details)
        alice = self.channel(server, token=self.tokens["alice"])
        bob = self.channel(server, token=self.tokens["bob"])
        self.assertEqual(self.list_models(alice)[0], grpc.StatusCode.OK)
        # Every RPC asks: a stream too.
        anonymous = self.channel(server)
        self.assertEqual(self.code(lambda: self.open_session(anonymous))[0],
                         grpc.StatusCode.UNAUTHENTICATED)
        # Revoked: alice's line removed from the file; a stream she opened before ends at its
        # next message.
        pb = self.pb
        outbox = pct.queue.Queue()
        outbox.put(pb.StreamRequest(open=pb.StreamOpen(model="linear")))
        open_stream = alice.Stream(pct.queued(outbox), timeout=60)
        self.assertEqual(next(open_stream).WhichOneof("kind"), "opened")
        try:
            self.write_tokens({p: t for p, t in self.tokens.items() if p != "alice"})
            deadline = time.monotonic() + 10
            while (self.list_models(alice)[0] == grpc.StatusCode.OK and
                   time.monotonic() < deadline):
                time.sleep(0.2)
            self.assertEqual(self.list_models(alice)[0], grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(self.list_models(bob)[0], grpc.StatusCode.OK)
            outbox.put(pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=[1])))
            with self.assertRaises(grpc.RpcError) as ended:
                next(open_stream)
            self.assertEqual(ended.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            outbox.put(None)
        finally:
            self.write_tokens(self.tokens)
        # Health stays open, on the plaintext health port, without credentials.
        channel = self.grpc.insecure_channel("127.0.0.1:%d" % server.health_port)
        self.channels.append(channel)
        health = self.health_grpc.HealthStub(channel)
        reply = health.Check(self.health_pb.HealthCheckRequest(service=""), timeout=10)
        self.assertEqual(reply.status, self.health_pb.HealthCheckResponse.SERVING)

    def test_sessions_are_isolated_between_principals(self):
        grpc, pb = self.grpc, self.pb
        server = self.start(*self.tls_flags())
        alice = self.channel(server, token=self.tokens["alice"])
        bob = self.channel(server, token=self.tokens["bob"])
        root = self.channel(server, token=self.tokens["root"])
        sid = self.open_session(alice)
        never = "0123456789abcdef0123456789abcdef"

        def attempts(stub, session_id):
            return {
                "get": self.code(lambda: stub.GetSession(
                    pb.GetSessionRequest(session_id=session_id), timeout=10)),
                "infer": self.code(lambda: stub.Infer(
                    pb.InferRequest(session_id=session_id, tokens=[4]), timeout=10)),
                "resume": self.code(lambda: list(stub.Stream(iter([
                    pb.StreamRequest(open=pb.StreamOpen(session_id=session_id)),
                    pb.StreamRequest(append=pb.StreamAppend(sequence_number=2, tokens=[5]))]),
                    timeout=10))),
                "export": self.code(lambda: list(stub.ExportSession(
                    pb.ExportSessionRequest(session_id=session_id), timeout=10))),
                "close": self.code(lambda: stub.CloseSession(
                    pb.CloseSessionRequest(session_id=session_id), timeout=10)),
            }

        theirs, unknown = attempts(bob, sid), attempts(bob, never)
        for rpc in theirs:
            self.assertEqual(theirs[rpc][0], grpc.StatusCode.NOT_FOUND, rpc)
            # The same answer as for an id that never existed (but for the id itself).
            self.assertEqual(theirs[rpc][1].replace(sid, "ID"), unknown[rpc][1].replace(never, "ID"),
                             rpc)
        # Alice's own snapshot, imported by bob: NOT_FOUND as well (not ALREADY_EXISTS, which
        # would say that the session is here).
        snapshot = b"".join(c.data for c in alice.ExportSession(
            pb.ExportSessionRequest(session_id=sid), timeout=10))
        code, _ = self.code(lambda: bob.ImportSession(iter([pb.SessionSnapshotChunk(
            data=snapshot, total_bytes=len(snapshot))]), timeout=10))
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)
        listed = bob.ListSessions(pb.ListSessionsRequest(), timeout=10)
        self.assertEqual((len(listed.sessions), listed.total), (0, 0))
        mine = alice.ListSessions(pb.ListSessionsRequest(), timeout=10)
        self.assertEqual([s.session_id for s in mine.sessions], [sid])
        # Alice's session is untouched by all that, and the admin sees and closes it.
        self.assertEqual(alice.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10).position, 3)
        everything = root.ListSessions(pb.ListSessionsRequest(), timeout=10)
        self.assertEqual([s.session_id for s in everything.sessions], [sid])
        root.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=10)
        self.assertEqual(self.code(lambda: alice.GetSession(
            pb.GetSessionRequest(session_id=sid), timeout=10))[0], grpc.StatusCode.NOT_FOUND)

    def test_an_admin_subject_is_whole_and_its_fragments_are_not_admins(self):
        # Issue #27: --admin_principals was split at commas, so "CN=admin,O=team" was never an
        # admin and a certificate whose subject is "O=team" listed and closed every session.
        pb = self.pb
        flags = [f for f in self.tls_flags(mutual=True, tokens=False)
                 if not f.startswith("--admin_principals")]
        server = self.start(*flags, "--admin_principals=CN=admin,O=team;root")
        self.assertIn('admin principals: "CN=admin,O=team", "root"', server.output())
        alice = self.channel(server, cert="alice")
        fragment = self.channel(server, cert="fragment")
        admin = self.channel(server, cert="admin")
        sid = self.open_session(alice)
        self.assertEqual(len(fragment.ListSessions(pb.ListSessionsRequest(), timeout=10).sessions), 0)
        self.assertEqual(self.code(lambda: fragment.CloseSession(
            pb.CloseSessionRequest(session_id=sid), timeout=10))[0], self.grpc.StatusCode.NOT_FOUND)
        listed = admin.ListSessions(pb.ListSessionsRequest(), timeout=10)
        self.assertEqual([s.session_id for s in listed.sessions], [sid])
        admin.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=10)

    def test_a_bad_or_mismatched_key_stops_the_start_and_a_bad_reload_keeps_the_last_pair(self):
        # Issue #27: a garbage or mismatched --tls_key was taken, every handshake then failed,
        # and the health port said SERVING.
        d = self.certs
        for key, why in (("garbage", "not an unencrypted PEM private key"),
                         ("alice", "is not the key of the first certificate")):
            path = os.path.join(d, key + ".key")
            run = subprocess.run([self.binary, "--port=0", "--metrics_port=-1", "--http_port=-1",
                                  "--tls_cert=" + os.path.join(d, "server.crt"),
                                  "--tls_key=" + path], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(run.returncode, 0, run.stdout)
            self.assertIn("--tls_key=" + path, run.stderr)
            self.assertIn(why, run.stderr)
            self.assertNotIn("listening on", run.stdout)
        live, server = self.start_with_live_tls_files("reload")
        token = self.tokens["alice"]
        serial = self.server_serial(server)
        # A mismatched key (the rotated certificate's) next to the old certificate, then garbage.
        for bad in ("server2.key", "garbage.key"):
            shutil.copy(os.path.join(d, bad), os.path.join(live, "tls.key.new"))
            os.replace(os.path.join(live, "tls.key.new"), os.path.join(live, "tls.key"))
            time.sleep(3.5)  # three reload intervals
            self.assertEqual(self.list_models(self.channel(server, token=token))[0],
                             self.grpc.StatusCode.OK, bad)
            self.assertEqual(self.server_serial(server), serial)
        self.assertIn("keeping the last good TLS files", server.output())
        # The good pair is taken again when it comes.
        shutil.copy(os.path.join(d, "server2.crt"), os.path.join(live, "tls.crt.new"))
        shutil.copy(os.path.join(d, "server2.key"), os.path.join(live, "tls.key.new"))
        os.replace(os.path.join(live, "tls.crt.new"), os.path.join(live, "tls.crt"))
        os.replace(os.path.join(live, "tls.key.new"), os.path.join(live, "tls.key"))
        deadline = time.monotonic() + 15
        while self.server_serial(server) == serial and time.monotonic() < deadline:
            time.sleep(0.5)
        self.assertNotEqual(self.server_serial(server), serial)
        self.assertEqual(self.list_models(self.channel(server, token=token))[0],
                         self.grpc.StatusCode.OK)

    def test_cli_connects_with_tls_and_a_token_from_the_environment(self):
        server = self.start(*self.tls_flags())
        env = dict(os.environ, ATTNSERVE_TOKEN=self.tokens["alice"])
        # An address, not a name, with the name to verify given apart (as with pod IPs and
        # --route_sessions).
        args = [self.cli, "models", "--target=127.0.0.1:%d" % server.port,
                "--tls_server_name=localhost", "--tls_ca=" + os.path.join(self.certs, "ca.crt")]
        ok = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("mamba", ok.stdout)
        self.assertNotIn(self.tokens["alice"], ok.stdout + ok.stderr)
        refused = subprocess.run(args, env=dict(os.environ, ATTNSERVE_TOKEN="wrong"),
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("UNAUTHENTICATED", refused.stderr + refused.stdout)
        plaintext_token = subprocess.run(
            [self.cli, "models", "--target=localhost:%d" % server.port], env=env,
            capture_output=True, text=True, timeout=60)
        self.assertEqual(plaintext_token.returncode, 2)
        self.assertIn("needs --tls_ca", plaintext_token.stderr)


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
