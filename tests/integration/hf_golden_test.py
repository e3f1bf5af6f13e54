#!/usr/bin/python3
"""Hugging Face folders of trained-transformer architectures, loaded unchanged and served over
gRPC, against transformers v4.47.1's own float64 logits (issue #49).

The folders in tests/golden/hf/ were written by ../shared/hf_reference/make_ref.py
(tests/golden/hf/make.sh says how): LlamaForCausalLM with GQA, MQA, a head_dim of its own with
attention and MLP biases, and each rope_scaling type (linear, dynamic, yarn, longrope, llama3)
on a prompt longer than the length the scaling starts from; MistralForCausalLM with a sliding
window of 8 < the 37-token prompt; Qwen2ForCausalLM with q/k/v biases and tied embeddings;
FalconMambaForCausalLM (Mamba-1 with weightless RMSNorms of dt, B and C); Mamba2ForCausalLM with
one group (transformers v4.48.0's float64 logits) and with four groups and chunks of 5 (llama.cpp's
logits: transformers' grouped Mamba-2 is wrong before v4.52; tests/golden/hf/llamacpp_reference.py);
JambaForCausalLM and ZambaForCausalLM (transformers' own); Zamba2ForCausalLM with one shared
block, with two used in turn (every tied copy stored) and without positions or attention adapters
(tests/golden/zamba2_reference.py: a float64 port of upstream's modeling_zamba2.py, which
transformers 4.47.1 lacks); GraniteMoeHybridForCausalLM (Granite-4.0-H: Mamba-2, attention without
positions, 4 experts top-2 beside a shared MLP on every layer, the four multipliers; llama.cpp's
logits, ../shared/hf_reference/golden_2025_hybrids/).

For each: logits within 1e-4 of max |logit| in float32 for the whole prompt (Infer), for the
prompt in chunks and for single steps (a session continued by Infer), the 8 greedy tokens of
transformers' generate() (a Stream generating); a fork, a prefix-cache hit and a snapshot round
trip at positions > 0 give the same logits; the KV cache holds 2 x layers x KV heads x head_dim
x 4 bytes a token; a folder split into shards with model.safetensors.index.json loads the same.

"dynamic" (max_position_embeddings 40) rotates each token with the frequencies of its own
position + 1, transformers' generate-step path (kernels/common/rotary_positions.h): its 37-token
prompt is within 40, and generate()'s steps at positions 40-43 are checked logit by logit
(greedy_step_logits.npy) with every other case's.

Usage: hf_golden_test.py --build-dir BUILD --source-dir SOURCE
"""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as common  # noqa: E402

TOLERANCE = 1e-4
CHUNKS = (5, 11, 1, 7)  # then the rest, then single steps


def golden_dir():
    return os.path.join(os.path.abspath(common.ARGS.source_dir), "tests", "golden", "hf")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def write_shards(src, dst, parts=2):
    """dst: src's config and tokenizer files, its weights in `parts` shards and an index."""
    os.makedirs(dst)
    for name in os.listdir(src):
        if name.endswith(".json") and name != "reference.json":
            shutil.copy(os.path.join(src, name), dst)
    header, blob = read_safetensors(os.path.join(src, "model.safetensors"))
    names = sorted(k for k in header if k != "__metadata__")
    weight_map = {}
    for p in range(parts):
        mine = names[p::parts]
        shard = "model-%05d-of-%05d.safetensors" % (p + 1, parts)
        out_header, chunks, offset = {}, [], 0
        for name in mine:
            begin, end = header[name]["data_offsets"]
            out_header[name] = dict(header[name], data_offsets=[offset, offset + end - begin])
            chunks.append(blob[begin:end])
            offset += end - begin
            weight_map[name] = shard
        raw = json.dumps(out_header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(os.path.join(dst, shard), "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + b"".join(chunks))
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": len(blob)}, "weight_map": weight_map}, f)


MAMBA_SSM = ("mamba", "mamba2", "mamba2_groups4")


def write_mamba_ssm(src, dst):
    """dst: src (a Mamba or Mamba-2 Hugging Face folder) as mamba_ssm saves it: its config.json
    (d_model, n_layer, ssm_cfg) and torch.save's pytorch_model.bin, with the embedding spelt
    backbone.embedding and the tied lm_head stored as the same tensor, as MambaLMHeadModel's
    state_dict has it."""
    import torch
    os.makedirs(dst)
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    header, blob = read_safetensors(os.path.join(src, "model.safetensors"))
    state = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        t = torch.frombuffer(bytearray(blob[begin:end]), dtype=torch.float32)
        state[name.replace("backbone.embeddings.", "backbone.embedding.")] = \
            t.reshape(entry["shape"]).clone()
    tied = c.get("tie_word_embeddings", c["model_type"] == "mamba")
    if tied:
        state["lm_head.weight"] = state["backbone.embedding.weight"]
    if c["model_type"] == "mamba2":
        ssm = {"layer": "Mamba2", "d_state": c["state_size"], "d_conv": c["conv_kernel"],
               "expand": c["expand"], "headdim": c["head_dim"], "ngroups": c["n_groups"],
               "chunk_size": c["chunk_size"]}
    else:
        ssm = {"layer": "Mamba1", "d_state": c["state_size"], "d_conv": c["conv_kernel"],
               "expand": c["expand"], "dt_rank": c["time_step_rank"]}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump({"d_model": c["hidden_size"], "d_intermediate": 0,
                   "n_layer": c["num_hidden_layers"], "vocab_size": c["vocab_size"],
                   "ssm_cfg": ssm, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
                   "residual_in_fp32": True, "fused_add_norm": True,
                   "pad_vocab_size_multiple": 8, "tie_embeddings": tied}, f)
    torch.save(state, os.path.join(dst, "pytorch_model.bin"))


class HfGoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_hf_golden_")
        common.generate_stubs(common.ARGS.source_dir, cls.tmp)
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        cls.grpc, cls.pb = grpc, inference_pb2
        cls.cases = sorted(d for d in os.listdir(golden_dir())
                           if os.path.isfile(os.path.join(golden_dir(), d, "reference.json")))
        repo = os.path.join(cls.tmp, "models")
        os.makedirs(repo)
        for case in cls.cases:
            os.symlink(os.path.join(golden_dir(), case), os.path.join(repo, case))
        write_shards(os.path.join(golden_dir(), "llama_gqa"), os.path.join(repo, "llama_sharded"))
        for case in MAMBA_SSM:
            write_mamba_ssm(os.path.join(golden_dir(), case), os.path.join(repo, "ssm_" + case))
        binary = os.path.join(os.path.abspath(common.ARGS.build_dir), "server", "attnserve-server")
        # Chunks of 8 tokens: prompts cut into several, and prefix-cache entries inside them.
        cls.server = common.Server(binary, "--model_repository=" + repo, "--max_batch_tokens=8")
        cls.channel = grpc.insecure_channel(cls.server.target)
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = inference_pb2_grpc.AttnServeStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def reference(self, case):
        with open(os.path.join(golden_dir(), case, "reference.json")) as f:
            ref = json.load(f)
        return ref, np.load(os.path.join(golden_dir(), case, "logits_all.npy"))

    def logits(self, response, rows):
        got = np.array(response.outputs.tensor.float_data, dtype=np.float64)
        return got.reshape(rows, -1)

    def assertClose(self, got, want, what):
        err = np.abs(got - want).max() / np.abs(want).max()
        self.assertLessEqual(err, TOLERANCE, "%s: %.3g of max |logit|" % (what, err))

    def infer(self, case, tokens, session_id=""):
        pb = self.pb
        return self.stub.Infer(pb.InferRequest(
            model="" if session_id else case, session_id=session_id, tokens=tokens,
            output=pb.OutputSpec(kind=pb.OUTPUT_KIND_ALL_LOGITS)), timeout=60)

    def last_logits(self, case, tokens):
        pb = self.pb
        response = self.stub.Infer(pb.InferRequest(
            model=case, tokens=tokens, output=pb.OutputSpec(kind=pb.OUTPUT_KIND_LAST_LOGITS)),
            timeout=60)
        return self.logits(response, 1)

    def open_session(self, case, tokens, fork_from=""):
        """A session holding `tokens` (or forked from another), left open after its stream."""
        pb = self.pb
        requests = [pb.StreamRequest(open=pb.StreamOpen(model="" if fork_from else case,
                                                        fork_from=fork_from))]
        if tokens:
            requests.append(pb.StreamRequest(append=pb.StreamAppend(
                sequence_number=1, tokens=tokens, output=pb.OutputSpec(kind=pb.OUTPUT_KIND_NONE))))
        responses = list(self.stub.Stream(iter(requests), timeout=60))
        return responses[0].opened.session_id

    def test_whole_prompt(self):
        for case in self.cases:
            with self.subTest(case=case):
                ref, want = self.reference(case)
                got = self.logits(self.infer(case, ref["tokens"]), len(ref["tokens"]))
                self.assertClose(got, want, case + " whole prompt")

    def test_chunks_then_steps(self):
        for case in self.cases:
            with self.subTest(case=case):
                ref, want = self.reference(case)
                tokens = ref["tokens"]
                sid = self.open_session(case, [])
                got, pos = [], 0
                for n in CHUNKS + (len(tokens) - sum(CHUNKS) - 4,) + (1, 1, 1, 1):
                    got.append(self.logits(self.infer(case, tokens[pos:pos + n], sid), n))
                    pos += n
                self.assertEqual(pos, len(tokens))
                self.assertClose(np.concatenate(got), want, case + " chunks and steps")

    def test_greedy_tokens_equal_generate(self):
        pb = self.pb
        for case in self.cases:
            with self.subTest(case=case):
                ref, _ = self.reference(case)
                responses = list(self.stub.Stream(iter([
                    pb.StreamRequest(open=pb.StreamOpen(model=case)),
                    pb.StreamRequest(append=pb.StreamAppend(
                        sequence_number=1, tokens=ref["tokens"],
                        generate=pb.GenerateSpec(max_new_tokens=len(ref["greedy_tokens"]),
                                                 ignore_eos=True))),
                    pb.StreamRequest(close=pb.StreamClose())]), timeout=60))
                result = [r.result for r in responses if r.WhichOneof("kind") == "result"][0]
                self.assertEqual(list(result.generated_tokens), ref["greedy_tokens"], case)

    def test_generate_steps_logit_by_logit(self):
        pb = self.pb
        for case in self.cases:
            with self.subTest(case=case):
                ref, _ = self.reference(case)
                want = np.load(os.path.join(golden_dir(), case, "greedy_step_logits.npy"))
                sid = self.open_session(case, [])
                rows = [self.logits(self.infer(case, ref["tokens"], sid), len(ref["tokens"]))[-1:]]
                for token in ref["greedy_tokens"][:-1]:
                    rows.append(self.logits(self.infer(case, [token], sid), 1))
                self.assertClose(np.concatenate(rows), want, case + " generate's steps")

    def test_fork_snapshot_and_prefix_cache_at_positions_past_zero(self):
        pb = self.pb
        for case in ("llama_gqa", "mistral_window8", "qwen2_biases_tied", "llama_rope_yarn",
                     "mamba2", "mamba2_groups4", "jamba", "zamba", "zamba_heads4_untied",
                     "zamba2", "zamba2_blocks2_groups2", "granitemoehybrid", "falcon_h1",
                     "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2_conv_bias_untied"):
            with self.subTest(case=case):
                ref, want = self.reference(case)
                tokens, cut = ref["tokens"], 21
                source = self.open_session(case, tokens[:cut])
                fork = self.open_session(case, [], fork_from=source)
                got = self.logits(self.infer(case, tokens[cut:], fork), len(tokens) - cut)
                self.assertClose(got, want[cut:], case + " fork at 21")
                snapshot = b"".join(c.data for c in self.stub.ExportSession(
                    pb.ExportSessionRequest(session_id=source), timeout=30))
                self.stub.CloseSession(pb.CloseSessionRequest(session_id=source), timeout=30)
                self.stub.ImportSession(iter([pb.SessionSnapshotChunk(
                    data=snapshot, total_bytes=len(snapshot))]), timeout=30)
                got = self.logits(self.infer(case, tokens[cut:], source), len(tokens) - cut)
                self.assertClose(got, want[cut:], case + " snapshot round trip at 21")
                # A prompt's first 29 tokens, then all 37: the second starts from the state the
                # first left at 29 (a prefix-cache hit, last logits only) and computes 8 more.
                before = self.stub.ListModels(pb.ListModelsRequest(), timeout=30).prefix_cache
                self.last_logits(case, tokens[:29])
                got = self.last_logits(case, tokens)
                after = self.stub.ListModels(pb.ListModelsRequest(), timeout=30).prefix_cache
                self.assertGreater(after.hits, before.hits, case + ": no prefix-cache hit")
                self.assertGreaterEqual(after.hit_tokens - before.hit_tokens, 29)
                self.assertClose(got, want[-1:], case + " after a prefix-cache hit at 29")

    def test_kv_bytes_per_token_and_sharded_folders(self):
        pb = self.pb
        for case in ("llama_gqa", "llama_mqa", "llama_head_dim_biases", "llama_sharded"):
            with self.subTest(case=case):
                src = "llama_gqa" if case == "llama_sharded" else case
                with open(os.path.join(golden_dir(), src, "config.json")) as f:
                    config = json.load(f)
                heads = config["num_attention_heads"]
                head_dim = config.get("head_dim") or config["hidden_size"] // heads
                kv = config.get("num_key_value_heads") or heads
                info = self.stub.GetModel(pb.GetModelRequest(name=case), timeout=30)
                self.assertEqual(info.state_bytes_per_token,
                                 2 * config["num_hidden_layers"] * kv * head_dim * 4, case)
        ref, want = self.reference("llama_gqa")
        got = self.logits(self.infer("llama_sharded", ref["tokens"]), len(ref["tokens"]))
        self.assertClose(got, want, "sharded llama_gqa")

    def test_mamba_ssm_pickled_folders(self):
        """mamba_ssm's layout (config.json with d_model and ssm_cfg, pytorch_model.bin) of the
        same weights gives the same logits."""
        for case in MAMBA_SSM:
            with self.subTest(case=case):
                ref, want = self.reference(case)
                got = self.logits(self.infer("ssm_" + case, ref["tokens"]), len(ref["tokens"]))
                self.assertClose(got, want, "mamba_ssm folder of " + case)

    def test_mamba2_bf16_and_int8_weights(self):
        """--weight_precision=bf16 and int8 (the in_proj and out_proj matrices rounded) stay
        near the float32 reference (a loose bound: the
        tiny folders' random weights are large)."""
        import grpc
        from attnserve.v1 import inference_pb2_grpc
        pb = self.pb
        binary = os.path.join(os.path.abspath(common.ARGS.build_dir), "server", "attnserve-server")
        repo = os.path.join(self.tmp, "models")
        # Measured: bf16 0.013-0.015, int8 0.037-0.050 of max |logit| (random tiny weights);
        # jamba bf16 0.055, int8 0.23: its MoE layers route each token to 2 of 4 experts whose
        # router probabilities are close in a tiny random folder, and rounding moves some tokens
        # to another expert (the router itself stays float32); zamba bf16 0.075, int8 0.30 (9
        # layers of random weights, the shared block's twice-normed products; the same int8 /
        # bf16 ratio, 4x, as the others'); nemotron_h_moe bf16 0.172, int8 0.73: its sigmoid
        # router's top 2 of 4 experts move with the rounded router weights and correction bias,
        # and each expert's output is times 2.5 (routed_scaling_factor). The float64 port
        # (tests/golden/falcon_nemotron_reference.py) of the bf16-rounded weights is 0.1718 off
        # its float32 weights' too, as attnserve's bf16 is: the rounding, not the serving.
        for precision, tolerance in (("bf16", 4e-2), ("int8", 0.12)):
            server = common.Server(binary, "--model_repository=" + repo,
                                   "--weight_precision=" + precision)
            try:
                with grpc.insecure_channel(server.target) as channel:
                    stub = inference_pb2_grpc.AttnServeStub(channel)
                    for case in ("mamba2", "mamba2_groups4", "jamba", "zamba",
                                 "zamba2_blocks2_groups2", "falcon_h1", "nemotron_h",
                                 "nemotron_h_moe", "lfm2_conv_bias_untied"):
                        with self.subTest(case=case, precision=precision):
                            ref, want = self.reference(case)
                            response = stub.Infer(pb.InferRequest(
                                model=case, tokens=ref["tokens"],
                                output=pb.OutputSpec(kind=pb.OUTPUT_KIND_ALL_LOGITS)), timeout=60)
                            got = self.logits(response, len(ref["tokens"]))
                            err = np.abs(got - want).max() / np.abs(want).max()
                            print("%s %s weights: %.3g of max |logit|" % (case, precision, err),
                                  file=sys.stderr)
                            bound = tolerance * {"jamba": 2.5, "zamba": 3.0,
                                                 "zamba2_blocks2_groups2": 3.5,
                                                 "nemotron_h_moe": 6.5}.get(case, 1)
                            self.assertLessEqual(err, bound, "%s %s: %.3g" % (
                                case, precision, err))
                            self.assertGreater(err, 0, "%s: no rounding at all" % precision)
            finally:
                server.kill()

    def test_mamba2_state_size(self):
        pb = self.pb
        for case in ("mamba2", "mamba2_groups4"):
            with self.subTest(case=case):
                with open(os.path.join(golden_dir(), case, "config.json")) as f:
                    c = json.load(f)
                d_inner = c["expand"] * c["hidden_size"]
                conv_dim = d_inner + 2 * c["n_groups"] * c["state_size"]
                per_layer = (conv_dim * c["conv_kernel"] + d_inner * c["state_size"]) * 4
                info = self.stub.GetModel(pb.GetModelRequest(name=case), timeout=30)
                self.assertEqual(info.state_bytes_per_session, c["num_hidden_layers"] * per_layer)
                self.assertEqual(info.state_bytes_per_token, 0)

    def test_jamba_state_size_and_experts_routed_apart(self):
        """A Jamba session holds each Mamba layer's fixed state and each attention layer's KV
        cache for its KV heads only. (Rows of one batch that chose different experts giving
        their own results: tests/unit/moe_test.cc, which checks that they did choose apart.)"""
        pb = self.pb
        with open(os.path.join(golden_dir(), "jamba", "config.json")) as f:
            c = json.load(f)
        layers = c["num_hidden_layers"]
        attention = [i for i in range(layers)
                     if i % c["attn_layer_period"] == c["attn_layer_offset"]]
        d_inner = c["mamba_expand"] * c["hidden_size"]
        per_mamba = d_inner * (c["mamba_d_conv"] + c["mamba_d_state"]) * 4
        head_dim = c["hidden_size"] // c["num_attention_heads"]
        info = self.stub.GetModel(pb.GetModelRequest(name="jamba"), timeout=30)
        self.assertEqual(info.state_bytes_per_session, (layers - len(attention)) * per_mamba)
        self.assertEqual(info.state_bytes_per_token,
                         len(attention) * 2 * c["num_key_value_heads"] * head_dim * 4)
        self.assertIn("mamba", info.config.layers)
        self.assertEqual(info.config.num_experts, c["num_experts"])

    def test_zamba_state_size(self):
        """A Zamba session: every layer's Mamba state (the heads together) and, for each hybrid
        layer, its own KV cache of the shared block (KV heads of head_dim = 2·hidden / heads)."""
        pb = self.pb
        for case in ("zamba", "zamba_heads4_untied"):
            with self.subTest(case=case):
                with open(os.path.join(golden_dir(), case, "config.json")) as f:
                    c = json.load(f)
                d_inner = c["mamba_expand"] * c["hidden_size"]
                per_mamba = d_inner * (c["mamba_d_conv"] + c["mamba_d_state"]) * 4
                hybrid = c["layers_block_type"].count("hybrid")
                info = self.stub.GetModel(pb.GetModelRequest(name=case), timeout=30)
                self.assertEqual(info.state_bytes_per_session,
                                 c["num_hidden_layers"] * per_mamba)
                self.assertEqual(info.state_bytes_per_token,
                                 hybrid * 2 * c["num_key_value_heads"] * c["attention_head_dim"] * 4)

    def test_zamba2_state_size(self):
        """A Zamba2 session: every layer's Mamba-2 state (conv over x, B and C; the heads'
        states) and each hybrid layer's own KV cache of its block."""
        pb = self.pb
        for case in ("zamba2", "zamba2_blocks2_groups2", "zamba2_nope_gqa"):
            with self.subTest(case=case):
                with open(os.path.join(golden_dir(), case, "config.json")) as f:
                    c = json.load(f)
                d_inner = c["mamba_expand"] * c["hidden_size"]
                conv_dim = d_inner + 2 * c["mamba_ngroups"] * c["mamba_d_state"]
                per_mamba = (conv_dim * c["mamba_d_conv"] + d_inner * c["mamba_d_state"]) * 4
                head_dim = 2 * c["hidden_size"] // c["num_attention_heads"]
                hybrid = c["layers_block_type"].count("hybrid")
                info = self.stub.GetModel(pb.GetModelRequest(name=case), timeout=30)
                self.assertEqual(info.state_bytes_per_session,
                                 c["num_hidden_layers"] * per_mamba)
                self.assertEqual(info.state_bytes_per_token,
                                 hybrid * 2 * c["num_key_value_heads"] * head_dim * 4)

    def test_falcon_h1_nemotron_h_and_lfm2_state_sizes(self):
        """A session's fixed state is each Mamba-2 layer's conv state over x, B and C (d_conv
        wide) and its heads' SSM states (head_dim x d_state), or each LFM2 conv layer's last
        conv_L_cache values of B·x, float32; it grows by each attention layer's keys and values
        a token: Falcon-H1's attention beside the Mamba-2 in every layer, Nemotron-H's '*'
        blocks, LFM2's full_attention layers; MLP-only blocks hold nothing."""
        pb = self.pb
        for case in ("falcon_h1", "nemotron_h", "nemotron_h_moe", "lfm2",
                     "lfm2_conv_bias_untied"):
            with self.subTest(case=case):
                with open(os.path.join(golden_dir(), case, "config.json")) as f:
                    c = json.load(f)
                if case.startswith("lfm2"):
                    info = self.stub.GetModel(pb.GetModelRequest(name=case), timeout=30)
                    attention = [i for i in range(c["num_hidden_layers"])
                                 if i in (c.get("full_attn_idxs") or [])
                                 or (c.get("layer_types") or [""] * 99)[i] == "full_attention"]
                    conv_layers = c["num_hidden_layers"] - len(attention)
                    head_dim = c["hidden_size"] // c["num_attention_heads"]
                    self.assertEqual(info.state_bytes_per_session,
                                     conv_layers * c["hidden_size"] * c["conv_L_cache"] * 4)
                    self.assertEqual(info.state_bytes_per_token, len(attention) * 2 *
                                     c["num_key_value_heads"] * head_dim * 4)
                    continue
                if case == "falcon_h1":
                    inner, heads = c["mamba_d_ssm"], c["mamba_n_heads"]
                    groups, n, conv = c["mamba_n_groups"], c["mamba_d_state"], c["mamba_d_conv"]
                    mamba_layers = attention_layers = c["num_hidden_layers"]
                else:
                    heads, groups, n = c["mamba_num_heads"], c["n_groups"], c["ssm_state_size"]
                    inner, conv = heads * c["mamba_head_dim"], c["conv_kernel"]
                    mamba_layers = c["hybrid_override_pattern"].count("M")
                    attention_layers = c["hybrid_override_pattern"].count("*")
                per_mamba = ((inner + 2 * groups * n) * conv + inner * n) * 4
                head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
                info = self.stub.GetModel(pb.GetModelRequest(name=case), timeout=30)
                self.assertEqual(info.state_bytes_per_session, mamba_layers * per_mamba)
                self.assertEqual(info.state_bytes_per_token,
                                 attention_layers * 2 * c["num_key_value_heads"] * head_dim * 4)

    def test_open_inference_protocol_door(self):
        """The 2025 hybrids through the Open Inference Protocol door of the same server
        (ModelInfer with input_ids, every position's logits): the same reference."""
        from inference import grpc_predict_v2_pb2 as oip_pb, grpc_predict_v2_pb2_grpc as oip_grpc
        oip = oip_grpc.GRPCInferenceServiceStub(self.channel)
        for case in ("granitemoehybrid", "falcon_h1", "nemotron_h_moe", "lfm2"):
            with self.subTest(case=case):
                ref, want = self.reference(case)
                request = oip_pb.ModelInferRequest(model_name=case, id="golden")
                ids = request.inputs.add(name="input_ids", datatype="INT64",
                                         shape=[1, len(ref["tokens"])])
                ids.contents.int64_contents.extend(ref["tokens"])
                request.outputs.add(name="logits").parameters["positions"].string_param = "all"
                response = oip.ModelInfer(request, timeout=60)
                out = response.outputs[0]
                self.assertEqual(list(out.shape), [1, len(ref["tokens"]), want.shape[1]])
                if response.raw_output_contents:
                    got = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
                else:
                    got = np.array(out.contents.fp32_contents, dtype=np.float32)
                self.assertClose(got.reshape(want.shape).astype(np.float64), want,
                                 case + " through the OIP door")

    def test_sixteen_sessions_decoded_together_equal_each_alone(self):
        """16 streams generating at once (the scheduler batches their steps) give each the
        tokens it gets alone."""
        import threading
        pb = self.pb
        for case in ("mamba2", "mamba2_groups4", "jamba", "zamba_heads4_untied",
                     "zamba2_blocks2_groups2", "granitemoehybrid", "falcon_h1", "nemotron_h_moe",
                     "lfm2"):
            with self.subTest(case=case):
                ref, _ = self.reference(case)
                prompts = [ref["tokens"][:12 + i] for i in range(16)]

                def generate(prompt):
                    responses = list(self.stub.Stream(iter([
                        pb.StreamRequest(open=pb.StreamOpen(model=case)),
                        pb.StreamRequest(append=pb.StreamAppend(
                            sequence_number=1, tokens=prompt,
                            generate=pb.GenerateSpec(max_new_tokens=12, ignore_eos=True))),
                        pb.StreamRequest(close=pb.StreamClose())]), timeout=120))
                    return [list(r.result.generated_tokens) for r in responses
                            if r.WhichOneof("kind") == "result"][0]

                alone = [generate(p) for p in prompts]
                together = [None] * 16

                def run(i):
                    together[i] = generate(prompts[i])
                threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self.assertEqual(together, alone, case)


if __name__ == "__main__":
    common.run_tests(sys.modules[__name__])
