#!/usr/bin/python3
"""Text in, text out over real gRPC (issue #22): a model folder with the GPT-NeoX
tokenizer.json, a default model exported with its byte-level tokenizer, and one without a
tokenizer, served by attnserve-server on loopback to a Python client.

Checks: ListModels/GetModel describe each tokenizer; Tokenize/Detokenize give Hugging Face's
ids ("Hello World" -> 12092 3645); text in equals its ids in (the same logits); streamed text
pieces concatenate to the decoded ids, and never hold half a character; a stop string that
straddles tokens ends generation and is not returned; stop tokens (given, and the model's
end-of-text from generation_config.json) end it; bad input gets the documented status. (Large
texts of other clients: request_fairness_test.py.)

Usage: text_test.py --build-dir BUILD --source-dir SOURCE
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as common  # noqa: E402

NEOX_VOCAB = 50280  # the model's rows; the tokenizer has 50277 ids


def neox_tokenizer(source_dir):
    for d in (os.path.join(source_dir, "..", "shared"), "/work/shared"):
        p = os.path.join(d, "tokenizers", "gpt-neox-20b", "tokenizer.json")
        if os.path.exists(p):
            return p
    raise RuntimeError("../shared/tokenizers/gpt-neox-20b/tokenizer.json is missing")


def write_attention_folder(out, vocab, seed, tokenizer=None, eos=None, layers=("standard",) * 2,
                           extra_config=None):
    """A small attention model (attnserve's schema, causal standard layers by default) with
    random weights; linformer layers get E and F of extra_config's linformer_max_len rows."""
    import random
    rng = random.Random(seed)
    d, m = 32, 48
    extra_config = extra_config or {}
    shapes = {"backbone.embeddings.weight": (vocab, d)}
    for i, layer in enumerate(layers):
        pre = f"backbone.layers.{i}."
        shapes[pre + "norm.weight"] = (d,)
        for name in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            shapes[pre + f"mixer.{name}.weight"] = (d, d)
        if layer == "linformer":
            for name in ["E", "F"]:
                shapes[pre + f"mixer.{name}"] = (extra_config["linformer_max_len"],
                                                  extra_config["linformer_k"])
        shapes[pre + "mlp_norm.weight"] = (d,)
        shapes[pre + "mlp.gate_proj.weight"] = (m, d)
        shapes[pre + "mlp.up_proj.weight"] = (m, d)
        shapes[pre + "mlp.down_proj.weight"] = (d, m)
    shapes["backbone.norm_f.weight"] = (d,)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        n = math.prod(shape)
        if name.endswith("norm.weight") or name.endswith("norm_f.weight"):
            values = [1.0] * n
        else:
            scale = 1.0 / math.sqrt(shape[-1]) if len(shape) == 2 and "embeddings" not in name else 1.0
            values = [rng.gauss(0, 1) * scale for _ in range(n)]
        blob = struct.pack("<%df" % n, *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    os.makedirs(out, exist_ok=True)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    cfg = {"model_type": "attnserve", "vocab_size": vocab, "hidden_size": d, "num_heads": 2,
           "layers": list(layers), "intermediate_size": m, "norm_epsilon": 1e-6,
           "tie_word_embeddings": True, "max_sequence_length": 2048, **extra_config}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    if tokenizer:
        shutil.copy(tokenizer, os.path.join(out, "tokenizer.json"))
    if eos is not None:
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump({"eos_token_id": eos}, f)


def open_sequence(t):
    """Whether bytes `t` are a valid start of a UTF-8 sequence longer than they are."""
    lead = t[0]
    if 0xC2 <= lead <= 0xDF:
        n, lo, hi = 2, 0x80, 0xBF
    elif 0xE0 <= lead <= 0xEF:
        n, lo, hi = 3, 0xA0 if lead == 0xE0 else 0x80, 0x9F if lead == 0xED else 0xBF
    elif 0xF0 <= lead <= 0xF4:
        n, lo, hi = 4, 0x90 if lead == 0xF0 else 0x80, 0x8F if lead == 0xF4 else 0xBF
    else:
        return False
    if len(t) >= n:
        return False
    return (len(t) < 2 or lo <= t[1] <= hi) and all(0x80 <= c <= 0xBF for c in t[2:])


def complete_prefix(b):
    """Bytes of `b` up to an unfinished (still completable) UTF-8 sequence at its end."""
    for i in range(max(0, len(b) - 3), len(b)):
        if open_sequence(b[i:]):
            return i
    return len(b)


def prepare_class(cls, prefix):
    """What a text test class starts from: a temporary folder with the gRPC stubs (cls.tmp),
    the grpc module and stubs (cls.grpc, cls.pb, cls.pb_grpc), the server binary and a model
    repository folder to fill (cls.repo)."""
    cls.tmp = tempfile.mkdtemp(prefix=prefix)
    common.generate_stubs(common.ARGS.source_dir, cls.tmp)
    import grpc
    from attnserve.v1 import inference_pb2, inference_pb2_grpc
    cls.grpc, cls.pb, cls.pb_grpc = grpc, inference_pb2, inference_pb2_grpc
    build = os.path.abspath(common.ARGS.build_dir)
    cls.binary = os.path.join(build, "server", "attnserve-server")
    cls.repo = os.path.join(cls.tmp, "models")


class TextTest(common.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        prepare_class(cls, "attnserve_text_")
        build = os.path.abspath(common.ARGS.build_dir)
        cls.neox_json = neox_tokenizer(common.ARGS.source_dir)
        write_attention_folder(os.path.join(cls.repo, "neox"), NEOX_VOCAB, 1, cls.neox_json, eos=0)
        write_attention_folder(os.path.join(cls.repo, "ids_only"), 300, 2)
        # A folder with only SentencePiece's tokenizer.model (bytes attnserve never parses).
        write_attention_folder(os.path.join(cls.repo, "sentencepiece_only"), 300, 3)
        with open(os.path.join(cls.repo, "sentencepiece_only", "tokenizer.model"), "wb") as f:
            f.write(b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
        subprocess.run([os.path.join(build, "server", "model", "attnserve-export-model"),
                        "--models=mamba", "--out=" + cls.repo], check=True, capture_output=True)
        cls.server = common.Server(cls.binary, "--model_repository=" + cls.repo,
                                   "--policy=neox:2047", "--max_text_bytes=300000")
        cls.channel = cls.grpc.insecure_channel(cls.server.target)
        cls.grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = cls.pb_grpc.AttnServeStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- helpers ----

    def code(self, fn):
        with self.assertRaises(self.grpc.RpcError) as e:
            fn()
        return e.exception.code(), e.exception.details()

    def stream(self, model, append, stub=None):
        pb = self.pb
        requests = [pb.StreamRequest(open=pb.StreamOpen(model=model)),
                    pb.StreamRequest(append=append), pb.StreamRequest(close=pb.StreamClose())]
        out = list((stub or self.stub).Stream(iter(requests), timeout=120))
        pieces = [r.generated for r in out if r.WhichOneof("kind") == "generated"]
        result = next(r.result for r in out if r.WhichOneof("kind") == "result")
        return pieces, result

    def generate(self, model, text, n, stub=None, **spec):
        pb = self.pb
        append = pb.StreamAppend(sequence_number=1, text=text.encode(),
                                 generate=pb.GenerateSpec(max_new_tokens=n, **spec))
        return self.stream(model, append, stub)

    # ---- tests ----

    def test_models_describe_their_tokenizers(self):
        models = {m.name: m for m in self.stub.ListModels(self.pb.ListModelsRequest(), timeout=30).models}
        self.assertTrue(models["neox"].tokenizer.present)
        self.assertEqual(models["neox"].tokenizer.vocab_size, 50277)
        self.assertEqual(list(models["neox"].tokenizer.end_of_text_ids), [0])
        self.assertIn("<|endoftext|>", models["neox"].tokenizer.special_tokens)
        self.assertTrue(models["mamba"].tokenizer.present)
        self.assertEqual(models["mamba"].tokenizer.vocab_size, 257)
        self.assertEqual(list(models["mamba"].tokenizer.end_of_text_ids), [256])
        self.assertFalse(models["ids_only"].tokenizer.present)

    def test_tokenize_and_detokenize(self):
        pb = self.pb
        r = self.stub.Tokenize(pb.TokenizeRequest(model="neox", text="Hello World".encode()), timeout=30)
        self.assertEqual(list(r.tokens), [12092, 3645])
        self.assertEqual(r.count, 2)
        text = "naïve café — 日本語 \U0001f44d\U0001f3fd <|endoftext|>"
        ids = list(self.stub.Tokenize(pb.TokenizeRequest(model="neox", text=text.encode()), timeout=30).tokens)
        self.assertEqual(ids[-1], 0)
        d = self.stub.Detokenize(pb.DetokenizeRequest(model="neox", tokens=ids), timeout=30)
        self.assertEqual(d.text, text)
        d = self.stub.Detokenize(pb.DetokenizeRequest(model="neox", tokens=ids, skip_special_tokens=True), timeout=30)
        self.assertEqual(d.text, text[: -len("<|endoftext|>")])
        # Bytes that do not form a character come out as U+FFFD, never as invalid UTF-8.
        byte_ids = list(self.stub.Tokenize(pb.TokenizeRequest(model="mamba", text="é".encode()), timeout=30).tokens)
        self.assertEqual(byte_ids, [0xC3, 0xA9])
        d = self.stub.Detokenize(pb.DetokenizeRequest(model="mamba", tokens=byte_ids[:1]), timeout=30)
        self.assertEqual(d.text, "\ufffd")

    def test_text_in_equals_its_ids_in(self):
        pb = self.pb
        text = "The quick brown fox jumps over the lazy dog. Ünïcödé, 中文, and numbers 12345."
        ids = list(self.stub.Tokenize(pb.TokenizeRequest(model="neox", text=text.encode()), timeout=30).tokens)
        for model in ("neox", "mamba", "auto"):
            by_text = self.stub.Infer(pb.InferRequest(model=model, text=text.encode()), timeout=60)
            if model == "mamba":
                ids_m = list(self.stub.Tokenize(pb.TokenizeRequest(model="mamba", text=text.encode()), timeout=30).tokens)
                by_ids = self.stub.Infer(pb.InferRequest(model=model, tokens=ids_m), timeout=60)
            else:
                by_ids = self.stub.Infer(pb.InferRequest(model=model, tokens=ids), timeout=60)
            self.assertEqual(by_text.model, by_ids.model)
            self.assertEqual(by_text.outputs.tensor.float_data, by_ids.outputs.tensor.float_data, model)
        # Appends as text continue a session exactly as their ids do.
        halves = [text[:30], text[30:]]
        a = pb.StreamAppend(sequence_number=1, text=halves[0].encode())
        _, first = self.stream("neox", a)
        self.assertEqual(list(first.prompt_tokens),
                         list(self.stub.Tokenize(pb.TokenizeRequest(model="neox", text=halves[0].encode()), timeout=30).tokens))

    def test_streamed_pieces_concatenate_to_the_decoded_ids(self):
        pb = self.pb
        for model in ("neox", "mamba"):
            pieces, result = self.generate(model, "Once upon a time", 40, temperature=1.0, seed=7,
                                           ignore_eos=True)
            ids = [p.token for p in pieces]
            self.assertEqual(ids, list(result.generated_tokens))
            self.assertEqual(result.finish_reason, pb.FINISH_REASON_LENGTH)
            decoded = self.stub.Detokenize(pb.DetokenizeRequest(model=model, tokens=ids, skip_special_tokens=True), timeout=30).text
            self.assertEqual("".join(p.text for p in pieces), decoded, model)
            self.assertEqual(result.generated_text, decoded, model)

    def test_a_character_split_across_tokens_is_never_emitted_half(self):
        # The byte-level model: every token is one byte, so multi-byte characters always span
        # tokens. Each piece must be exactly what the bytes so far make final.
        pb = self.pb
        pieces, result = self.generate("mamba", "bytes: \u00e9\u4e2d\U0001f600", 64, temperature=1.5,
                                       seed=3, ignore_eos=True)
        data, emitted, split_seen = b"", "", 0
        for p in pieces:
            data += bytes([p.token]) if p.token < 256 else b""
            cut = complete_prefix(data)
            expected = data[:cut].decode("utf-8", "replace")
            if p.index + 1 == len(pieces):  # the last one flushes what waits
                expected = data.decode("utf-8", "replace")
            self.assertEqual(emitted + p.text, expected, f"token {p.index}")
            split_seen += cut < len(data)
            emitted += p.text
        self.assertGreater(split_seen, 0, "no character spanned tokens: the check checked nothing")

    def test_stop_string_across_tokens(self):
        pb = self.pb
        pieces, result = self.generate("neox", "The answer is", 40, temperature=1.0, seed=11, ignore_eos=True)
        texts = [p.text for p in pieces]
        # A stop string made of the end of one piece and the start of the next.
        k = next(i for i in range(5, len(texts) - 1) if texts[i] and texts[i + 1])
        stop = texts[k][-1] + texts[k + 1][0]
        whole = "".join(texts)
        prefix = whole[: whole.find(stop)]
        pieces2, result2 = self.generate("neox", "The answer is", 40, temperature=1.0, seed=11,
                                         ignore_eos=True, stop=[stop, "never appears \u2603"])
        self.assertEqual(result2.finish_reason, pb.FINISH_REASON_STOP_STRING)
        self.assertEqual(result2.stop_string, stop)
        self.assertEqual(result2.generated_text, prefix)
        self.assertEqual("".join(p.text for p in pieces2), prefix)
        self.assertNotIn(stop, result2.generated_text)
        # It ended at the token that completed the stop string.
        self.assertLessEqual(len(result2.generated_tokens), k + 2)
        self.assertEqual(list(result2.generated_tokens), [p.token for p in pieces[: len(result2.generated_tokens)]])

    def test_stop_tokens_end_generation(self):
        pb = self.pb
        pieces, result = self.generate("neox", "Stop here", 30, temperature=1.0, seed=5, ignore_eos=True)
        stop_id = pieces[6].token
        j = next(i for i, p in enumerate(pieces) if p.token == stop_id)
        pieces2, result2 = self.generate("neox", "Stop here", 30, temperature=1.0, seed=5,
                                         stop_token_ids=[stop_id])
        self.assertEqual(result2.finish_reason, pb.FINISH_REASON_STOP_TOKEN)
        self.assertEqual(list(result2.generated_tokens), [p.token for p in pieces[: j + 1]])
        before = self.stub.Detokenize(pb.DetokenizeRequest(model="neox", tokens=[p.token for p in pieces[:j]],
                                                           skip_special_tokens=True), timeout=30).text
        self.assertEqual(result2.generated_text, before)  # the stop token's text is not returned

    def test_the_models_end_of_text_ends_generation(self):
        # A folder whose generation_config.json names, as end-of-text, a token the greedy
        # generation makes: a second server reads it.
        pb = self.pb
        pieces, _ = self.generate("neox", "Hello", 20, ignore_eos=True)
        eos = pieces[4].token
        j = next(i for i, p in enumerate(pieces) if p.token == eos)
        repo = os.path.join(self.tmp, "eos_models")
        write_attention_folder(os.path.join(repo, "neox"), NEOX_VOCAB, 1, self.neox_json, eos=[eos, 1])
        server = common.Server(self.binary, "--model_repository=" + repo, "--policy=neox:2047")
        self.servers.append(server)
        channel = self.grpc.insecure_channel(server.target)
        self.channels.append(channel)
        stub = self.pb_grpc.AttnServeStub(channel)
        pieces2, result2 = self.generate("neox", "Hello", 20, stub=stub)
        self.assertEqual(result2.finish_reason, pb.FINISH_REASON_STOP_TOKEN)
        self.assertEqual(list(result2.generated_tokens), [p.token for p in pieces[: j + 1]])

    def test_bad_input(self):
        pb, C = self.pb, self.grpc.StatusCode
        code, msg = self.code(lambda: self.stub.Infer(pb.InferRequest(model="ids_only", text=b"hi"), timeout=30))
        self.assertEqual(code, C.FAILED_PRECONDITION)
        self.assertIn("model 'ids_only' has no tokenizer (no tokenizer.json in its folder)", msg)
        code, msg = self.code(lambda: self.stub.Infer(
            pb.InferRequest(model="sentencepiece_only", text=b"hi"), timeout=30))
        self.assertEqual(code, C.FAILED_PRECONDITION)
        self.assertIn("only a SentencePiece tokenizer.model, which attnserve does not read", msg)
        self.assertIn("tokenizer.json", msg)
        code, msg = self.code(lambda: self.stub.Infer(pb.InferRequest(model="neox", text=b"abc\xc3("), timeout=30))
        self.assertEqual((code, msg), (C.INVALID_ARGUMENT, "text is not valid UTF-8 at byte 3"))
        code, msg = self.code(lambda: self.stub.Infer(pb.InferRequest(model="neox", text=b"a", tokens=[1]), timeout=30))
        self.assertEqual(code, C.INVALID_ARGUMENT)
        code, msg = self.code(lambda: self.stub.Tokenize(pb.TokenizeRequest(model="neox", text=b"x" * 300001), timeout=30))
        self.assertEqual(code, C.RESOURCE_EXHAUSTED)
        self.assertIn("--max_text_bytes=300000", msg)
        code, _ = self.code(lambda: self.stub.Tokenize(pb.TokenizeRequest(model="auto", text=b"x"), timeout=30))
        self.assertEqual(code, C.INVALID_ARGUMENT)
        code, _ = self.code(lambda: self.stub.Detokenize(pb.DetokenizeRequest(model="neox", tokens=[NEOX_VOCAB]), timeout=30))
        self.assertEqual(code, C.INVALID_ARGUMENT)
        # Stop strings need a tokenizer; an empty one is refused.
        with self.assertRaises(self.grpc.RpcError) as e:
            self.stream("ids_only", pb.StreamAppend(sequence_number=1, tokens=[1, 2],
                                                    generate=pb.GenerateSpec(max_new_tokens=2, stop=["x"])))
        self.assertEqual(e.exception.code(), C.FAILED_PRECONDITION)
        with self.assertRaises(self.grpc.RpcError) as e:
            self.stream("neox", pb.StreamAppend(sequence_number=1, text=b"hi",
                                                generate=pb.GenerateSpec(max_new_tokens=2, stop=[""])))
        self.assertEqual((e.exception.code(), e.exception.details()), (C.INVALID_ARGUMENT, "generate.stop[0] is empty"))
        # The session survives a bad append: the next good one still applies.


if __name__ == "__main__":
    common.run_tests(sys.modules[__name__])
