#!/usr/bin/python3
"""The OpenAI-compatible HTTP door (--http_port, server/rpc/openai/) over real sockets, with the
standard library's http.client and raw sockets, and Debian's python3-grpcio for the gRPC doors.

Checked, on one server (body and header limits lowered, a 2 s write timeout); bearer tokens,
the per-client limit, HTTPS and the drain are in http_door_security_test.py:
- errors: malformed JSON, a JSON array, refused fields (suffix, tools, response_format,
  logit_bias beyond the vocabulary) are 400 naming the field; an unknown model is 404
  model_not_found, an unknown path 404; all in OpenAI's {"error": {...}} shape; unknown fields
  are ignored;
- limits: a body over --http_max_body_bytes is 413, headers over --http_max_header_bytes 431;
- slow clients: half-sent requests (slowloris) do not hold up others; a stream whose client
  stops reading is cut at --http_write_timeout_s without slowing another client's stream, and
  its choices' sessions are freed;
- streaming: `data: {json}` events ending in `data: [DONE]`, the usage chunk, chat's role and
  finish_reason;
- n > 1: seeded choices (choice 0 is the n = 1 answer), greedy choices equal, no session left,
  an aborted n = 4 stream frees its sessions;
- the same greedy tokens through the HTTP, AttnServe and Open Inference Protocol doors;
- seeds and logprobs; /tokenize, /detokenize, /health and /v1/models.

Usage: http_door_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402  (Server, generate_stubs, run_tests)

ARGS = None

MAX_BODY = 65536
MAX_HEADERS = 8192
WRITE_TIMEOUT_S = 2
# Long enough that a stalled stream is still generating when its write timeout cuts it.
MAX_NEW_TOKENS = 20000
HELLO_IDS = [72, 101, 108, 108, 111]  # "Hello" in the default models' byte-level tokenizer
ERROR_KEYS = {"message", "type", "param", "code"}


def start_http_server(binary, *flags):
    """pct.Server with --http_port=0; returns it with .http_port set once /health answers."""
    server = pct.Server(binary, "--http_port=0", "--metrics_port=-1", *flags)
    deadline = time.time() + 30
    server.http_port = None
    while time.time() < deadline and server.http_port is None:
        for line in list(server.lines):
            if line.startswith("OpenAI-compatible HTTP on "):
                server.http_port = int(line.split()[-1].rsplit(":", 1)[1])
        time.sleep(0.05)
    if server.http_port is None:
        server.kill()
        raise RuntimeError("no 'OpenAI-compatible HTTP on' line:\n" + server.output())
    while time.time() < deadline:
        try:
            if request(server.http_port, "GET", "/health")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    server.kill()
    raise RuntimeError("/health did not answer 200:\n" + server.output())


def request(port, method, path, body=None, headers=None, timeout=60):
    """One request on its own connection: (status, headers with lowercase names, body: parsed
    JSON when it is JSON, else bytes). `body`: bytes/str as is, anything else as JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        got = {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()
    if got.get("content-type", "").startswith("application/json"):
        data = json.loads(data)
    return r.status, got, data


def sse_events(raw):
    """The `data:` payloads of a Server-Sent Events body (keep-alive comments skipped); every
    event must be `data: ...` followed by a blank line."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-200:]
    events = []
    for block in text[:-2].split("\n\n"):
        if block.startswith(":"):
            continue
        assert block.startswith("data: ") and "\n" not in block, repr(block[:200])
        events.append(block[len("data: "):])
    return events


def raw_request(body, path="/v1/completions", extra=b""):
    """The bytes of a POST of JSON `body` (for raw sockets)."""
    data = json.dumps(body).encode()
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (path.encode(), len(data), extra)) + data


def stalled_socket(port, body, headers=b""):
    """A socket with a small receive buffer that sends `body` and never reads."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall(raw_request(body, extra=headers))
    return s


def read_until_closed(s, timeout=15):
    """Everything `s` receives until the peer closes (a larger buffer first, so that a stalled
    window opens fast)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    return data


class HttpDoorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_http_")
        pct.generate_stubs(ARGS.source_dir, cls.tmp)
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        from inference import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
        cls.grpc, cls.apb, cls.opb = grpc, inference_pb2, grpc_predict_v2_pb2
        cls.binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
        if not os.access(cls.binary, os.X_OK):
            raise RuntimeError("no server binary at " + cls.binary + "; build attnserve-server")
        cls.server = start_http_server(
            cls.binary, "--max_new_tokens=%d" % MAX_NEW_TOKENS,
            "--http_max_body_bytes=%d" % MAX_BODY, "--http_max_header_bytes=%d" % MAX_HEADERS,
            "--http_write_timeout_s=%d" % WRITE_TIMEOUT_S)
        cls.port = cls.server.http_port
        cls.channel = grpc.insecure_channel(cls.server.target)
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.attn = inference_pb2_grpc.AttnServeStub(cls.channel)
        cls.oip = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----

    def post(self, path, body, **kwargs):
        return request(self.port, "POST", path, body, **kwargs)

    def complete(self, **body):
        """A non-streamed /v1/completions that must succeed; its response object."""
        status, _, got = self.post("/v1/completions", body)
        self.assertEqual(status, 200, got)
        return got

    def stream(self, path, body):
        """A streamed request that must succeed: (headers, the data payloads)."""
        status, headers, raw = self.post(path, dict(body, stream=True))
        self.assertEqual(status, 200, raw)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"), headers)
        return headers, sse_events(raw)

    def assert_error(self, response, status, type_, param=None, code=None):
        got_status, headers, body = response
        self.assertEqual(got_status, status, body)
        self.assertTrue(headers.get("content-type", "").startswith("application/json"), headers)
        self.assertEqual(set(body), {"error"}, body)
        error = body["error"]
        self.assertEqual(set(error), ERROR_KEYS, body)
        self.assertIsInstance(error["message"], str)
        self.assertTrue(error["message"], body)
        self.assertEqual(error["type"], type_, body)
        self.assertEqual(error["param"], param, body)
        self.assertEqual(error["code"], code, body)
        return error

    def sessions(self):
        return self.attn.ListSessions(self.apb.ListSessionsRequest(), timeout=10).total

    def wait_no_sessions(self, within_s):
        """Seconds until ListSessions shows none; fails past `within_s`."""
        start = time.time()
        while True:
            total = self.sessions()
            if total == 0:
                return time.time() - start
            if time.time() - start > within_s:
                self.fail("%d sessions still open %.1f s later" % (total, within_s))
            time.sleep(0.05)

    def grpc_greedy(self, model, max_new_tokens, ids=None, text=None):
        """An AttnServe stream (open, an append that generates greedily, close): (ids,
        logprobs, generated text)."""
        apb = self.apb
        append = apb.StreamAppend(sequence_number=1, generate=apb.GenerateSpec(
            max_new_tokens=max_new_tokens, temperature=0, ignore_eos=True))
        if text is not None:
            append.text = text.encode()
        else:
            append.tokens.extend(ids)
        msgs = [apb.StreamRequest(open=apb.StreamOpen(model=model)),
                apb.StreamRequest(append=append), apb.StreamRequest(close=apb.StreamClose())]
        generated, result = [], None
        for r in self.attn.Stream(iter(msgs), timeout=60):
            kind = r.WhichOneof("kind")
            if kind == "generated":
                generated.append(r.generated)
            elif kind == "result":
                result = r.result
        self.assertIsNotNone(result)
        ids_out = [g.token for g in generated]
        self.assertEqual(list(result.generated_tokens), ids_out)
        return ids_out, [g.logprob for g in generated], result.generated_text

    def oip_greedy(self, model, max_tokens, ids=None, text=None):
        """Open Inference Protocol ModelInfer generating greedily: the output_ids."""
        opb = self.opb
        r = opb.ModelInferRequest(model_name=model)
        if text is not None:
            t = r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
            t.contents.bytes_contents.append(text.encode())
        else:
            t = r.inputs.add(name="input_ids", datatype="INT64", shape=[1, len(ids)])
            t.contents.int64_contents.extend(ids)
        r.parameters["max_tokens"].int64_param = max_tokens
        r.parameters["temperature"].double_param = 0.0
        r.parameters["ignore_eos"].bool_param = True
        r.outputs.add(name="output_ids")
        got = self.oip.ModelInfer(r, timeout=60)
        [out] = [o for o in got.outputs if o.name == "output_ids"]
        self.assertEqual(list(out.shape), [1, max_tokens])
        return list(out.contents.int64_contents)

    def detokenize(self, model, ids):
        status, _, got = self.post("/detokenize", {"model": model, "tokens": ids})
        self.assertEqual(status, 200, got)
        return got["prompt"]

    # ---- 1. errors ----

    def test_malformed_json_and_non_object_bodies_are_400(self):
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
            e = self.assert_error(self.post(path, b'{"model": "mamba", "prompt": '),
                                  400, "invalid_request_error")
            self.assertIn("not valid JSON", e["message"])
            e = self.assert_error(self.post(path, b'[{"model": "mamba", "prompt": "hi"}]'),
                                  400, "invalid_request_error")
            self.assertIn("JSON object", e["message"])
        self.assert_error(self.post("/v1/completions", b""), 400, "invalid_request_error")

    def test_unknown_fields_are_ignored(self):
        got = self.complete(model="mamba", prompt="Hello", max_tokens=2, temperature=0,
                            frobnicate={"a": [1, 2]}, x_vendor_extension=True)
        self.assertEqual(got["object"], "text_completion")
        self.assertEqual(got["usage"]["completion_tokens"], 2)
        status, _, chat = self.post("/v1/chat/completions", {
            "model": "mamba", "messages": [{"role": "user", "content": "hi", "name": "x"}],
            "max_tokens": 2, "unknown_field": 1})
        self.assertEqual(status, 200, chat)

    def test_unsupported_fields_are_400_naming_the_field(self):
        base = {"model": "mamba", "prompt": "Hello", "max_tokens": 2}
        chat = {"model": "mamba", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2}
        tool = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        for path, body, param in (
                ("/v1/completions", dict(base, suffix="!"), "suffix"),
                ("/v1/chat/completions", dict(chat, tools=tool), "tools"),
                ("/v1/completions", dict(base, tools=tool), "tools"),
                ("/v1/chat/completions", dict(chat, response_format={"type": "json_object"}),
                 "response_format"),
                ("/v1/completions", dict(base, logit_bias={"4096": 5}), "logit_bias"),
                ("/v1/completions", dict(base, logit_bias={"999999": -100}), "logit_bias"),
                ("/v1/chat/completions", dict(chat, logit_bias={"100000": 1}), "logit_bias")):
            with self.subTest(path=path, param=param):
                e = self.assert_error(self.post(path, body), 400, "invalid_request_error",
                                      param=param)
                self.assertIn(param, e["message"])
        # What is supported of them is accepted: an empty tools list, response_format text.
        self.complete(**dict(base, tools=[], response_format={"type": "text"},
                             logit_bias={"4095": 1}))

    def test_unknown_model_and_unknown_path_are_404(self):
        for path, body in (("/v1/completions", {"model": "nope", "prompt": "hi"}),
                           ("/v1/chat/completions",
                            {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
                           ("/tokenize", {"model": "nope", "prompt": "hi"})):
            with self.subTest(path=path):
                e = self.assert_error(self.post(path, body), 404, "not_found_error",
                                      param="model", code="model_not_found")
                self.assertIn("nope", e["message"])
        for method, path in (("GET", "/v1/nothing"), ("POST", "/v2/completions"),
                             ("GET", "/")):
            with self.subTest(path=path):
                self.assert_error(request(self.port, method, path, b"{}" if method == "POST"
                                          else None), 404, "not_found_error", code="unknown_url")

    # ---- 2. limits ----

    def test_body_over_the_limit_is_413(self):
        body = b'{"model": "mamba", "prompt": "' + b"a" * (MAX_BODY + 1000) + b'"}'
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nConnection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            try:
                s.sendall(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer before reading it all
            raw = read_until_closed(s)
        finally:
            s.close()
        head, _, payload = raw.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 413"), raw[:300])
        self.assertIn(b"content-type: application/json", head.lower())
        error = json.loads(payload)["error"]
        self.assertEqual(set(error), ERROR_KEYS)
        self.assertEqual(error["type"], "invalid_request_error")
        # Just under the limit is served.
        under = {"model": "mamba", "prompt": "a" * (MAX_BODY - 200), "max_tokens": 1}
        self.assertEqual(self.post("/v1/completions", under)[0], 200)

    def test_headers_over_the_limit_are_431(self):
        body = {"model": "mamba", "prompt": "Hello", "max_tokens": 1}
        # Each line under cpp-httplib's own 8 KiB line bound, together over the limit.
        big = {"X-Padding-%d" % i: "p" * 3000 for i in range(4)}
        e = self.assert_error(self.post("/v1/completions", body, headers=big), 431,
                              "invalid_request_error")
        self.assertIn("--http_max_header_bytes", e["message"])
        self.assertEqual(request(self.port, "GET", "/v1/models", headers=big)[0], 431)
        # Under the limit: served.
        self.assertEqual(self.post("/v1/completions", body,
                                   headers={"X-Padding": "p" * 3000})[0], 200)

    # ---- 3. slow clients ----

    def test_slowloris_connections_do_not_hold_up_other_requests(self):
        stalled = []
        try:
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
                stalled.append(s)
            time.sleep(0.3)
            start = time.time()
            got = self.complete(model="mamba", prompt="Hello", max_tokens=8, temperature=0,
                                ignore_eos=True)
            self.assertEqual(got["usage"]["completion_tokens"], 8)
            _, events = self.stream("/v1/completions", {
                "model": "mamba", "prompt": "Hello", "max_tokens": 8, "ignore_eos": True})
            self.assertEqual(events[-1], "[DONE]")
            self.assertEqual(request(self.port, "GET", "/health")[0], 200)
            elapsed = time.time() - start
            self.assertLess(elapsed, 5, "answered %.2f s late behind 20 half-sent requests"
                            % elapsed)
        finally:
            for s in stalled:
                s.close()

    def test_stalled_stream_is_cut_without_slowing_others_and_frees_its_sessions(self):
        small = {"model": "mamba", "prompt": "Hello", "max_tokens": 32, "ignore_eos": True,
                 "temperature": 0}
        t = time.time()
        _, baseline_events = self.stream("/v1/completions", small)
        baseline = time.time() - t
        # n = 2 (two temporary sessions), 20 top logprobs a token: megabytes of events, far
        # more than the socket buffers hold, so its writer blocks and the generation is still
        # running when --http_write_timeout_s cuts it.
        stalled = stalled_socket(self.port, {
            "model": "mamba", "prompt": "Hello", "n": 2, "max_tokens": MAX_NEW_TOKENS,
            "ignore_eos": True, "stream": True, "logprobs": 20})
        try:
            start = time.time()
            seen = 0
            while time.time() - start < 5 and seen == 0:
                seen = self.sessions()
                time.sleep(0.02)
            self.assertEqual(seen, 2, "the stalled request's choices never held sessions")
            time.sleep(0.5)  # its buffers are full by now
            # Another client's stream is served at its own pace meanwhile.
            slow = []
            for _ in range(3):
                t = time.time()
                _, events = self.stream("/v1/completions", small)
                slow.append(time.time() - t)
                self.assertEqual(events[-1], "[DONE]")
                text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
                base = "".join(json.loads(e)["choices"][0]["text"]
                               for e in baseline_events[:-1])
                self.assertEqual(text, base)
            self.assertLess(min(slow), max(1.0, 10 * baseline),
                            "beside a stalled stream: %s s, alone: %.3f s" % (slow, baseline))
            # Cut at the write timeout: its sessions are freed well before its 20000 tokens
            # could have been generated.
            freed = self.wait_no_sessions(WRITE_TIMEOUT_S + 8)
            took = time.time() - start
            data = read_until_closed(stalled)
        finally:
            stalled.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        self.assertGreater(len(data), 100000)
        self.assertNotIn(b"data: [DONE]", data, "the stalled stream was not cut")
        self.assertLess(took, WRITE_TIMEOUT_S + 8, freed)
        # The server goes on: n = 4 and a stream.
        got = self.complete(model="mamba", prompt="Hello", n=4, max_tokens=4, seed=3)
        self.assertEqual(len(got["choices"]), 4)
        self.assertEqual(self.sessions(), 0)

    # ---- 4. streaming format ----

    def test_completion_stream_format_and_usage(self):
        body = {"model": "standard", "prompt": "Hello", "max_tokens": 8, "ignore_eos": True,
                "temperature": 0}
        whole = self.complete(**body)
        _, events = self.stream("/v1/completions",
                                dict(body, stream_options={"include_usage": True}))
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"], {"prompt_tokens": 5, "completion_tokens": 8,
                                          "total_tokens": 13})
        for c in chunks:
            self.assertEqual(c["object"], "text_completion")
            self.assertEqual(c["model"], "standard")
            self.assertEqual(c["id"], chunks[0]["id"])
            self.assertTrue(c["id"].startswith("cmpl-"))
        choices = [c["choices"][0] for c in chunks[:-1]]
        self.assertTrue(all(len(c["choices"]) == 1 and c["usage"] is None for c in chunks[:-1]))
        self.assertEqual([c["finish_reason"] for c in choices],
                         [None] * (len(choices) - 1) + ["length"])
        self.assertEqual("".join(c["text"] for c in choices), whole["choices"][0]["text"])
        self.assertEqual(whole["choices"][0]["finish_reason"], "length")
        # Without stream_options: no usage chunk, no usage key.
        _, plain = self.stream("/v1/completions", body)
        self.assertEqual(plain[-1], "[DONE]")
        self.assertTrue(all("usage" not in json.loads(e) and json.loads(e)["choices"]
                            for e in plain[:-1]))

    def test_chat_stream_format(self):
        body = {"model": "mamba", "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Hello"}],
                "max_tokens": 6, "ignore_eos": True, "temperature": 0}
        _, events = self.stream("/v1/chat/completions",
                                dict(body, stream_options={"include_usage": True}))
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        for c in chunks:
            self.assertEqual(c["object"], "chat.completion.chunk")
            self.assertTrue(c["id"].startswith("chatcmpl-"))
        choices = [c["choices"][0] for c in chunks[:-1]]
        self.assertEqual(choices[0]["delta"].get("role"), "assistant")
        self.assertTrue(all("role" not in c["delta"] for c in choices[1:]))
        self.assertEqual(choices[-1]["finish_reason"], "length")
        self.assertTrue(all(c["finish_reason"] is None for c in choices[:-1]))
        self.assertEqual(chunks[-1]["choices"], [])
        usage = chunks[-1]["usage"]
        self.assertEqual(usage["completion_tokens"], 6)
        self.assertEqual(usage["total_tokens"], usage["prompt_tokens"] + 6)
        self.assertGreater(usage["prompt_tokens"], len("Be brief.Hello"))  # the template's
        status, _, whole = self.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, whole)
        self.assertEqual(whole["object"], "chat.completion")
        self.assertEqual(whole["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(whole["choices"][0]["message"]["content"],
                         "".join(c["delta"].get("content", "") for c in choices))
        self.assertEqual(whole["usage"], usage)

    # ---- 5. n > 1 ----

    def test_n_choices_seeded_and_greedy_leave_no_session(self):
        body = {"model": "standard", "prompt": "Hello", "max_tokens": 12, "ignore_eos": True}
        one = self.complete(**dict(body, seed=77, temperature=1))
        four = self.complete(**dict(body, seed=77, temperature=1, n=4))
        self.assertEqual(self.sessions(), 0)
        self.assertEqual([c["index"] for c in four["choices"]], [0, 1, 2, 3])
        texts = [c["text"] for c in four["choices"]]
        self.assertEqual(texts[0], one["choices"][0]["text"])
        self.assertGreater(len(set(texts)), 1, texts)
        self.assertEqual(four["usage"]["completion_tokens"], 48)
        self.assertEqual(four["usage"]["prompt_tokens"], 5)
        again = self.complete(**dict(body, seed=77, temperature=1, n=4))
        self.assertEqual([c["text"] for c in again["choices"]], texts)
        greedy = self.complete(**dict(body, temperature=0, n=4))
        self.assertEqual(len(set(c["text"] for c in greedy["choices"])), 1, greedy)
        self.assertEqual(greedy["choices"][0]["text"],
                         self.complete(**dict(body, temperature=0))["choices"][0]["text"])
        # Streamed: four choices, each ending with finish_reason length.
        _, events = self.stream("/v1/completions", dict(body, seed=77, temperature=1, n=4))
        streamed = [""] * 4
        finished = {}
        for e in events[:-1]:
            for c in json.loads(e)["choices"]:
                streamed[c["index"]] += c["text"]
                if c["finish_reason"] is not None:
                    finished[c["index"]] = c["finish_reason"]
        self.assertEqual(streamed, texts)
        self.assertEqual(finished, {0: "length", 1: "length", 2: "length", 3: "length"})
        self.assertEqual(self.sessions(), 0)

    def test_aborted_n4_stream_frees_its_sessions(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({
            "model": "mamba", "prompt": "Hello", "n": 4, "max_tokens": MAX_NEW_TOKENS,
            "ignore_eos": True, "stream": True}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertTrue(r.readline().startswith(b"data: "))
        self.assertEqual(self.sessions(), 4)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        freed = self.wait_no_sessions(3)
        self.assertLess(freed, 3)
        self.assertEqual(self.complete(model="mamba", prompt="Hi", n=4,
                                       max_tokens=2)["usage"]["completion_tokens"], 8)

    def test_abandoned_non_streamed_request_frees_its_sessions(self):
        # completion_runner.h: the temporary sessions "are closed when their choice ends (a
        # client that goes away included)". 16 x 20000 tokens take far longer than the wait.
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        try:
            s.sendall(raw_request({"model": "mamba", "prompt": "Hello", "n": 16,
                                   "max_tokens": MAX_NEW_TOKENS, "ignore_eos": True}))
            deadline = time.time() + 5
            while self.sessions() != 16 and time.time() < deadline:
                time.sleep(0.02)
            self.assertEqual(self.sessions(), 16)
            s.shutdown(socket.SHUT_RDWR)
            s.close()
            self.wait_no_sessions(2.5)
        finally:
            s.close()
            # Leave no generation behind for the next tests: closing its sessions stops it.
            for info in self.attn.ListSessions(self.apb.ListSessionsRequest(),
                                               timeout=10).sessions:
                try:
                    self.attn.CloseSession(self.apb.CloseSessionRequest(
                        session_id=info.session_id), timeout=10)
                except self.grpc.RpcError:
                    pass  # ended meanwhile
            self.wait_no_sessions(10)

    # ---- 6. three doors ----

    def http_greedy(self, model, prompt, max_tokens):
        got = self.complete(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                            ignore_eos=True, logprobs=0)
        choice = got["choices"][0]
        return choice["text"], choice["logprobs"]["tokens"], choice["logprobs"]["token_logprobs"]

    def assert_same_greedy(self, model, http_prompt, grpc_kwargs):
        text, tokens, logprobs = self.http_greedy(model, http_prompt, 8)
        ids, grpc_logprobs, grpc_text = self.grpc_greedy(model, 8, **grpc_kwargs)
        oip_ids = self.oip_greedy(model, 8, **grpc_kwargs)
        self.assertEqual(oip_ids, ids, "Open Inference Protocol vs AttnServe door")
        self.assertEqual(len(tokens), 8)
        self.assertEqual(tokens, [self.detokenize(model, [i]) for i in ids],
                         "HTTP tokens vs the AttnServe door's ids %s" % ids)
        self.assertEqual(text, self.detokenize(model, ids),
                         "HTTP text vs the AttnServe door's ids %s" % ids)
        for a, b in zip(logprobs, grpc_logprobs):
            self.assertAlmostEqual(a, b, delta=1e-4, msg="%s vs %s" % (logprobs, grpc_logprobs))
        return ids, text, grpc_text

    def test_same_greedy_tokens_through_three_doors_text_prompt(self):
        for model in ("standard", "hybrid", "mamba"):
            with self.subTest(model=model):
                ids, text, grpc_text = self.assert_same_greedy(model, "Hello", {"text": "Hello"})
                self.assertEqual(text, grpc_text)
                status, _, tok = self.post("/tokenize", {"model": model, "prompt": "Hello"})
                self.assertEqual(status, 200, tok)
                self.assertEqual(tok["tokens"], HELLO_IDS)

    def test_same_greedy_tokens_through_three_doors_token_id_prompt(self):
        # The AttnServe and OIP doors sample every id of the model's vocabulary for a prompt
        # of ids (text_requests.h, GenerationStops.text_prompt); the HTTP door should too.
        for model in ("standard", "hybrid", "mamba"):
            with self.subTest(model=model):
                self.assert_same_greedy(model, HELLO_IDS, {"ids": HELLO_IDS})

    # ---- 7. seeds and logprobs ----

    def test_seeds_reproduce_and_differ(self):
        body = {"model": "standard", "prompt": "Hello", "max_tokens": 16, "ignore_eos": True,
                "temperature": 1}
        a = self.complete(**dict(body, seed=1234))["choices"][0]["text"]
        b = self.complete(**dict(body, seed=1234))["choices"][0]["text"]
        c = self.complete(**dict(body, seed=4321))["choices"][0]["text"]
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        _, events = self.stream("/v1/completions", dict(body, seed=1234))
        self.assertEqual("".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]), a)

    def test_logprobs_completions_and_chat(self):
        got = self.complete(model="standard", prompt="Hello", max_tokens=10, ignore_eos=True,
                            seed=5, logprobs=3)
        lp = got["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), 10)
        self.assertEqual(len(lp["token_logprobs"]), 10)
        self.assertTrue(all(x <= 0 for x in lp["token_logprobs"]), lp["token_logprobs"])
        self.assertEqual(len(lp["top_logprobs"]), 10)
        for top in lp["top_logprobs"]:
            # A dict by token string: strings that collide (U+FFFD) make fewer entries.
            self.assertTrue(1 <= len(top) <= 3, top)
            self.assertTrue(all(v <= 0 for v in top.values()), top)
        self.assertEqual(lp["text_offset"][0], 0)
        self.assertEqual(lp["text_offset"], sorted(lp["text_offset"]))
        status, _, chat = self.post("/v1/chat/completions", {
            "model": "mamba", "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 6, "ignore_eos": True, "seed": 5, "logprobs": True,
            "top_logprobs": 2})
        self.assertEqual(status, 200, chat)
        content = chat["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), 6)
        for item in content:
            self.assertEqual(set(item), {"token", "logprob", "bytes", "top_logprobs"})
            self.assertLessEqual(item["logprob"], 0)
            self.assertEqual(len(item["top_logprobs"]), 2)
            self.assertGreaterEqual(item["top_logprobs"][0]["logprob"],
                                    item["top_logprobs"][1]["logprob"])
            self.assertGreaterEqual(item["top_logprobs"][0]["logprob"], item["logprob"] - 1e-5)
        self.assertEqual(bytes(b for item in content for b in item["bytes"]).decode(
            errors="replace"), chat["choices"][0]["message"]["content"])
        # top_logprobs without logprobs is refused by name.
        self.assert_error(self.post("/v1/chat/completions", {
            "model": "mamba", "messages": [{"role": "user", "content": "Hello"}],
            "top_logprobs": 2}), 400, "invalid_request_error", param="top_logprobs")

    # ---- 10. tokenize, detokenize, health, models ----

    def test_tokenize_detokenize_health_models(self):
        text = "Hello, w\u00f6rld! \U0001F44B"
        status, _, tok = self.post("/tokenize", {"model": "mamba", "prompt": text})
        self.assertEqual(status, 200, tok)
        self.assertEqual(tok["count"], len(tok["tokens"]))
        self.assertEqual(tok["tokens"][:5], HELLO_IDS)
        self.assertEqual(tok["model"], "mamba")
        self.assertEqual(self.detokenize("mamba", tok["tokens"]), text)
        e = self.assert_error(self.post("/detokenize", {"model": "mamba", "tokens": [4096]}),
                              400, "invalid_request_error", param="tokens")
        self.assertIn("4096", e["message"])
        status, headers, body = request(self.port, "GET", "/health")
        self.assertEqual((status, body), (200, b""))
        status, _, models = request(self.port, "GET", "/v1/models")
        self.assertEqual(status, 200, models)
        self.assertEqual(models["object"], "list")
        names = [m["id"] for m in models["data"]]
        self.assertTrue({"mamba", "standard", "hybrid"} <= set(names), names)
        for m in models["data"]:
            self.assertEqual(m["object"], "model")
            self.assertGreater(m["max_model_len"], 0)


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
