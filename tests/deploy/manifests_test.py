#!/usr/bin/python3
"""The Kubernetes manifests against the server they deploy (deploy/k8s, every overlay).

For each rendered overlay:
  * every flag the Deployment passes (its args and the flagfiles from the ConfigMap) is one
    that attnserve-server --helpfull lists, and the ports, drain deadline, model repository
    and state budget agree with the containers, probes, grace period, Dockerfile and alerts;
  * a real attnserve-server started with exactly those args and ConfigMap files (mounted
    into a temporary folder, ports moved to free ones) answers grpc.health.v1 SERVING for
    every service name the probes ask for, NOT_FOUND for a name it does not serve, and after
    SIGTERM drains and exits 0 well within terminationGracePeriodSeconds less the preStop;
  * the Services, headless Service, HPA, PDB and ServiceMonitor select the pods and ports
    they must; the pods run non-root with a read-only root; the pod identity reaches the
    server; the gpu overlay asks for a GPU on GPU nodes and runs the CUDA image.

Usage: manifests_test.py --build-dir BUILD --source-dir SOURCE (run by CTest).
"""
import os
import re
import shutil
import tempfile
import unittest

import yaml

import deploy_common as dc

ARGS = dc.parse_args()
STUBS = dc.grpc_stubs(ARGS.source_dir)
HEALTH = STUBS[2]


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def prestop_seconds(container):
    """Seconds the preStop hook pauses: exec sleep N or the sleep action."""
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"])
    command = pre_stop.get("exec", {}).get("command", [])
    if len(command) == 2 and os.path.basename(command[0]) == "sleep":
        return int(command[1])
    raise AssertionError(f"preStop is not a sleep: {pre_stop}")


class OverlayTest:
    """The checks, for one overlay (subclassed per overlay below)."""
    overlay = None

    @classmethod
    def setUpClass(cls):
        cls.resources = dc.render(dc.overlays(ARGS.source_dir)[cls.overlay])
        cls.deployment, cls.container = dc.server_container(cls.resources)
        cls.pod = cls.deployment["spec"]["template"]["spec"]
        cls.pod_labels = cls.deployment["spec"]["template"]["metadata"]["labels"]
        cls.config = dc.ServerConfig(cls.resources)
        cls.ports = {p["name"]: p["containerPort"] for p in cls.container["ports"]}

    def test_every_flag_exists_in_the_server(self):
        known = dc.server_flag_names(ARGS.build_dir)
        unknown = sorted({name for name, _ in self.config.flags} - known)
        self.assertEqual(unknown, [], f"flags attnserve-server --helpfull does not list "
                                      f"(rebuild build/ if server/main.cc just gained them)")

    def test_pod_identity_from_the_downward_api(self):
        env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
               for e in self.container["env"]}
        self.assertEqual(env.get("POD_NAME"), "metadata.name")
        self.assertEqual(env.get("POD_IP"), "status.podIP")
        known = dc.server_flag_names(ARGS.build_dir)
        # The server's identity flags, where it has them, carry that identity.
        if "instance_name" in known:
            self.assertEqual(self.config.value("instance_name"), "$(POD_NAME)")
        if "advertise_address" in known:
            self.assertEqual(self.config.value("advertise_address"),
                             f"$(POD_IP):{self.ports['grpc']}")

    def test_ports_agree(self):
        self.assertEqual(int(self.config.value("port", "50051")), self.ports["grpc"])
        self.assertEqual(int(self.config.value("metrics_port", "9090")), self.ports["metrics"])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(self.container[probe]["grpc"]["port"], self.ports["grpc"], probe)

    def test_probes_are_grpc_health_checks(self):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertIn("grpc", self.container[probe], probe)
        # A draining pod answers NOT_SERVING for up to --drain_deadline_s: liveness must not
        # restart it for that.
        liveness = self.container["livenessProbe"]
        window = liveness.get("periodSeconds", 10) * liveness.get("failureThreshold", 3)
        self.assertGreater(window, int(self.config.value("drain_deadline_s", "10")))

    def test_grace_period_covers_prestop_and_drain(self):
        drain = int(self.config.value("drain_deadline_s", "10"))
        self.assertGreater(self.pod["terminationGracePeriodSeconds"],
                           prestop_seconds(self.container) + drain)

    def test_security_context(self):
        pod_sc, sc = self.pod["securityContext"], self.container["securityContext"]
        self.assertTrue(pod_sc["runAsNonRoot"])
        self.assertGreater(pod_sc["runAsUser"], 0)
        self.assertEqual(pod_sc["seccompProfile"]["type"], "RuntimeDefault")
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        # The one writable place is /tmp, an emptyDir.
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        tmp = [m for m in self.container["volumeMounts"] if m["mountPath"] == "/tmp"]
        self.assertEqual(len(tmp), 1)
        self.assertIn("emptyDir", volumes[tmp[0]["name"]])
        # The image's user is the pod's.
        with open(os.path.join(ARGS.source_dir, "Dockerfile")) as f:
            users = re.findall(r"^USER\s+(\d+)(?::(\d+))?\s*$", f.read(), re.MULTILINE)
        self.assertEqual(int(users[-1][0]), pod_sc["runAsUser"])

    def test_resources(self):
        resources = self.container["resources"]
        for kind in ("cpu", "memory"):
            self.assertIn(kind, resources["requests"])
            self.assertIn(kind, resources["limits"])

    def test_model_repository_is_the_images(self):
        with open(os.path.join(ARGS.source_dir, "Dockerfile")) as f:
            exported = re.search(r"attnserve-export-model\s.*--out=(\S+)", f.read()).group(1)
        self.assertEqual(self.config.value("model_repository"), exported)

    def test_alert_thresholds_are_the_flags(self):
        with open(os.path.join(ARGS.source_dir, "deploy/prometheus/rules.yml")) as f:
            rules = {r["alert"]: r["expr"] for g in yaml.safe_load(f)["groups"]
                     for r in g["rules"] if "alert" in r}
        budget = re.search(r">\s*0\.9\s*\*\s*(\d+)", rules["AttnserveStateBudgetNearFull"])
        self.assertEqual(int(budget.group(1)), int(self.config.value("state_budget_bytes")))
        sessions = re.search(r">\s*0\.9\s*\*\s*(\d+)", rules["AttnserveSessionsNearMax"])
        self.assertEqual(int(sessions.group(1)), int(self.config.value("max_sessions")))

    def test_services_select_the_pods(self):
        services = {s["metadata"]["name"]: s for s in self.resources if s["kind"] == "Service"}
        headless = [s for s in services.values() if s["spec"].get("clusterIP") == "None"]
        self.assertEqual(len(headless), 1)
        self.assertFalse(headless[0]["spec"].get("publishNotReadyAddresses", False))
        for service in services.values():
            self.assertTrue(labels_match(service["spec"]["selector"], self.pod_labels))
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], self.ports, service["metadata"]["name"])
                self.assertEqual(port["port"], self.ports[port["targetPort"]])
        balanced = [s for s in services.values() if s["spec"].get("clusterIP") != "None"]
        self.assertEqual({p["name"] for p in balanced[0]["spec"]["ports"]}, {"grpc", "metrics"})

    def test_service_monitor_scrapes_each_pod_once(self):
        monitor = dc.one(self.resources, "ServiceMonitor")
        selected = [s for s in self.resources if s["kind"] == "Service" and labels_match(
            monitor["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
        self.assertEqual(len(selected), 1, "the ServiceMonitor must select one Service")
        port_names = {p["name"] for p in selected[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            self.assertIn(endpoint["port"], port_names)
            self.assertEqual(endpoint["path"], "/metrics")

    def test_hpa_and_pdb(self):
        hpa = dc.one(self.resources, "HorizontalPodAutoscaler")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], self.deployment["metadata"]["name"])
        self.assertLessEqual(hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])
        self.assertNotIn("replicas", self.deployment["spec"], "the HPA owns the replica count")
        kinds = {m["type"] for m in hpa["spec"]["metrics"]}
        self.assertEqual(kinds, {"Resource", "Pods"})
        # The Pods metric is the one prometheus-adapter's rule serves.
        with open(os.path.join(ARGS.source_dir, "deploy/prometheus/adapter-rules.yml")) as f:
            served = {r["name"]["as"] for r in yaml.safe_load(f)["rules"]}
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Pods":
                self.assertIn(metric["pods"]["metric"]["name"], served)
        pdb = dc.one(self.resources, "PodDisruptionBudget")
        self.assertTrue(labels_match(pdb["spec"]["selector"]["matchLabels"], self.pod_labels))
        self.assertTrue(labels_match(self.deployment["spec"]["selector"]["matchLabels"],
                                     self.pod_labels))

    def test_real_server_serves_what_the_probes_ask(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_mounts_")
        args = self.config.materialize(tmp)
        # What the kubelet would expand; then the free ports, and the default models (the
        # image's repository holds the same models, written by attnserve-export-model).
        env = {"POD_NAME": f"attnserve-{self.overlay}-test", "POD_IP": "127.0.0.1"}
        args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]
        args.append("--model_repository=")
        if self.config.value("device") == "cuda":
            args.append("--device=cpu")  # no GPU here: everything else as deployed
        server = dc.Server(ARGS.build_dir, args)
        try:
            services = {self.container[p]["grpc"].get("service", "")
                        for p in ("startupProbe", "readinessProbe", "livenessProbe")}
            for service in services:
                self.assertEqual(dc.health_check(HEALTH, server.grpc_port, service), "SERVING",
                                 f"probe service {service!r}")
            self.assertEqual(dc.health_check(HEALTH, server.grpc_port, "no.such.Service"),
                             "NOT_FOUND")
            self.assertIn("policy [standard up to 4095 tokens", server.text())
            code, seconds = server.terminate(self.pod["terminationGracePeriodSeconds"])
            self.assertEqual(code, 0, server.text())
            self.assertLess(seconds, self.pod["terminationGracePeriodSeconds"]
                            - prestop_seconds(self.container))
        finally:
            server.stop()
            shutil.rmtree(tmp, ignore_errors=True)


class CpuOverlayTest(OverlayTest, unittest.TestCase):
    overlay = "cpu"


class GpuOverlayTest(OverlayTest, unittest.TestCase):
    overlay = "gpu"

    def test_gpu_pods(self):
        limits = self.container["resources"]["limits"]
        self.assertEqual(str(limits["nvidia.com/gpu"]), "1")
        self.assertIn("nvidia.com/gpu.present", self.pod["nodeSelector"])
        self.assertIn("nvidia.com/gpu", {t["key"] for t in self.pod["tolerations"]})
        self.assertRegex(self.container["image"], r":[^/]*cuda[^/]*$")
        if "device" in dc.server_flag_names(ARGS.build_dir):
            self.assertEqual(self.config.value("device"), "cuda")


class OverlaysTest(unittest.TestCase):
    def test_every_overlay_is_tested(self):
        tested = {c.overlay for c in OverlayTest.__subclasses__()}
        self.assertEqual(tested, set(dc.overlays(ARGS.source_dir)))


if __name__ == "__main__":
    try:
        unittest.main()
    finally:
        shutil.rmtree(STUBS[3], ignore_errors=True)
