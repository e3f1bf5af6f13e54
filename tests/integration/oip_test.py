#!/usr/bin/python3
"""The Open Inference Protocol door (inference.GRPCInferenceService) against AttnServe's.

Stubs are generated at test time from proto/inference (and proto/attnserve/v1, to compare);
one server serves both protocols on one port. Checked: every RPC; ModelInfer with typed and
raw contents gives AttnServe Infer's logits; a sequence (start / continue / end) gives what an
AttnServe stream fed the same chunks gives; ModelStreamInfer generation gives AttnServe
generate's tokens, one response per token and a final one; the call sequence of perf_analyzer
in sequence mode (metadata, config, statistics, sequence inferences, statistics) succeeds and
its statistics add up; malformed requests each get a clear status; a sequence survives a
restart through the session store, and belongs to its principal; metrics carry the protocol.

Usage: oip_test.py --build-dir BUILD --source-dir SOURCE [unittest arguments]
"""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as pct  # noqa: E402  (Server, ServerProcesses, run_tests)

ARGS = None




class OipTest(pct.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_oip_")
        pct.generate_stubs(ARGS.source_dir, cls.tmp)
        import grpc
        import numpy
        from inference import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        cls.grpc, cls.np = grpc, numpy
        cls.pb, cls.pbg = grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
        cls.apb, cls.apbg = inference_pb2, inference_pb2_grpc
        cls.binary = os.path.join(os.path.abspath(ARGS.build_dir), "server", "attnserve-server")
        cls.store = os.path.join(cls.tmp, "store")
        cls.tokens_file = os.path.join(cls.tmp, "tokens")
        with open(cls.tokens_file, "w") as f:
            for principal, token in (("alice", "ta"), ("bob", "tb")):
                f.write("%s: %s\n" % (principal, hashlib.sha256(token.encode()).hexdigest()))
        cls.server = cls.start_server()

    @classmethod
    def start_server(cls):
        server = pct.Server(cls.binary, "--session_store=dir:" + cls.store,
                            "--auth_tokens_file=" + cls.tokens_file)
        cls.channel = cls.grpc.insecure_channel(server.target)
        cls.grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.oip = cls.pbg.GRPCInferenceServiceStub(cls.channel)
        cls.attn = cls.apbg.AttnServeStub(cls.channel)
        return server

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----

    def md(self, who="alice"):
        return (("authorization", "Bearer " + {"alice": "ta", "bob": "tb"}[who]),)

    def request(self, model, ids, raw=False, dtype="INT64", **params):
        pb, np = self.pb, self.np
        r = pb.ModelInferRequest(model_name=model, id="req-1")
        t = r.inputs.add(name="input_ids", datatype=dtype, shape=[1, len(ids)])
        if raw:
            r.raw_input_contents.append(
                np.array(ids, dtype=np.int64 if dtype == "INT64" else np.int32).tobytes())
        elif dtype == "INT64":
            t.contents.int64_contents.extend(ids)
        else:
            t.contents.int_contents.extend(ids)
        for name, value in params.items():
            p = r.parameters[name]
            if isinstance(value, bool):
                p.bool_param = value
            elif isinstance(value, int):
                p.int64_param = value
            elif isinstance(value, float):
                p.double_param = value
            else:
                p.string_param = value
        return r

    def output(self, response, name):
        """An output of `response` as a numpy array (raw or typed contents)."""
        np = self.np
        for i, o in enumerate(response.outputs):
            if o.name != name:
                continue
            dtype = {"FP32": np.float32, "INT64": np.int64}[o.datatype]
            if response.raw_output_contents:
                data = np.frombuffer(response.raw_output_contents[i], dtype=dtype)
            else:
                data = np.array(o.contents.fp32_contents if o.datatype == "FP32"
                                else o.contents.int64_contents, dtype=dtype)
            return data.reshape(list(o.shape))
        self.fail("no output %r in %s" % (name, [o.name for o in response.outputs]))

    def attn_logits(self, model, ids):
        apb = self.apb
        r = self.attn.Infer(apb.InferRequest(
            model=model, tokens=ids, output=apb.OutputSpec(kind=apb.OUTPUT_KIND_LAST_LOGITS)),
            metadata=self.md(), timeout=60)
        return self.np.array(r.outputs.tensor.float_data, dtype=self.np.float32)

    def attn_stream(self, model, chunks, generate=None):
        """An AttnServe stream: open, one append per chunk (the last with `generate`), close.
        Returns (last logits of each append, generated tokens)."""
        apb = self.apb
        msgs = [apb.StreamRequest(open=apb.StreamOpen(model=model))]
        for i, chunk in enumerate(chunks):
            append = apb.StreamAppend(sequence_number=i + 1, tokens=chunk,
                                      output=apb.OutputSpec(kind=apb.OUTPUT_KIND_LAST_LOGITS))
            if generate is not None and i == len(chunks) - 1:
                append.generate.CopyFrom(generate)
            msgs.append(apb.StreamRequest(append=append))
        msgs.append(apb.StreamRequest(close=apb.StreamClose()))
        logits, tokens = [], []
        for r in self.attn.Stream(iter(msgs), metadata=self.md(), timeout=60):
            kind = r.WhichOneof("kind")
            if kind == "result":
                logits.append(self.np.array(r.result.outputs.tensor.float_data,
                                            dtype=self.np.float32))
            elif kind == "generated":
                tokens.append(r.generated.token)
        return logits, tokens

    def expect_error(self, code, substring, request, who="alice"):
        with self.assertRaises(self.grpc.RpcError) as caught:
            self.oip.ModelInfer(request, metadata=self.md(who), timeout=30)
        self.assertEqual(caught.exception.code(), code, caught.exception.details())
        self.assertIn(substring, caught.exception.details())
        self.assertLess(len(caught.exception.details()), 400)
        return caught.exception.details()

    # ---- tests ----

    def test_every_rpc(self):
        pb, md, C = self.pb, self.md(), self.grpc.StatusCode
        self.assertTrue(self.oip.ServerLive(pb.ServerLiveRequest(), metadata=md).live)
        self.assertTrue(self.oip.ServerReady(pb.ServerReadyRequest(), metadata=md).ready)
        self.assertTrue(self.oip.ModelReady(pb.ModelReadyRequest(name="mamba"), metadata=md).ready)
        for bad in (pb.ModelReadyRequest(name="nope"), pb.ModelReadyRequest(name="mamba",
                                                                             version="2")):
            with self.assertRaises(self.grpc.RpcError) as caught:
                self.oip.ModelReady(bad, metadata=md)
            self.assertEqual(caught.exception.code(), C.NOT_FOUND)
        meta = self.oip.ServerMetadata(pb.ServerMetadataRequest(), metadata=md)
        self.assertEqual(meta.name, "attnserve")
        self.assertTrue({"model_configuration", "statistics", "sequence"} <= set(meta.extensions))
        mm = self.oip.ModelMetadata(pb.ModelMetadataRequest(name="standard"), metadata=md)
        self.assertEqual((mm.inputs[0].name, mm.inputs[0].datatype, list(mm.inputs[0].shape)),
                         ("input_ids", "INT64", [1, -1]))
        # The default models have a (byte-level) tokenizer: text in and out too.
        self.assertEqual([o.name for o in mm.outputs], ["logits", "output_ids", "text_output"])
        self.assertEqual([i.name for i in mm.inputs], ["input_ids", "text_input"])
        config = self.oip.ModelConfig(pb.ModelConfigRequest(name="mamba"), metadata=md).config
        self.assertTrue(config.HasField("sequence_batching"))
        self.assertTrue(config.model_transaction_policy.decoupled)
        linformer = self.oip.ModelConfig(pb.ModelConfigRequest(name="linformer"),
                                         metadata=md).config
        self.assertFalse(linformer.HasField("sequence_batching"))  # cannot stream
        stats = self.oip.ModelStatistics(pb.ModelStatisticsRequest(), metadata=md)
        self.assertEqual(len(stats.model_stats), 9)
        with self.assertRaises(self.grpc.RpcError) as caught:  # no credentials
            self.oip.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual(caught.exception.code(), C.UNAUTHENTICATED)
        # Liveness and readiness need none, as gRPC health checking (probes have no token).
        self.assertTrue(self.oip.ServerReady(pb.ServerReadyRequest()).ready)

    def test_infer_typed_and_raw_equal_attnserve_infer(self):
        np = self.np
        ids = [(i * 37 + 11) % 4096 for i in range(300)]
        for model in ("standard", "mamba", "linformer"):
            expected = self.attn_logits(model, ids)
            scale = float(np.abs(expected).max())
            for raw, dtype in ((False, "INT64"), (True, "INT64"), (False, "INT32"),
                               (True, "INT32")):
                r = self.oip.ModelInfer(self.request(model, ids, raw=raw, dtype=dtype),
                                        metadata=self.md(), timeout=60)
                self.assertEqual((r.model_name, r.model_version, r.id), (model, "1", "req-1"))
                self.assertEqual(bool(r.raw_output_contents), raw)
                got = self.output(r, "logits")
                self.assertEqual(got.shape, (1, 4096))
                self.assertLessEqual(float(np.abs(got[0] - expected).max()), 1e-5 * scale,
                                     (model, raw, dtype))
        # All positions: [1, L, vocab], its last row the last logits.
        r = self.request("standard", ids[:20])
        r.outputs.add(name="logits").parameters["positions"].string_param = "all"
        got = self.output(self.oip.ModelInfer(r, metadata=self.md(), timeout=60), "logits")
        self.assertEqual(got.shape, (1, 20, 4096))
        np.testing.assert_allclose(got[0, -1], self.attn_logits("standard", ids[:20]),
                                   atol=1e-5 * scale)

    def test_sequence_equals_attnserve_stream(self):
        np = self.np
        chunks = [[(i * 13 + k) % 4096 for i in range(n)] for k, n in ((1, 40), (2, 7), (3, 1),
                                                                        (4, 25))]
        for model, seq in (("mamba", 101), ("standard", "conversation-7")):
            expected, _ = self.attn_stream(model, chunks)
            for i, chunk in enumerate(chunks):
                flags = {"sequence_id": seq}
                if i == 0:
                    flags["sequence_start"] = True
                if i == len(chunks) - 1:
                    flags["sequence_end"] = True
                r = self.oip.ModelInfer(self.request(model, chunk, raw=i % 2 == 1, **flags),
                                        metadata=self.md(), timeout=60)
                got = self.output(r, "logits")[0]
                scale = float(np.abs(expected[i]).max())
                self.assertLessEqual(float(np.abs(got - expected[i]).max()), 1e-5 * scale,
                                     (model, i))
                self.assertEqual(r.parameters["attnserve_sequence_position"].int64_param,
                                 sum(len(c) for c in chunks[:i + 1]))
            # Ended: continuing it is an error, as Triton answers it.
            self.expect_error(self.grpc.StatusCode.INVALID_ARGUMENT, "sequence_start flag",
                              self.request(model, [1, 2], sequence_id=seq))

    def test_stream_generation_equals_attnserve_generate(self):
        apb, pb = self.apb, self.pb
        prompt = [(i * 7 + 3) % 4096 for i in range(33)]
        spec = apb.GenerateSpec(max_new_tokens=12, temperature=0.8, top_k=20, seed=5)
        _, expected = self.attn_stream("mamba", [prompt], generate=spec)
        self.assertEqual(len(expected), 12)
        req = self.request("mamba", prompt, raw=True, max_tokens=12, temperature=0.8, top_k=20,
                           seed=5)
        responses = list(self.oip.ModelStreamInfer(iter([req]), metadata=self.md(), timeout=60))
        self.assertEqual(len(responses), 13)
        self.assertTrue(all(not r.error_message for r in responses))
        final = [r.infer_response.parameters["triton_final_response"].bool_param
                 for r in responses]
        self.assertEqual(final, [False] * 12 + [True])
        tokens = [int(self.output(r.infer_response, "output_ids")[0, 0]) for r in responses[:12]]
        self.assertEqual(tokens, expected)
        self.assertEqual(self.output(responses[-1].infer_response, "logits").shape, (1, 4096))
        # The unary form returns them all at once; greedy with stop ends at the stop token.
        unary = self.oip.ModelInfer(self.request("mamba", prompt, max_tokens=12, temperature=0.8,
                                                 top_k=20, seed=5), metadata=self.md(), timeout=60)
        self.assertEqual(self.output(unary, "output_ids")[0].tolist(), expected)
        greedy = self.output(self.oip.ModelInfer(self.request("mamba", prompt, max_tokens=8),
                                                 metadata=self.md()), "output_ids")[0].tolist()
        stopped = self.output(self.oip.ModelInfer(
            self.request("mamba", prompt, max_tokens=8, stop_token_ids="%d" % greedy[2]),
            metadata=self.md()), "output_ids")[0].tolist()
        self.assertEqual(stopped, greedy[:greedy.index(greedy[2]) + 1])
        # The sampler's other controls (server/scheduler/token_sampler.h): logit_bias as a JSON
        # object forces a token; a nucleus with min_p and penalties still draws 8 tokens.
        forced = self.output(self.oip.ModelInfer(
            self.request("mamba", prompt, max_tokens=6, logit_bias='{"77": 100}'),
            metadata=self.md()), "output_ids")[0].tolist()
        self.assertEqual(forced, [77] * 6)
        sampled = self.output(self.oip.ModelInfer(
            self.request("mamba", prompt, max_tokens=8, temperature=1.0, top_p=0.9, min_p=0.05,
                         repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.5,
                         seed=3), metadata=self.md()), "output_ids")[0].tolist()
        self.assertEqual(len(sampled), 8)
        for bad in ('{"77": 100', '[1]', '{"x": 1}', '{"1": {"2": 3}}'):
            self.expect_error(self.grpc.StatusCode.INVALID_ARGUMENT, "parameter 'logit_bias'",
                              self.request("mamba", prompt, max_tokens=2, logit_bias=bad))
        self.expect_error(self.grpc.StatusCode.INVALID_ARGUMENT, "top_p",
                          self.request("mamba", prompt, max_tokens=2, top_p=1.5))
        # stream_interval 5: the same tokens in responses of 5, 5 and 2 ids, then the final one.
        grouped = list(self.oip.ModelStreamInfer(
            iter([self.request("mamba", prompt, raw=True, max_tokens=12, temperature=0.8,
                               top_k=20, seed=5, stream_interval=5)]),
            metadata=self.md(), timeout=60))
        self.assertEqual(len(grouped), 4)
        self.assertEqual([r.infer_response.parameters["triton_final_response"].bool_param
                          for r in grouped], [False, False, False, True])
        groups = [self.output(r.infer_response, "output_ids")[0].tolist() for r in grouped[:3]]
        self.assertEqual([len(g) for g in groups], [5, 5, 2])
        self.assertEqual(sum(groups, []), expected)
        # A bad request in a stream is an error response; the stream goes on.
        bad = self.request("mamba", prompt)
        bad.inputs[0].datatype = "FP32"
        responses = list(self.oip.ModelStreamInfer(
            iter([bad, self.request("mamba", prompt)]), metadata=self.md(), timeout=60))
        self.assertEqual(len(responses), 2)
        self.assertIn("input 'input_ids' has datatype 'FP32'", responses[0].error_message)
        self.assertEqual(responses[1].error_message, "")

    def test_perf_analyzer_sequence_mode_calls(self):
        # perf_analyzer (Triton's client backend) reads the model's metadata and config, takes
        # the server-side statistics before and after measuring, and in sequence mode sends
        # requests flagged sequence_id (uint64) / sequence_start / sequence_end, on a stream
        # for a decoupled model.
        # Its client (binary_tensor_data, as ServerMetadata's extensions allow) asks for every
        # output ModelMetadata lists, with raw contents.
        pb, np, md = self.pb, self.np, self.md()
        server = self.oip.ServerMetadata(pb.ServerMetadataRequest(), metadata=md)
        self.assertIn("statistics", server.extensions)
        meta = self.oip.ModelMetadata(pb.ModelMetadataRequest(name="rwkv"), metadata=md)
        outputs = [o.name for o in meta.outputs]
        self.assertIn("output_ids", outputs)
        config = self.oip.ModelConfig(pb.ModelConfigRequest(name="rwkv"), metadata=md).config
        self.assertTrue(config.HasField("sequence_batching"))
        before = self.oip.ModelStatistics(pb.ModelStatisticsRequest(name="rwkv"),
                                          metadata=md).model_stats[0]
        requests = []
        for seq in (9001, 9002):
            for step in range(3):
                r = self.request("rwkv", list(range(1 + step, 17 + step)), raw=True)
                for name in outputs:
                    r.outputs.add(name=name).parameters["binary_data"].bool_param = True
                r.parameters["sequence_id"].uint64_param = seq
                r.parameters["sequence_start"].bool_param = step == 0
                r.parameters["sequence_end"].bool_param = step == 2
                requests.append(r)
        responses = list(self.oip.ModelStreamInfer(iter(requests), metadata=md, timeout=60))
        self.assertEqual([r.error_message for r in responses], [""] * 6)
        for r in responses:
            got = r.infer_response
            self.assertEqual([o.name for o in got.outputs], outputs)
            self.assertEqual(self.output(got, "logits").shape[0], 1)
            self.assertEqual(self.output(got, "output_ids").shape, (1, 0))
        after = self.oip.ModelStatistics(pb.ModelStatisticsRequest(name="rwkv"),
                                         metadata=md).model_stats[0]
        s0, s1 = before.inference_stats, after.inference_stats
        self.assertEqual(after.inference_count - before.inference_count, 6)
        self.assertEqual(after.execution_count - before.execution_count, 6)
        self.assertEqual(s1.success.count - s0.success.count, 6)
        self.assertEqual(s1.queue.count - s0.queue.count, 6)
        # perf_analyzer's check (inference_profiler.cc): "Server side statistics compute counts
        # must be the same".
        for part in ("compute_input", "compute_infer", "compute_output"):
            self.assertEqual(getattr(s1, part).count - getattr(s0, part).count, 6, part)
        self.assertEqual(s1.fail.count, s0.fail.count)
        parts_ns = sum(getattr(s1, p).ns - getattr(s0, p).ns
                       for p in ("compute_input", "queue", "compute_infer", "compute_output"))
        self.assertLessEqual(parts_ns, s1.success.ns - s0.success.ns)
        self.assertGreater(s1.compute_infer.ns - s0.compute_infer.ns, 0)
        self.assertGreater(s1.compute_input.ns - s0.compute_input.ns, 0)
        self.assertGreater(s1.compute_output.ns - s0.compute_output.ns, 0)
        self.assertGreater(after.last_inference, 0)
        # Both sequences ended: nothing of theirs is left in the session table.
        listed = self.attn.ListSessions(self.apb.ListSessionsRequest(model="rwkv"), metadata=md)
        self.assertEqual(listed.total, 0)
        del np

    def test_malformed_requests(self):
        C, pb, np = self.grpc.StatusCode, self.pb, self.np
        ids = [1, 2, 3]
        r = self.request("mamba", ids)
        r.inputs[0].datatype = "FP32"
        self.expect_error(C.INVALID_ARGUMENT, "expected INT64 or INT32", r)
        r = self.request("mamba", ids)
        r.inputs[0].shape[:] = [1, 5]
        self.expect_error(C.INVALID_ARGUMENT, "holds 5 elements, its contents hold 3", r)
        r = self.request("mamba", ids)
        r.inputs[0].shape[:] = [3]
        self.expect_error(C.INVALID_ARGUMENT, "expected [1, L]", r)
        r = self.request("mamba", ids, raw=True)
        r.raw_input_contents[0] = r.raw_input_contents[0][:-3]
        self.expect_error(C.INVALID_ARGUMENT, "needs 24 bytes of raw_input_contents, got 21", r)
        r = self.request("mamba", ids)
        r.inputs[0].shape[:] = [1, 1 << 62]
        self.expect_error(C.RESOURCE_EXHAUSTED, "--max_tokens_per_request", r)
        r = self.request("mamba", ids)
        r.inputs[0].shape[:] = [1, -3]
        self.expect_error(C.INVALID_ARGUMENT, "dimensions must be >= 0", r)
        r = self.request("mamba", ids)
        r.outputs.add(name="probabilities")
        self.expect_error(C.INVALID_ARGUMENT, "unknown output 'probabilities'", r)
        r = self.request("mamba", ids)
        r.inputs.add(name="attention_mask", datatype="INT64", shape=[1, 3])
        self.expect_error(C.INVALID_ARGUMENT, "unknown input 'attention_mask'", r)
        self.expect_error(C.NOT_FOUND, "unknown model 'nope'", self.request("nope", ids))
        r = self.request("mamba", ids)
        r.model_version = "7"
        self.expect_error(C.NOT_FOUND, "has no version '7'", r)
        # BYTES with a bad length prefix: declares 100 bytes, 3 follow.
        r = pb.ModelInferRequest(model_name="mamba")
        r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
        r.raw_input_contents.append((100).to_bytes(4, "little") + b"abc")
        self.expect_error(C.INVALID_ARGUMENT, "declares 100 bytes, but only 3 remain", r)
        r.raw_input_contents[0] = b"\x01\x00"
        self.expect_error(C.INVALID_ARGUMENT, "truncated 4-byte length prefix", r)
        r.raw_input_contents[0] = (4).to_bytes(4, "little") + b"\xff\xfe\xfd\xfc"
        self.expect_error(C.INVALID_ARGUMENT, "UTF-8", r)
        r = self.request("mamba", ids, raw=True)
        r.inputs[0].contents.int64_contents.extend(ids)
        self.expect_error(C.INVALID_ARGUMENT, "typed contents and raw_input_contents", r)
        r = self.request("mamba", ids, raw=True)
        r.raw_input_contents.append(b"")
        self.expect_error(C.INVALID_ARGUMENT, "raw_input_contents has 2 entries for 1 inputs", r)
        self.expect_error(C.INVALID_ARGUMENT, "token", self.request("mamba", [5000]))
        self.expect_error(C.INVALID_ARGUMENT, "parameter 'max_tokens'",
                          self.request("mamba", ids, max_tokens=100000))
        self.expect_error(C.INVALID_ARGUMENT, "parameter 'stream_interval'",
                          self.request("mamba", ids, max_tokens=4, stream_interval=-1))
        self.expect_error(C.INVALID_ARGUMENT, "sequence_start or sequence_end without",
                          self.request("mamba", ids, sequence_start=True))
        self.expect_error(C.FAILED_PRECONDITION, "",
                          self.request("linformer", ids, sequence_id=5, sequence_start=True))
        # output_ids without max_tokens: nothing generated, an empty [1, 0] (not an error).
        r = self.request("mamba", ids)
        r.outputs.add(name="output_ids")
        got = self.oip.ModelInfer(r, metadata=self.md(), timeout=30)
        self.assertEqual(self.output(got, "output_ids").shape, (1, 0))
        # The server is still up and answers.
        got = self.oip.ModelInfer(self.request("mamba", ids), metadata=self.md(), timeout=30)
        self.assertEqual(self.output(got, "logits").shape, (1, 4096))
        del np

    def test_text_input_and_output(self):
        # Through the model's tokenizer (the default models' byte-level one), as AttnServe's.
        pb, np, md = self.pb, self.np, self.md()
        text = "Hello, world"
        ids = list(self.attn.Tokenize(self.apb.TokenizeRequest(model="mamba", text=text.encode()),
                                      metadata=md).tokens)

        def text_request(raw, **params):
            r = self.request("mamba", [0], **params)
            del r.inputs[:]
            r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
            if raw:
                r.raw_input_contents.append(len(text).to_bytes(4, "little") + text.encode())
            else:
                r.inputs[0].contents.bytes_contents.append(text.encode())
            return r

        by_text = self.oip.ModelInfer(text_request(False), metadata=md)
        by_ids = self.oip.ModelInfer(self.request("mamba", ids), metadata=md)
        np.testing.assert_allclose(self.output(by_text, "logits"), self.output(by_ids, "logits"),
                                   atol=1e-5)
        # Generation: text_output is the text of output_ids (the default outputs of a text
        # prompt), and a stream's pieces make the same text.
        r = self.oip.ModelInfer(text_request(True, max_tokens=12), metadata=md)
        self.assertEqual([o.name for o in r.outputs], ["logits", "output_ids", "text_output"])
        generated = self.output(r, "output_ids")[0].tolist()
        i = [o.name for o in r.outputs].index("text_output")
        whole = r.raw_output_contents[i]
        self.assertEqual(int.from_bytes(whole[:4], "little"), len(whole) - 4)
        pieces = []
        for m in self.oip.ModelStreamInfer(iter([text_request(False, max_tokens=12)]),
                                           metadata=md, timeout=60):
            resp = m.infer_response
            if not resp.parameters["triton_final_response"].bool_param:
                [t] = [o for o in resp.outputs if o.name == "text_output"]
                pieces.append(t.contents.bytes_contents[0])
        self.assertEqual(len(pieces), len(generated))
        self.assertEqual(b"".join(pieces), whole[4:])
        # In groups of 4 the pieces make the same text.
        grouped = []
        for m in self.oip.ModelStreamInfer(
                iter([text_request(False, max_tokens=12, stream_interval=4)]), metadata=md,
                timeout=60):
            resp = m.infer_response
            if not resp.parameters["triton_final_response"].bool_param:
                [t] = [o for o in resp.outputs if o.name == "text_output"]
                grouped.append(t.contents.bytes_contents[0])
        self.assertEqual(len(grouped), 3)
        self.assertEqual(b"".join(grouped), whole[4:])
        detok = self.attn.Detokenize(self.apb.DetokenizeRequest(model="mamba", tokens=[
            t for t in generated if t < 256]), metadata=md)
        self.assertEqual(whole[4:].decode(), detok.text)
        # A stop string ends generation before it.
        if len(whole) > 8:
            stop = whole[6:8].decode(errors="ignore")
            if stop:
                s = self.oip.ModelInfer(text_request(False, max_tokens=12, stop=stop),
                                        metadata=md)
                j = [o.name for o in s.outputs].index("text_output")
                got = s.outputs[j].contents.bytes_contents[0].decode()
                self.assertNotIn(stop, got)
                self.assertTrue(whole[4:].decode().startswith(got))
        meta = self.oip.ModelMetadata(pb.ModelMetadataRequest(name="mamba"), metadata=md)
        self.assertIn("text_input", [t.name for t in meta.inputs])

    def test_sequences_belong_to_their_principal_and_survive_a_restart(self):
        np, C = self.np, self.grpc.StatusCode
        chunks = [[(i * 29 + k) % 4096 for i in range(n)] for k, n in ((1, 30), (2, 9), (3, 5))]
        expected, _ = self.attn_stream("linear", chunks)
        first = self.oip.ModelInfer(self.request("linear", chunks[0], sequence_id="shared-name",
                                                 sequence_start=True), metadata=self.md("alice"))
        # Bob's sequence of the same name is another session: it was never started.
        self.expect_error(C.INVALID_ARGUMENT, "sequence_start flag",
                          self.request("linear", chunks[1], sequence_id="shared-name"), who="bob")
        self.assertLessEqual(float(np.abs(self.output(first, "logits")[0] - expected[0]).max()),
                             1e-5 * float(np.abs(expected[0]).max()))
        # SIGTERM saves the session to the store; a new process continues the sequence.
        self.__class__.channel.close()
        self.server.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.server.proc.wait(30), 0)
        self.server.pump.join(5)
        self.server.proc.stdout.close()
        type(self).server = self.start_server()
        for i in (1, 2):
            flags = {"sequence_id": "shared-name"}
            if i == 2:
                flags["sequence_end"] = True
            r = self.oip.ModelInfer(self.request("linear", chunks[i], **flags),
                                    metadata=self.md("alice"), timeout=60)
            got = self.output(r, "logits")[0]
            self.assertLessEqual(float(np.abs(got - expected[i]).max()),
                                 1e-5 * float(np.abs(expected[i]).max()), i)

    def test_metrics_carry_the_protocol(self):
        port = None
        for line in self.server.lines:
            if line.startswith("metrics on "):
                port = int(line.split(":")[-1].split("/")[0])
        if port is None:
            self.skipTest("no metrics port in the server's log")
        self.oip.ModelInfer(self.request("sparse", [1, 2, 3]), metadata=self.md())
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
        lines = text.decode().splitlines()
        self.assertTrue(any(l.startswith("attnserve_requests_total{") and 'protocol="oip"' in l
                            and 'rpc="ModelInfer"' in l and 'variant="sparse"' in l
                            and 'code="OK"' in l and l.endswith(" 1") for l in lines))
        self.assertTrue(any('protocol="attnserve"' in l for l in lines))


if __name__ == "__main__":
    pct.run_tests(sys.modules[__name__])
