#!/usr/bin/python3
"""A Linformer model past its trained length over gRPC (issue #28, item 4): with
`linformer_extend: "interpolate"` an Infer longer than linformer_max_len is served and its
policy reason says E and F were interpolated; within the length nothing is said; without the
option the model's limit stays (GetModel's max_sequence_length, RESOURCE_EXHAUSTED beyond).

Usage: linformer_extend_test.py --build-dir BUILD --source-dir SOURCE
"""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_test as common  # noqa: E402
from text_test import write_attention_folder  # noqa: E402

LINFORMER = {"linformer_k": 16, "linformer_max_len": 64}


class LinformerExtendTest(common.ServerProcesses, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_linformer_")
        common.generate_stubs(common.ARGS.source_dir, cls.tmp)
        import grpc
        from attnserve.v1 import inference_pb2, inference_pb2_grpc
        cls.grpc, cls.pb = grpc, inference_pb2
        repo = os.path.join(cls.tmp, "models")
        write_attention_folder(os.path.join(repo, "stretchy"), 300, 1, layers=("linformer",) * 2,
                               extra_config={**LINFORMER, "linformer_extend": "interpolate"})
        write_attention_folder(os.path.join(repo, "strict"), 300, 1, layers=("linformer",) * 2,
                               extra_config=LINFORMER)
        binary = os.path.join(os.path.abspath(common.ARGS.build_dir), "server", "attnserve-server")
        cls.server = common.Server(binary, "--model_repository=" + repo, "--policy=strict:64")
        cls.channel = grpc.insecure_channel(cls.server.target)
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = inference_pb2_grpc.AttnServeStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def infer(self, model, n):
        return self.stub.Infer(self.pb.InferRequest(model=model, tokens=[(7 * i) % 300 for i in range(n)]),
                               timeout=60)

    def test_interpolates_past_the_trained_length_and_says_so(self):
        r = self.infer("stretchy", 200)
        # As the docs say: the reason ends with the note.
        self.assertTrue(r.policy_reason.endswith(
            "; linformer E and F interpolated from 64 to 200 rows"), r.policy_reason)
        self.assertEqual(len(r.outputs.tensor.float_data), 300)
        self.assertNotIn("interpolated", self.infer("stretchy", 64).policy_reason)
        info = self.stub.GetModel(self.pb.GetModelRequest(name="stretchy"), timeout=30)
        self.assertEqual(info.max_sequence_length, 2048)
        self.assertEqual(info.config.linformer_extend, "interpolate")

    def test_without_the_option_the_limit_stays(self):
        info = self.stub.GetModel(self.pb.GetModelRequest(name="strict"), timeout=30)
        self.assertEqual(info.max_sequence_length, 64)
        with self.assertRaises(self.grpc.RpcError) as e:
            self.infer("strict", 65)
        self.assertIn(e.exception.code(), (self.grpc.StatusCode.RESOURCE_EXHAUSTED,
                                           self.grpc.StatusCode.INVALID_ARGUMENT))
        self.assertIn("64", e.exception.details())


if __name__ == "__main__":
    common.run_tests(sys.modules[__name__])
