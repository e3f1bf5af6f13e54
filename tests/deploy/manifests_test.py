#!/usr/bin/python3
"""The Kubernetes manifests against the server they deploy (deploy/k8s, every overlay).

For each rendered overlay:
  * every flag the Deployment passes (its args and the flagfiles from the ConfigMap) is one
    that attnserve-server --helpfull lists, and the ports, drain and save deadlines, model
    repository, state budget and session store agree with the containers, probes, grace
    period, volumes, Dockerfile and alerts;
  * a real attnserve-server started with exactly those args and ConfigMap files (mounted
    into a temporary folder, emptyDirs made there too, ports moved to free ones) answers
    grpc.health.v1 SERVING for every service name the probes ask for, NOT_FOUND for a name it
    does not serve, and after SIGTERM drains and exits 0 well within
    terminationGracePeriodSeconds less the preStop;
  * sessions survive a restart: a session opened on such a server is in its store (the dir:
    folder, or a real redis-server started with the redis overlay's Redis args) after SIGTERM,
    a second server with the same args resumes it where it was, and closing it empties the
    store;
  * the Services, headless Service, HPA, PDB and ServiceMonitor select the pods and ports
    they must; the pods run non-root with a read-only root; the pod identity reaches the
    server; the gpu overlay asks for a GPU on GPU nodes and runs the CUDA image; the redis
    overlay is the cpu overlay with its sessions in a Redis that the Service, NetworkPolicy,
    probes, memory limit and a real redis-server agree with;
  * no overlay embeds a Secret, key or certificate; Secrets are mounted whole and read-only;
    the secure overlay is the cpu overlay with mutual TLS, tokens, no reflection and probes
    on a plaintext health port, and a real server with the Secrets that deploy/README.md's
    commands make (run as they are) serves TLS clients with a certificate and token only,
    health in plaintext, and takes rotated Secrets without a restart.

Usage: manifests_test.py --build-dir BUILD --source-dir SOURCE (run by CTest).
"""
import base64
import copy
import hashlib
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import yaml

import deploy_common as dc
from overlay_checks import (ARGS, STUBS, HEALTH, STORE_FLAGS, SECURITY_FLAGS, PROBES, labels_match,
                            quantity_bytes, redis_bytes, redis_options, LocalRedis,
                            redis_container, list_models, readme_blocks, OverlayTest)


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


class RedisOverlayTest(OverlayTest, unittest.TestCase):
    overlay = "redis"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.redis_deployment, cls.redis = redis_container(cls.resources)
        cls.redis_pod = cls.redis_deployment["spec"]["template"]["spec"]
        cls.redis_labels = cls.redis_deployment["spec"]["template"]["metadata"]["labels"]
        cls.redis_options = redis_options(cls.redis.get("args", []))
        cls.redis_ports = {p["name"]: p["containerPort"] for p in cls.redis["ports"]}

    def test_the_cpu_overlay_with_its_sessions_in_redis(self):
        cpu = dc.render(dc.overlays(ARGS.source_dir)["cpu"])
        cpu_config = dc.ServerConfig(cpu)
        self.assertEqual([f for f in self.config.flags if f[0] not in STORE_FLAGS],
                         [f for f in cpu_config.flags if f[0] not in STORE_FLAGS])
        self.assertEqual(self.config.value("session_store"), "redis://attnserve-redis:6379")
        self.assertEqual(self.config.value("checkpoint_every_appends"), "16")
        # cpu's resources, the same but for the ConfigMap (store.flags) and the server's
        # Deployment, and Redis'.
        ours = {(r["kind"], r["metadata"]["name"]): r for r in self.resources
                if r["kind"] != "ConfigMap"}
        theirs = {(r["kind"], r["metadata"]["name"]): r for r in cpu if r["kind"] != "ConfigMap"}
        self.assertEqual(sorted(set(ours) - set(theirs)), [
            ("Deployment", "attnserve-redis"), ("NetworkPolicy", "attnserve-redis"),
            ("Service", "attnserve-redis")])
        self.assertEqual(set(theirs) - set(ours), set())
        for key in set(theirs) - {("Deployment", "attnserve")}:
            self.assertEqual(ours[key], theirs[key], key)
        # The server's Deployment is cpu's less the dir: store's volume, mount and disk.
        expected = copy.deepcopy(theirs[("Deployment", "attnserve")])
        spec = expected["spec"]["template"]["spec"]
        folder = cpu_config.value("session_store")[len("dir:"):]
        mount, = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == folder]
        spec["containers"][0]["volumeMounts"].remove(mount)
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != mount["name"]]
        del spec["containers"][0]["resources"]["requests"]["ephemeral-storage"]
        deployment = copy.deepcopy(self.deployment)
        for d in (expected, deployment):
            for v in d["spec"]["template"]["spec"]["volumes"]:
                if "configMap" in v:
                    v["configMap"]["name"] = "attnserve-config"
        self.assertEqual(deployment, expected)

    def test_the_store_address_is_the_redis_service(self):
        host, port = re.fullmatch(r"redis://([^:/]+):(\d+)",
                                  self.config.value("session_store")).groups()
        service = dc.one(self.resources, "Service", lambda r: r["metadata"]["name"] == host)
        self.assertTrue(labels_match(service["spec"]["selector"], self.redis_labels))
        self.assertFalse(labels_match(service["spec"]["selector"], self.pod_labels))
        self.assertEqual(service["spec"].get("type", "ClusterIP"), "ClusterIP")
        ports = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
        self.assertEqual(len(ports), 1, f"{host} has no port {port}")
        target = ports[0]["targetPort"]
        self.assertEqual(self.redis_ports.get(target, target), int(port))
        self.assertEqual(self.redis_options["port"], [port])

    def test_redis_deployment(self):
        spec = self.redis_deployment["spec"]
        self.assertEqual(spec["replicas"], 1)
        self.assertEqual(spec["strategy"]["type"], "Recreate", "never two Redis at once")
        self.assertTrue(labels_match(spec["selector"]["matchLabels"], self.redis_labels))
        self.assertFalse(labels_match(spec["selector"]["matchLabels"], self.pod_labels))
        self.assertRegex(self.redis["image"], r"^redis:7(\.|$)")
        self.assertEqual(self.redis.get("command"), ["redis-server"])
        # In memory only, bounded, evicting by TTL or refusing, and room for it in the limit.
        options = self.redis_options
        self.assertEqual(options["save"], [""])
        self.assertEqual(options["appendonly"], ["no"])
        maxmemory = redis_bytes(options["maxmemory"][0])
        self.assertGreaterEqual(maxmemory, int(self.config.value("state_budget_bytes")),
                                "a full server pod's drain fits in Redis")
        self.assertIn(options["maxmemory-policy"], (["volatile-ttl"], ["noeviction"]))
        resources = self.redis["resources"]
        for kind in ("cpu", "memory"):
            self.assertIn(kind, resources["requests"])
            self.assertIn(kind, resources["limits"])
        self.assertGreaterEqual(quantity_bytes(resources["limits"]["memory"]),
                                maxmemory * 5 // 4, "room beyond maxmemory")
        self.assertEqual(resources["requests"]["memory"], resources["limits"]["memory"])
        # Probes ask Redis itself; liveness (a restart empties the store) waits longer.
        probes = {p: self.redis[p] for p in ("readinessProbe", "livenessProbe")}
        for name, probe in probes.items():
            self.assertIn(f"-p {options['port'][0]} ping", " ".join(probe["exec"]["command"]),
                          name)

        def window(p):
            return p.get("periodSeconds", 10) * p.get("failureThreshold", 3)
        self.assertGreaterEqual(window(probes["livenessProbe"]), 60)
        self.assertGreater(window(probes["livenessProbe"]), window(probes["readinessProbe"]))
        # Locked down like the server's pod; nothing writable (no persistence).
        self.assert_locked_down(self.redis_pod, self.redis)
        self.assertFalse(self.redis_pod.get("automountServiceAccountToken", True))
        self.assertNotIn("volumeMounts", self.redis)

    def test_network_policy_admits_the_server_pods_only(self):
        policy = dc.one(self.resources, "NetworkPolicy")
        spec = policy["spec"]
        self.assertTrue(labels_match(spec["podSelector"]["matchLabels"], self.redis_labels))
        self.assertFalse(labels_match(spec["podSelector"]["matchLabels"], self.pod_labels))
        self.assertEqual(spec["policyTypes"], ["Ingress"])
        rule, = spec["ingress"]
        peer, = rule["from"]
        self.assertEqual(set(peer), {"podSelector"})
        self.assertTrue(labels_match(peer["podSelector"]["matchLabels"], self.pod_labels))
        port, = rule["ports"]
        self.assertEqual(self.redis_ports.get(port["port"], port["port"]),
                         int(self.redis_options["port"][0]))

    def test_real_redis_takes_the_args(self):
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            self.skipTest("redis-server and redis-cli are not installed (Debian: redis-server)")
        tmp = tempfile.mkdtemp(prefix="attnserve_redis_")
        redis = LocalRedis(self.redis.get("args", []), tmp)
        try:
            def config(name):
                return redis.cli("config", "get", name).split("\n")[1:]
            options = self.redis_options
            self.assertEqual(config("maxmemory"), [str(redis_bytes(options["maxmemory"][0]))])
            self.assertEqual(config("maxmemory-policy"), options["maxmemory-policy"])
            self.assertEqual(config("save"), [""])
            self.assertEqual(config("appendonly"), ["no"])
            self.assertEqual(config("protected-mode"), options["protected-mode"])
            # The probes' own commands, on this Redis' port.
            for name in ("readinessProbe", "livenessProbe"):
                command = [c.replace(f"-p {options['port'][0]} ", f"-p {redis.port} ")
                           for c in self.redis[name]["exec"]["command"]]
                self.assertEqual(subprocess.run(command, timeout=30).returncode, 0, name)
            redis.process.kill()
            redis.process.wait(10)
            self.assertNotEqual(subprocess.run(command, capture_output=True, timeout=30)
                                .returncode, 0, "the probe fails without Redis")
        finally:
            redis.stop()
            shutil.rmtree(tmp, ignore_errors=True)


class GatewayOverlayTest(OverlayTest, unittest.TestCase):
    """The redis overlay behind HAProxy (deploy/k8s/overlays/gateway)."""
    overlay = "gateway"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.gateway = dc.one(cls.resources, "Deployment",
                             lambda r: r["metadata"]["name"] == "attnserve-gateway")
        cls.gateway_pod = cls.gateway["spec"]["template"]["spec"]
        cls.haproxy, = cls.gateway_pod["containers"]
        cls.gateway_ports = {p["name"]: p["containerPort"] for p in cls.haproxy["ports"]}
        volume, = [v for v in cls.gateway_pod["volumes"] if "configMap" in v]
        config_map = dc.one(cls.resources, "ConfigMap",
                            lambda r: r["metadata"]["name"] == volume["configMap"]["name"])
        cls.haproxy_cfg = config_map["data"]["haproxy.cfg"]
        cls.haproxy_files = config_map["data"]

    def test_the_redis_overlay_with_a_gateway(self):
        redis = dc.render(dc.overlays(ARGS.source_dir)["redis"])
        ours = {(r["kind"], r["metadata"]["name"]) for r in self.resources if r["kind"] != "ConfigMap"}
        theirs = {(r["kind"], r["metadata"]["name"]) for r in redis if r["kind"] != "ConfigMap"}
        self.assertEqual(sorted(ours - theirs), [("Deployment", "attnserve-gateway"),
                                                 ("Service", "attnserve-gateway")])
        # Every acknowledged append is in the store: what a failover needs.
        self.assertEqual(self.config.value("checkpoint_every_appends"), "1")
        self.assertGreater(int(self.config.value("session_lease_ms", "5000")), 0)
        self.assertEqual(self.config.value("session_store"),
                         dc.ServerConfig(redis).value("session_store"))

    def test_haproxy_config_routes_to_the_server_pods(self):
        with open(os.path.join(dc.overlays(ARGS.source_dir)["gateway"], "haproxy.cfg")) as f:
            self.assertEqual(self.haproxy_cfg, f.read())
        cfg = self.haproxy_cfg
        # Calls to the headless Service's pods on the gRPC port, checks on the metrics port.
        headless = dc.one(self.resources, "Service",
                          lambda r: r["spec"].get("clusterIP") == "None")
        template = re.search(r"^\s*server-template \S+ \d+ (\S+):(\d+) (.*)$", cfg, re.MULTILINE)
        self.assertIsNotNone(template)
        self.assertTrue(template.group(1).startswith(headless["metadata"]["name"] + "."))
        self.assertEqual(int(template.group(2)), self.ports["grpc"])
        self.assertIn("proto h2", template.group(3))
        check_port = re.search(r"^\s*default-server .*\bport (\d+)", cfg, re.MULTILINE)
        self.assertEqual(int(check_port.group(1)), self.ports["metrics"])
        self.assertRegex(cfg, r"option httpchk GET /ready")
        # Routed by the session header, learnt from the replicas' answers.
        self.assertIn("stick match req.hdr(x-attnserve-session)", cfg)
        self.assertIn("stick store-response res.hdr(x-attnserve-session)", cfg)
        # The container listens where the config binds.
        bind = re.search(r"^frontend grpc\n\s*bind :(\d+) proto h2", cfg, re.MULTILINE)
        self.assertEqual(int(bind.group(1)), self.gateway_ports["grpc"])
        haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy"
                                              if os.path.exists("/usr/sbin/haproxy") else None)
        if haproxy is None:
            self.skipTest("haproxy is not installed (Debian: haproxy)")
        # A session's holder named by a replica is learnt too (the maps the ConfigMap mounts
        # beside the config, empty).
        self.assertIn("use-server %[var(txn.holder)]", cfg)
        for name in ("holders.map", "replicas.map"):
            self.assertEqual(self.haproxy_files.get(name), "", name)
        # The whole ConfigMap as the pod mounts it, checked by HAProxy itself.
        with tempfile.TemporaryDirectory() as mounted:
            for name, text in self.haproxy_files.items():
                with open(os.path.join(mounted, name), "w") as f:
                    f.write(text)
            checked = subprocess.run([haproxy, "-c", "-f", os.path.join(mounted, "haproxy.cfg")],
                                     capture_output=True, text=True, timeout=30)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)

    def test_gateway_service_and_pod(self):
        service = dc.one(self.resources, "Service",
                         lambda r: r["metadata"]["name"] == "attnserve-gateway")
        pod_labels = self.gateway["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(labels_match(service["spec"]["selector"], pod_labels))
        self.assertFalse(labels_match(service["spec"]["selector"], self.pod_labels))
        grpc_port, = [p for p in service["spec"]["ports"] if p["name"] == "grpc"]
        self.assertEqual(grpc_port["port"], 50051)
        self.assertEqual(grpc_port["appProtocol"], "kubernetes.io/h2c")
        self.assertEqual(self.gateway["spec"]["replicas"], 1, "the stick table is in memory")
        sc = self.haproxy["securityContext"]
        self.assertTrue(self.gateway_pod["securityContext"]["runAsNonRoot"])
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertRegex(self.haproxy["image"], r"^haproxy:2\.6")


class ReadmeSecrets:
    """What deploy/README.md's four blocks "# Secrets for overlays/secure, N/4" make, run as
    they are by bash in a temporary folder, one shell for them all (as a user pastes them):
    the files, and the Secrets that `kubectl ... | kubectl apply -f -` would apply (kubectl
    apply captured; kubectl create --dry-run=client run for real where kubectl is installed,
    without any cluster, else its arguments read back here)."""
    PREFIX = "# Secrets for overlays/secure"

    def __init__(self):
        self.blocks = readme_blocks(ARGS.source_dir, self.PREFIX)
        if [b.split("\n")[0][len(self.PREFIX):][:6] for b in self.blocks] != [
                f", {i}/4:" for i in range(1, 5)]:
            raise AssertionError(f"deploy/README.md: expected four blocks {self.PREFIX}, 1/4: "
                                 f"... 4/4:, found {[b.split(chr(10))[0] for b in self.blocks]}")
        # What 1/4 sets (NAMESPACE=..., DOMAIN=...): a later run is in the same shell.
        self.variables = dict(re.findall(r"^(\w+)=(\S+)", self.blocks[0], re.MULTILINE))
        self.namespace = self.variables["NAMESPACE"]
        self.root = tempfile.mkdtemp(prefix="attnserve_pki_")
        self.run(self.blocks)
        self.folder = os.path.join(self.root, "attnserve-pki")

    def run(self, blocks, after_first=False):
        """Runs `blocks` in one bash; after_first: in the folder and with the variables that
        1/4 left (as in the shell it ran in). Returns the Secrets applied, {name: resource}."""
        applied = os.path.join(self.root, "applied.yaml")
        recorded = os.path.join(self.root, "kubectl-args")
        for path in (applied, recorded):
            if os.path.exists(path):
                os.remove(path)
        preamble = [
            "set -euo pipefail",
            # kubectl apply: what it would apply goes to a file; the rest is kubectl's own.
            f'kubectl() {{ if [ "$1" = apply ]; then cat >> {applied!r}; echo --- >> {applied!r};'
            f' elif type -P kubectl >/dev/null; then command kubectl "$@";'
            f' else printf "%s\\0" "$@" >> {recorded!r}; printf "\\n\\0" >> {recorded!r}; fi; }}',
        ]
        if after_first:
            preamble += [f"{k}={v}" for k, v in self.variables.items()]
            preamble.append("cd attnserve-pki")
        script = "\n".join(preamble + blocks) + "\n"
        out = subprocess.run(["bash", "-c", script], cwd=self.root, capture_output=True,
                             text=True, timeout=120,
                             env=dict(os.environ, KUBECONFIG=os.path.join(self.root, "none")))
        if out.returncode != 0:
            raise AssertionError(f"deploy/README.md's Secret commands failed:\n{out.stderr}")
        if os.path.exists(recorded):
            self.applied = self.emulate_kubectl_create(recorded)
        else:
            with open(applied) as f:
                self.applied = {r["metadata"]["name"]: r for r in yaml.safe_load_all(f) if r}
        self.secrets = {name: {k: base64.b64decode(v) for k, v in r.get("data", {}).items()}
                        for name, r in self.applied.items()}
        return self.applied

    def emulate_kubectl_create(self, recorded):
        """`kubectl [-n NS] create secret generic NAME [--type=T] --from-file=KEY[=PATH]...
        --dry-run=client -o yaml` without kubectl: the Secret it prints."""
        with open(recorded) as f:
            commands = [c.strip("\0").split("\0") for c in f.read().split("\n\0") if c.strip("\0")]
        secrets = {}
        for args in commands:
            namespace = args[args.index("-n") + 1] if "-n" in args else "default"
            rest = [a for i, a in enumerate(args) if a != "-n" and (i == 0 or args[i - 1] != "-n")]
            if rest[:3] != ["create", "secret", "generic"]:
                raise AssertionError(f"kubectl {args}: not emulated; install kubectl")
            data, kind = {}, None  # kubectl prints no type unless given one
            for arg in rest[4:]:
                if arg.startswith("--type="):
                    kind = arg[len("--type="):]
                elif arg.startswith("--from-file="):
                    key, _, path = arg[len("--from-file="):].partition("=")
                    path = path or key
                    key = os.path.basename(key)
                    with open(os.path.join(self.root, "attnserve-pki", path), "rb") as f:
                        data[key] = base64.b64encode(f.read()).decode()
            secrets[rest[3]] = {"apiVersion": "v1", "kind": "Secret", "data": data,
                                "metadata": {"name": rest[3], "namespace": namespace},
                                **({"type": kind} if kind else {})}
        return secrets

    def path(self, name):
        return os.path.join(self.folder, name)

    def file(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


class SecureOverlayTest(OverlayTest, unittest.TestCase):
    overlay = "secure"
    CLIENT = "alice"  # the client README.md's block 3/4 makes

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pki = ReadmeSecrets()
        cls.secrets = cls.pki.secrets
        # The name a client dials: the load-balanced Service's, in README.md's namespace.
        cls.server_name = f"attnserve.{cls.pki.namespace}.svc"

    @classmethod
    def tearDownClass(cls):
        cls.pki.remove()

    def channel(self, port, client_certificate=True, token=None, server_name=None):
        """TLS to `port` verified against README.md's CA for `server_name` (the Service's),
        with the client's certificate and token unless told otherwise (token="" for none)."""
        import grpc
        client = self.CLIENT
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.pki.file("ca.crt"),
            private_key=self.pki.file(f"{client}.key") if client_certificate else None,
            certificate_chain=self.pki.file(f"{client}.crt") if client_certificate else None)
        token = self.pki.file(f"{client}.token").decode() if token is None else token
        if token:
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(token))
        return grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=[
            ("grpc.ssl_target_name_override", server_name or self.server_name)])

    def served_certificate(self, port, server_name):
        """The certificate (DER) the server presents to a new TLS connection for
        `server_name`, verified against README.md's CA, with the client's certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the name
        context.load_verify_locations(cadata=self.pki.file("ca.crt").decode())
        context.load_cert_chain(self.pki.path(f"{self.CLIENT}.crt"),
                                self.pki.path(f"{self.CLIENT}.key"))
        context.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            with context.wrap_socket(sock, server_hostname=server_name) as tls:
                return tls.getpeercert(binary_form=True)

    def mounted_secret(self, name):
        """The container's mount path of the Secret `name`."""
        paths = [m for m, source in self.config.secrets.items() if source["secretName"] == name]
        self.assertEqual(len(paths), 1, f"the Secret {name} is mounted once")
        return paths[0]

    def test_the_cpu_overlay_with_transport_security(self):
        cpu = dc.render(dc.overlays(ARGS.source_dir)["cpu"])
        cpu_config = dc.ServerConfig(cpu)
        # cpu's flags, in the same order, and the security flags.
        self.assertEqual([f for f in self.config.flags if f[0] not in SECURITY_FLAGS],
                         cpu_config.flags)
        self.assertEqual(self.config.flagfiles, cpu_config.flagfiles + ["/etc/attnserve/security.flags"])
        added = {n for n, _ in dc.parse_flag_lines(self.config.file("/etc/attnserve/security.flags"))}
        self.assertLessEqual(added, SECURITY_FLAGS)
        # cpu's resources, the same but for the ConfigMap (security.flags), the Services'
        # appProtocol, and the server's Deployment.
        ours = {(r["kind"], r["metadata"]["name"]): r for r in self.resources
                if r["kind"] != "ConfigMap"}
        theirs = {(r["kind"], r["metadata"]["name"]): r for r in cpu if r["kind"] != "ConfigMap"}
        self.assertEqual(set(ours), set(theirs))
        for key in set(theirs) - {("Deployment", "attnserve")}:
            resource = copy.deepcopy(ours[key])
            if key[0] == "Service":
                port, = [p for p in resource["spec"]["ports"] if p["name"] == "grpc"]
                self.assertEqual(port["appProtocol"], "https", f"{key}: the gRPC port speaks TLS")
                port["appProtocol"] = "kubernetes.io/h2c"
                for port in resource["spec"]["ports"]:
                    if port["name"] == "http":
                        self.assertEqual(port["appProtocol"], "https",
                                         f"{key}: the HTTP port serves HTTPS")
                        port["appProtocol"] = "http"
            self.assertEqual(resource, theirs[key], key)
        # The server's Deployment is cpu's plus the args, the health port, the probes on it and
        # the Secret volumes.
        deployment = copy.deepcopy(self.deployment)
        spec = deployment["spec"]["template"]["spec"]
        container = spec["containers"][0]
        self.assertEqual(container["args"][-2:], ["--health_host=$(POD_IP)",
                                                  "--metrics_host=$(POD_IP)"])
        del container["args"][-2:]
        container["args"][0] = dc.server_container(cpu)[1]["args"][0]
        container["ports"] = [p for p in container["ports"] if p["name"] != "health"]
        for probe in PROBES:
            container[probe]["grpc"]["port"] = self.ports["grpc"]
        secret_volumes = {v["name"] for v in spec["volumes"] if "secret" in v}
        self.assertEqual(secret_volumes, {"tls", "auth"})
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in secret_volumes]
        container["volumeMounts"] = [m for m in container["volumeMounts"]
                                     if m["name"] not in secret_volumes]
        expected = copy.deepcopy(theirs[("Deployment", "attnserve")])
        for d in (expected, deployment):
            for v in d["spec"]["template"]["spec"]["volumes"]:
                if "configMap" in v:
                    v["configMap"]["name"] = "attnserve-config"
        self.assertEqual(deployment, expected)

    def test_security_flags(self):
        value = self.config.value
        self.assertEqual(value("reflection"), "false", "reflection is unauthenticated")
        self.assertEqual(value("health_host"), "$(POD_IP)")
        self.assertEqual(value("metrics_host"), "$(POD_IP)")
        self.assertIsNone(value("host"), "the gRPC port on every address (port-forward too)")
        self.assertGreater(int(value("tls_reload_interval_s")), 0)
        # The files the server reads are the Secrets' keys where the Secrets are mounted.
        tls, auth = self.mounted_secret("attnserve-tls"), self.mounted_secret("attnserve-auth")
        self.assertEqual(value("tls_cert"), f"{tls}/tls.crt")
        self.assertEqual(value("tls_key"), f"{tls}/tls.key")
        self.assertEqual(value("tls_client_ca"), f"{tls}/ca.crt", "mutual TLS")
        self.assertEqual(value("auth_tokens_file"), f"{auth}/tokens")
        for mount in (tls, auth):
            self.assertIsNone(self.config.secrets[mount].get("items"), "every key, as created")

    def test_probes_on_the_plaintext_health_port(self):
        self.assertEqual(self.health_port, 8081)
        self.assertNotEqual(self.health_port, self.ports["grpc"])
        cpu_container = dc.server_container(dc.render(dc.overlays(ARGS.source_dir)["cpu"]))[1]
        for probe in PROBES:
            self.assertEqual(self.container[probe]["grpc"]["port"], self.health_port, probe)
            self.assertEqual(self.container[probe]["grpc"].get("service", ""),
                             cpu_container[probe]["grpc"].get("service", ""), probe)
        # Only the kubelet needs it: no Service exposes it.
        for service in self.server_services().values():
            for port in service["spec"]["ports"]:
                self.assertNotIn(port["targetPort"], ("health", self.health_port))

    def test_readme_makes_the_secrets_the_overlay_mounts(self):
        applied = self.pki.applied
        self.assertEqual(set(applied), {"attnserve-tls", "attnserve-auth"})
        for secret in applied.values():
            self.assertEqual(secret["metadata"].get("namespace"), self.pki.namespace)
        self.assertEqual(applied["attnserve-tls"]["type"], "kubernetes.io/tls")
        self.assertEqual(set(self.secrets["attnserve-tls"]), {"tls.crt", "tls.key", "ca.crt"})
        self.assertEqual(set(self.secrets["attnserve-auth"]), {"tokens"})
        # The CA's key stays out of the cluster.
        ca_key = self.pki.file("ca.key")
        for data in self.secrets.values():
            self.assertNotIn(ca_key, data.values())
        # Every Secret the Deployment mounts is one README.md makes.
        self.assertEqual({s["secretName"] for s in self.config.secrets.values()}, set(applied))
        # tokens: "principal: sha256-hex of the token", as the server reads it.
        token = self.pki.file(f"{self.CLIENT}.token")
        self.assertRegex(token.decode(), r"^[0-9a-f]{64}$")
        self.assertEqual(self.secrets["attnserve-auth"]["tokens"].decode(),
                         f"{self.CLIENT}: {hashlib.sha256(token).hexdigest()}\n")

    def test_real_server_over_mutual_tls(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_mounts_")
        server = None
        try:
            server = dc.Server(ARGS.build_dir, self.server_args(tmp))
            self.assertIn("transport mutual TLS", server.text())
            # The kubelet's probe: plaintext, on the health port only.
            self.assertEqual(dc.health_check(HEALTH, server.health_port, ""), "SERVING")
            self.assertEqual(dc.health_check(HEALTH, server.grpc_port, ""), "UNAVAILABLE",
                             "the main port speaks TLS only")
            import grpc
            with grpc.insecure_channel(f"127.0.0.1:{server.health_port}") as channel:
                self.assertEqual(list_models(channel), "UNIMPLEMENTED",
                                 "the health port serves grpc.health.v1 only")
            # The main port: TLS with the client's certificate and token.
            with self.channel(server.grpc_port) as channel:
                self.assertEqual(list_models(channel), "OK")
            with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                self.assertEqual(list_models(channel), "UNAVAILABLE", "plaintext")
            with self.channel(server.grpc_port, client_certificate=False) as channel:
                self.assertEqual(list_models(channel), "UNAVAILABLE", "no client certificate")
            with self.channel(server.grpc_port, token="0" * 64) as channel:
                self.assertEqual(list_models(channel), "UNAUTHENTICATED", "a wrong token")
            # The certificate holds every name of the server's Services, short and long.
            domain = self.pki.variables["DOMAIN"]
            for service in self.server_services():
                for name in (service, f"{service}.{self.pki.namespace}",
                             f"{service}.{self.pki.namespace}.svc",
                             f"{service}.{self.pki.namespace}.svc.{domain}"):
                    self.served_certificate(server.grpc_port, name)
            with self.assertRaises(ssl.SSLCertVerificationError):
                self.served_certificate(server.grpc_port, "attnserve.elsewhere.svc")
            code, _ = server.terminate(self.pod["terminationGracePeriodSeconds"])
            self.assertEqual(code, 0, server.text())
        finally:
            if server:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    def test_real_server_takes_rotated_secrets_without_a_restart(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_mounts_")
        server = None
        try:
            server = dc.Server(ARGS.build_dir, self.server_args(tmp))
            old_token = self.pki.file(f"{self.CLIENT}.token").decode()
            old_certificate = ssl.PEM_cert_to_DER_cert(self.pki.file("tls.crt").decode())
            self.assertEqual(self.served_certificate(server.grpc_port, self.server_name),
                             old_certificate)
            # A new client (3/4 with its CLIENT), the old one's token revoked (README.md's sed),
            # the Secret updated (4/4); the kubelet swaps the mounted files.
            client_block = re.sub(r"^CLIENT=\w+", "CLIENT=bob", self.pki.blocks[2], count=1,
                                  flags=re.MULTILINE)
            subprocess.check_call(["sed", "-i", f"/^{self.CLIENT}:/d", self.pki.path("tokens")])
            self.pki.run([client_block, self.pki.blocks[3]], after_first=True)
            self.config.update_secret(self.mounted_secret("attnserve-auth"),
                                      self.pki.secrets["attnserve-auth"])
            new_token = self.pki.file("bob.token").decode()
            deadline = time.time() + 10
            while True:
                with self.channel(server.grpc_port, token=new_token) as channel:
                    if list_models(channel) == "OK":
                        break
                self.assertLess(time.time(), deadline, "the new token works within 10 s")
                time.sleep(0.2)
            with self.channel(server.grpc_port, token=old_token) as channel:
                self.assertEqual(list_models(channel), "UNAUTHENTICATED", "the revoked token")
            # As README.md says: with a tokens file the certificate alone does not get in.
            with self.channel(server.grpc_port, token="") as channel:
                self.assertEqual(list_models(channel), "UNAUTHENTICATED")
            # A renewed server certificate (2/4, then 4/4): new connections get it within
            # --tls_reload_interval_s.
            self.pki.run([self.pki.blocks[1], self.pki.blocks[3]], after_first=True)
            new_certificate = ssl.PEM_cert_to_DER_cert(self.pki.file("tls.crt").decode())
            self.assertNotEqual(new_certificate, old_certificate)
            self.config.update_secret(self.mounted_secret("attnserve-tls"),
                                      self.pki.secrets["attnserve-tls"])
            interval = int(self.config.value("tls_reload_interval_s"))
            deadline = time.time() + interval + 10
            while self.served_certificate(server.grpc_port, self.server_name) != new_certificate:
                self.assertLess(time.time(), deadline,
                                f"the renewed certificate is served within {interval} s")
                time.sleep(0.5)
            with self.channel(server.grpc_port, token=new_token) as channel:
                self.assertEqual(list_models(channel), "OK")
        finally:
            if server:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)


class OverlaysTest(unittest.TestCase):
    def test_every_overlay_is_tested(self):
        # kserve is KServe's resources, no Deployment of ours: tests/deploy/kserve_test.py.
        tested = {c.overlay for c in OverlayTest.__subclasses__()} | {"kserve"}
        self.assertEqual(tested, set(dc.overlays(ARGS.source_dir)))


if __name__ == "__main__":
    try:
        unittest.main()
    finally:
        shutil.rmtree(STUBS[3], ignore_errors=True)
