#!/usr/bin/python3
"""deploy/k8s/overlays/kserve against KServe's conventions and the real server: the
InferenceService names the ServingRuntime, a model format it supports and a protocol it
speaks (grpc-v2); the runtime's flags are the server's, its gRPC port (named h2c, as KServe
names a gRPC port) is the one the server listens on and the probes check, its model
repository is the image's; and the built server started with the runtime's flags answers the
Open Inference Protocol (ServerReady, ServerMetadata, ModelReady, ModelConfig) and
grpc.health.v1 on that port. (The schemas are checked by validate_k8s.mjs.)

Usage: kserve_test.py --build-dir BUILD --source-dir SOURCE
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_common as dc  # noqa: E402

ARGS = dc.parse_args()
sys.path.insert(0, os.path.join(os.path.abspath(ARGS.source_dir), "tests", "integration"))
import python_client_test as pct  # noqa: E402  (Server)


def flag_value(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith("--%s=" % name)]
    return values[-1] if values else None


class KServeOverlayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.resources = dc.render(dc.overlays(ARGS.source_dir)["kserve"])
        cls.runtime = dc.one(cls.resources, "ServingRuntime")
        cls.service = dc.one(cls.resources, "InferenceService")
        (cls.container,) = cls.runtime["spec"]["containers"]

    def test_inference_service_uses_the_runtime(self):
        model = self.service["spec"]["predictor"]["model"]
        self.assertEqual(model["runtime"], self.runtime["metadata"]["name"])
        formats = {(f["name"], f.get("version")) for f in
                   self.runtime["spec"]["supportedModelFormats"]}
        self.assertIn((model["modelFormat"]["name"], model["modelFormat"].get("version")),
                      formats)
        self.assertEqual(model["modelFormat"]["name"], "attnserve")
        self.assertEqual(model["protocolVersion"], "grpc-v2")
        self.assertIn(model["protocolVersion"], self.runtime["spec"]["protocolVersions"])
        self.assertFalse(self.runtime["spec"]["multiModel"])

    def test_ports_and_probes(self):
        port = int(flag_value(self.container["args"], "port"))
        (h2c,) = [p for p in self.container["ports"] if p["name"] == "h2c"]
        self.assertEqual(h2c["containerPort"], port)
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertEqual(self.container[probe]["grpc"]["port"], port, probe)

    def test_flags_are_the_servers_and_models_the_images(self):
        known = dc.server_flag_names(ARGS.build_dir)
        names = {a[2:].split("=", 1)[0] for a in self.container["args"]}
        self.assertEqual(sorted(names - known), [])
        with open(os.path.join(ARGS.source_dir, "deploy/k8s/base/config/server.flags")) as f:
            base = dc.parse_flag_lines(f.read())
        self.assertEqual(flag_value(self.container["args"], "model_repository"),
                         dict(base)["model_repository"])

    def test_the_runtime_serves_the_open_inference_protocol(self):
        import grpc
        tmp = tempfile.mkdtemp(prefix="attnserve_kserve_")
        try:
            proto = os.path.join(os.path.abspath(ARGS.source_dir), "proto")
            subprocess.run(["protoc", "--python_out=" + tmp, "--grpc_out=" + tmp,
                            "--plugin=protoc-gen-grpc=" + shutil.which("grpc_python_plugin"),
                            "-I" + proto, "inference/grpc_predict_v2.proto",
                            "inference/model_config.proto"], check=True, cwd=proto)
            sys.path.insert(0, tmp)
            from inference import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pbg
            # The runtime's flags, but free ports and the built-in models (the image's folder
            # is not here).
            args = [a for a in self.container["args"] if not a.startswith(
                ("--port=", "--metrics_port=", "--model_repository="))]
            server = pct.Server(dc.server_binary(ARGS.build_dir), *args)
            try:
                with grpc.insecure_channel(server.target) as channel:
                    stub = pbg.GRPCInferenceServiceStub(channel)
                    self.assertTrue(stub.ServerReady(pb.ServerReadyRequest(), timeout=30).ready)
                    self.assertIn("sequence", stub.ServerMetadata(
                        pb.ServerMetadataRequest(), timeout=30).extensions)
                    self.assertTrue(stub.ModelReady(pb.ModelReadyRequest(name="mamba"),
                                                    timeout=30).ready)
                    config = stub.ModelConfig(pb.ModelConfigRequest(name="mamba"),
                                              timeout=30).config
                    self.assertEqual(config.backend, "attnserve")
                    health = channel.unary_unary(
                        "/grpc.health.v1.Health/Check", request_serializer=lambda m: m,
                        response_deserializer=lambda b: b)
                    self.assertEqual(health(b"", timeout=30), b"\x08\x01")  # SERVING
            finally:
                server.kill()
                server.pump.join(5)
                server.proc.stdout.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
