#!/usr/bin/python3
"""The OpenAI-compatible HTTP door's security and lifecycle, over real sockets (the rest of its
tests: http_door_test.py, whose helpers these share):

- bearer tokens (401, /health open) and the per-client limit (429 with retry-after, another
  principal still served);
- HTTPS with the gRPC port's certificate, and SIGTERM: 503 with retry-after for new requests
  while a stream in flight runs to its [DONE], then exit 0.

Usage: http_door_security_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import hashlib
import http.client
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402  (Server, run_tests)
from http_door_test import (  # noqa: E402
    start_http_server, request, stalled_socket, MAX_NEW_TOKENS, ERROR_KEYS)

ARGS = None


class HttpDoorAuthAndLimitsTest(unittest.TestCase):
    """A server with bearer tokens and --http_max_requests_per_client=2."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_http_auth_")
        tokens = os.path.join(cls.tmp, "tokens")
        with open(tokens, "w") as f:
            for principal, token in (("alice", "alice-token"), ("bob", "bob-token")):
                f.write("%s: %s\n" % (principal, hashlib.sha256(token.encode()).hexdigest()))
        binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
        cls.server = start_http_server(binary, "--auth_tokens_file=" + tokens,
                                       "--http_max_requests_per_client=2",
                                       "--max_new_tokens=%d" % MAX_NEW_TOKENS)
        cls.port = cls.server.http_port

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def bearer(self, token):
        return {"Authorization": "Bearer " + token}

    def test_bearer_tokens(self):
        body = {"model": "mamba", "prompt": "Hello", "max_tokens": 2}
        for headers in ({}, self.bearer("wrong"), {"Authorization": "alice-token"}):
            with self.subTest(headers=headers):
                status, _, got = request(self.port, "POST", "/v1/completions", body, headers)
                self.assertEqual(status, 401, got)
                self.assertEqual(set(got["error"]), ERROR_KEYS)
                self.assertEqual(got["error"]["type"], "authentication_error")
        self.assertEqual(request(self.port, "GET", "/v1/models")[0], 401)
        status, _, got = request(self.port, "POST", "/v1/completions", body,
                                 self.bearer("alice-token"))
        self.assertEqual(status, 200, got)
        self.assertEqual(request(self.port, "GET", "/v1/models",
                                 headers=self.bearer("bob-token"))[0], 200)
        self.assertEqual(request(self.port, "GET", "/health")[0], 200)

    def test_per_client_limit_is_429_with_retry_after(self):
        long = {"model": "mamba", "prompt": "Hello", "max_tokens": MAX_NEW_TOKENS,
                "ignore_eos": True, "stream": True, "logprobs": 20}
        auth = b"Authorization: Bearer alice-token\r\n"
        streams = []
        try:
            for _ in range(2):
                s = stalled_socket(self.port, long, auth)
                self.assertTrue(s.recv(12).startswith(b"HTTP/1.1 200"))
                streams.append(s)
            status, headers, got = request(self.port, "POST", "/v1/completions",
                                           dict(long, stream=False, max_tokens=2),
                                           self.bearer("alice-token"))
            self.assertEqual(status, 429, got)
            self.assertEqual(got["error"]["type"], "rate_limit_error")
            self.assertEqual(got["error"]["code"], "rate_limit_exceeded")
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            # Another principal is not limited by alice's streams.
            status, _, got = request(self.port, "POST", "/v1/completions",
                                     {"model": "mamba", "prompt": "Hi", "max_tokens": 2},
                                     self.bearer("bob-token"))
            self.assertEqual(status, 200, got)
        finally:
            for s in streams:
                s.close()
        # Once those streams are gone, alice is served again.
        deadline = time.time() + 5
        while True:
            status, _, got = request(self.port, "POST", "/v1/completions",
                                     {"model": "mamba", "prompt": "Hi", "max_tokens": 2},
                                     self.bearer("alice-token"))
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(status, 200, got)



class HttpDoorTlsAndDrainTest(unittest.TestCase):
    """A server with TLS (the gRPC port's certificate serves HTTPS too), then SIGTERM."""

    @classmethod
    def setUpClass(cls):
        import security_test as st  # its openssl helpers: a CA and a server certificate
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_http_tls_")
        st.make_ca(cls.tmp, "ca")
        st.make_cert(cls.tmp, "ca", "server", "/CN=localhost", server=True)
        binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
        cls.server = pct.Server(binary, "--http_port=0", "--metrics_port=-1",
                                "--tls_cert=" + os.path.join(cls.tmp, "server.crt"),
                                "--tls_key=" + os.path.join(cls.tmp, "server.key"),
                                "--drain_deadline_s=30", "--max_new_tokens=2000")
        deadline = time.time() + 30
        cls.port = None
        while cls.port is None and time.time() < deadline:
            for line in list(cls.server.lines):
                if line.startswith("OpenAI-compatible HTTP on ") and line.endswith("(TLS)"):
                    cls.port = int(line.split()[-2].rsplit(":", 1)[1])
            time.sleep(0.05)
        if cls.port is None:
            cls.server.kill()
            raise RuntimeError("no TLS HTTP port:\n" + cls.server.output())
        import ssl
        cls.context = ssl.create_default_context(cafile=os.path.join(cls.tmp, "ca.crt"))

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def https(self, method, path, body=None, timeout=60):
        conn = http.client.HTTPSConnection("localhost", self.port, context=self.context,
                                           timeout=timeout)
        conn.request(method, path, body=None if body is None else json.dumps(body))
        r = conn.getresponse()
        return conn, r

    def test_https_and_drain(self):
        # HTTPS with the server's certificate; plaintext HTTP on that port is not served.
        conn, r = self.https("POST", "/v1/completions",
                             {"model": "mamba", "prompt": "Hello", "max_tokens": 4})
        self.assertEqual(r.status, 200)
        self.assertEqual(len(json.loads(r.read())["choices"]), 1)
        conn.close()
        with self.assertRaises((OSError, http.client.HTTPException)):
            request(self.port, "GET", "/health", timeout=5)
        # SIGTERM during a stream: new requests get 503 with retry-after, /health 503, and the
        # stream runs to its [DONE]; then the server exits 0.
        conn, stream = self.https("POST", "/v1/completions",
                                  {"model": "standard", "prompt": "drain", "max_tokens": 600,
                                   "ignore_eos": True, "stream": True})
        self.assertEqual(stream.status, 200, stream.read() if stream.status != 200 else "")
        first = stream.readline()
        self.assertTrue(first.startswith(b"data: "), first)
        self.server.proc.send_signal(15)
        deadline = time.time() + 10
        while time.time() < deadline:
            c, r = self.https("POST", "/v1/completions",
                              {"model": "mamba", "prompt": "x", "max_tokens": 1})
            if r.status == 503:
                break
            c.close()
            time.sleep(0.05)
        self.assertEqual(r.status, 503)
        self.assertEqual(r.getheader("retry-after"), "1")
        self.assertEqual(json.loads(r.read())["error"]["type"], "service_unavailable")
        c.close()
        rest = stream.read()
        conn.close()
        self.assertTrue(rest.endswith(b"data: [DONE]\n\n"), rest[-200:])
        self.assertEqual(self.server.proc.wait(timeout=60), 0, self.server.output())


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
