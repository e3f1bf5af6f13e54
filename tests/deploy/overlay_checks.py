"""What manifests_test.py checks every overlay for: the flags, ports, probes, deadlines,
volumes and resources of its rendered Deployment against attnserve-server, and a real server
started with exactly its args (OverlayTest, mixed into one TestCase per overlay there), with
the helpers those checks share. Imported by manifests_test.py, which parses the arguments.
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

ARGS = dc.parse_args()
STUBS = dc.grpc_stubs(ARGS.source_dir)
PB, PB_GRPC, HEALTH = STUBS[:3]
# The flags that say where sessions go (the base's config/store.flags, an overlay's store.flags).
STORE_FLAGS = {"session_store", "session_store_max_bytes", "session_store_timeout_ms",
               "session_store_queue_bytes", "checkpoint_every_appends"}
# The flags the secure overlay adds (its security.flags and args).
SECURITY_FLAGS = {"tls_cert", "tls_key", "tls_client_ca", "tls_reload_interval_s",
                  "auth_tokens_file", "admin_principals", "reflection", "health_port",
                  "health_host", "metrics_host", "max_concurrent_streams", "max_metadata_bytes"}
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
# Text that only key or certificate material holds.
SECRET_MARKERS = re.compile(r"-----BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)-----")
REFLECTION_METHODS = ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def quantity_bytes(quantity):
    """A Kubernetes memory or storage quantity ("5Gi", "512M", "1024") in bytes."""
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", str(quantity))
    if not m:
        raise AssertionError(f"quantity {quantity!r} not understood")
    unit = m.group(2) or ""
    if not unit:
        return int(m.group(1))
    scale = 1024 if unit.endswith("i") else 1000
    return int(m.group(1)) * scale ** ("KMGT".index(unit[0]) + 1)


def redis_bytes(value):
    """A Redis memory value ("4gb" is 4 * 2^30, "4g" 4 * 10^9) in bytes."""
    m = re.fullmatch(r"(\d+)(k|kb|m|mb|g|gb)?", value.lower())
    if not m:
        raise AssertionError(f"Redis memory value {value!r} not understood")
    unit = m.group(2) or ""
    if not unit:
        return int(m.group(1))
    scale = 1024 if unit.endswith("b") else 1000
    return int(m.group(1)) * scale ** ("kmg".index(unit[0]) + 1)


def redis_options(args):
    """redis-server's command line (--option value...) as {option: [values]}."""
    options, current = {}, None
    for arg in args:
        if arg.startswith("--"):
            current = arg[2:]
            options[current] = []
        elif current is None:
            raise AssertionError(f"redis-server argument {arg!r} before any --option")
        else:
            options[current].append(arg)
    return options


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRedis:
    """redis-server on 127.0.0.1 with the given args, then a free port and a scratch folder."""

    def __init__(self, args, folder):
        self.port = free_port()
        self.log = open(os.path.join(folder, "redis.log"), "w+")
        self.process = subprocess.Popen(
            ["redis-server", *args, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", folder], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while self.cli("ping") != "PONG":
            if self.process.poll() is not None or time.time() > deadline:
                self.log.flush()
                self.log.seek(0)
                text = self.log.read()
                self.stop()
                raise AssertionError(f"redis-server {' '.join(args)} did not start:\n{text}")
            time.sleep(0.1)

    def cli(self, *command):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *command],
                             capture_output=True, text=True, timeout=30)
        return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout  # "" stays a line

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


def redis_container(resources):
    deployment = dc.one(resources, "Deployment",
                        lambda r: r["metadata"]["name"] == "attnserve-redis")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    if len(containers) != 1:
        raise AssertionError(f"expected one container in the Redis pod, found {len(containers)}")
    return deployment, containers[0]


def call_code(call, *args, **kwargs):
    """The gRPC status code's name of a call ("OK" when it returns)."""
    import grpc
    try:
        call(*args, **kwargs)
    except grpc.RpcError as e:
        return e.code().name
    return "OK"


def list_models(channel, timeout=10):
    return call_code(PB_GRPC.AttnServeStub(channel).ListModels, PB.ListModelsRequest(),
                     timeout=timeout)


def reflection_codes(channel):
    """The status of one ServerReflectionInfo exchange (a list_services request, bytes
    written by hand: field 7, "") on each reflection version's method."""
    codes = []
    for method in REFLECTION_METHODS:
        stream = channel.stream_stream(method, request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        codes.append(call_code(lambda: next(iter(stream(iter([b"\x3a\x00"]), timeout=10)))))
    return codes


def readme_blocks(source_dir, prefix):
    """The ```sh blocks of deploy/README.md whose first line starts with `prefix`, in order."""
    with open(os.path.join(source_dir, "deploy/README.md")) as f:
        text = f.read()
    return [b for b in re.findall(r"^```sh\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
            if b.startswith(prefix)]


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
        # Where the probes go: the plaintext health port when there is one, else the gRPC port.
        cls.health_port = int(cls.config.value("health_port", "-1"))

    def assert_locked_down(self, pod, container):
        """A pod and its container run non-root, seccomp'd, with a read-only root and no
        capabilities."""
        pod_sc, sc = pod["securityContext"], container["securityContext"]
        self.assertTrue(pod_sc["runAsNonRoot"])
        self.assertGreater(pod_sc["runAsUser"], 0)
        self.assertEqual(pod_sc["seccompProfile"]["type"], "RuntimeDefault")
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])

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
        if self.health_port >= 0:
            self.assertEqual(self.ports.get("health"), self.health_port)
        else:
            self.assertNotIn("health", self.ports)
        probe_port = self.health_port if self.health_port >= 0 else self.ports["grpc"]
        for probe in PROBES:
            self.assertEqual(self.container[probe]["grpc"]["port"], probe_port, probe)

    def test_flagfiles_leave_kubelet_variables_to_the_args(self):
        # The kubelet expands $(VAR) in command and args only: in a flagfile the server would
        # get the text "$(POD_IP)".
        for path in self.config.flagfiles:
            for name, value in dc.parse_flag_lines(self.config.file(path)):
                self.assertNotRegex(value, r"\$\(\w+\)", f"{path}: --{name}")
        env = {e["name"] for e in self.container.get("env", [])}
        for arg in self.config.args:
            for name in re.findall(r"\$\((\w+)\)", arg):
                self.assertIn(name, env, f"{arg}: no env {name} for the kubelet to expand")

    def test_no_secret_material_in_the_manifests(self):
        self.assertEqual([r["metadata"]["name"] for r in self.resources if r["kind"] == "Secret"],
                         [], "Secrets are the user's to create (deploy/README.md, Security)")
        self.assertNotRegex(yaml.safe_dump_all(self.resources), SECRET_MARKERS)
        folder = dc.overlays(ARGS.source_dir)[self.overlay]
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), errors="replace") as f:
                self.assertNotRegex(f.read(), SECRET_MARKERS, name)

    def test_secret_volumes_are_whole_read_only_and_private(self):
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        pod_sc = self.pod["securityContext"]
        for mount in self.container["volumeMounts"]:
            source = volumes[mount["name"]].get("secret")
            if source is None:
                continue
            self.assertTrue(mount.get("readOnly"), mount["mountPath"])
            # A subPath mount is never updated: a rotated Secret would not reach the server.
            self.assertNotIn("subPath", mount, mount["mountPath"])
            self.assertNotIn("subPathExpr", mount, mount["mountPath"])
            # Root's files, the pod's fsGroup their group (the kubelet's doing): the server's
            # uid reads them through that group, which must be its own; others nothing.
            mode = source.get("defaultMode", 0o644)
            self.assertEqual(mode & 0o007, 0, f"{mount['mountPath']}: others may read")
            self.assertEqual(mode & 0o040, 0o040, f"{mount['mountPath']}: the group cannot read")
            self.assertEqual(pod_sc.get("fsGroup"), pod_sc["runAsGroup"])
            self.assertFalse(source.get("optional", False), "the server cannot start without it")

    def test_probes_are_grpc_health_checks(self):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertIn("grpc", self.container[probe], probe)
        # A draining pod answers NOT_SERVING for up to --drain_deadline_s: liveness must not
        # restart it for that.
        liveness = self.container["livenessProbe"]
        window = liveness.get("periodSeconds", 10) * liveness.get("failureThreshold", 3)
        self.assertGreater(window, self.drain_seconds())

    def drain_seconds(self):
        """The server's longest shutdown after SIGTERM: calls in flight, then the save of the
        sessions changed since their last write."""
        return (int(self.config.value("drain_deadline_s", "10"))
                + int(self.config.value("drain_save_deadline_s", "10")))

    def test_grace_period_covers_prestop_drain_and_save(self):
        self.assertIsNotNone(self.config.value("drain_save_deadline_s"),
                             "--drain_save_deadline_s is stated with the grace period it needs")
        self.assertGreater(self.pod["terminationGracePeriodSeconds"],
                           prestop_seconds(self.container) + self.drain_seconds())

    def test_security_context(self):
        self.assert_locked_down(self.pod, self.container)
        # The writable places are emptyDirs: /tmp, and the session store's folder if any.
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        tmp = [m for m in self.container["volumeMounts"] if m["mountPath"] == "/tmp"]
        self.assertEqual(len(tmp), 1)
        for mount in self.container["volumeMounts"]:
            if not mount.get("readOnly"):
                self.assertIn("emptyDir", volumes[mount["name"]], mount["mountPath"])
        store = self.config.value("session_store", "")
        expected = {"/tmp"} | ({store[len("dir:"):]} if store.startswith("dir:") else set())
        self.assertEqual(set(self.config.empty_dirs), expected)
        # The image's user is the pod's.
        with open(os.path.join(ARGS.source_dir, "Dockerfile")) as f:
            users = re.findall(r"^USER\s+(\d+)(?::(\d+))?\s*$", f.read(), re.MULTILINE)
        self.assertEqual(int(users[-1][0]), self.pod["securityContext"]["runAsUser"])

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

    def test_session_store(self):
        store = self.config.value("session_store", "")
        self.assertRegex(store, r"^(dir:/|redis://)", "every overlay keeps sessions across restarts")
        self.assertGreater(int(self.config.value("checkpoint_every_appends", "0")), 0,
                           "without checkpoints a crash loses every session changed since a drain")
        state_budget = int(self.config.value("state_budget_bytes"))
        # Session state and the snapshots waiting to be written are both in memory, next to
        # the models (326 MiB resident in scripts/image-test.sh).
        queued = int(self.config.value("session_store_queue_bytes", str(1 << 30)))
        self.assertLessEqual(state_budget + queued + (512 << 20),
                             quantity_bytes(self.container["resources"]["limits"]["memory"]))
        if store.startswith("dir:"):
            # On a disk emptyDir of the pod (memory would count against the container's
            # limit), which the kubelet evicts the pod for filling: above the store's bound,
            # which holds a full drain; the scheduler is asked for all of it.
            folder = store[len("dir:"):]
            self.assertIn(folder, self.config.empty_dirs, "the dir: store is an emptyDir mount")
            volume = self.config.empty_dirs[folder]
            self.assertNotEqual(volume.get("medium"), "Memory")
            max_bytes = int(self.config.value("session_store_max_bytes", str(8 << 30)))
            self.assertGreaterEqual(max_bytes, state_budget, "a full pod's drain fits the store")
            size_limit = quantity_bytes(volume["sizeLimit"])
            self.assertGreaterEqual(size_limit - max_bytes, 512 << 20,
                                    "sizeLimit leaves room for writes in flight")
            requested = self.container["resources"]["requests"].get("ephemeral-storage")
            self.assertIsNotNone(requested, "the pod asks the scheduler for the store's disk")
            self.assertGreaterEqual(quantity_bytes(requested), size_limit)
        else:
            self.assertNotIn("ephemeral-storage", self.container["resources"].get("requests", {}))

    def server_services(self):
        """The Services of attnserve-server (not of another part, e.g. Redis)."""
        return {s["metadata"]["name"]: s for s in self.resources if s["kind"] == "Service"
                and s["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "attnserve"}

    def test_services_select_the_pods(self):
        services = self.server_services()
        headless = [s for s in services.values() if s["spec"].get("clusterIP") == "None"]
        self.assertEqual(len(headless), 1)
        self.assertFalse(headless[0]["spec"].get("publishNotReadyAddresses", False))
        for service in services.values():
            self.assertTrue(labels_match(service["spec"]["selector"], self.pod_labels))
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], self.ports, service["metadata"]["name"])
                self.assertEqual(port["port"], self.ports[port["targetPort"]])
        balanced = [s for s in services.values() if s["spec"].get("clusterIP") != "None"]
        self.assertEqual(len(balanced), 1)
        self.assertEqual({p["name"] for p in balanced[0]["spec"]["ports"]},
                         {"grpc", "http", "metrics"})

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

    # The Secrets the overlay mounts, {name: {key: bytes}}: none but in the secure overlay.
    secrets = {}

    def server_args(self, tmp, redis=None):
        """The server's args as deployed, with its mounts under `tmp` and its Redis, if it
        has one, the LocalRedis `redis`."""
        args = self.config.materialize(tmp, self.secrets)
        # What the kubelet would expand; then the free ports, and the default models (the
        # image's repository holds the same models, written by attnserve-export-model).
        env = {"POD_NAME": f"attnserve-{self.overlay}-test", "POD_IP": "127.0.0.1"}
        args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]
        args.append("--model_repository=")
        if self.health_port >= 0:
            args.append("--health_port=0")  # a free one (dc.Server reads it back)
        if self.config.value("device") == "cuda":
            args.append("--device=cpu")  # no GPU here: everything else as deployed
        if redis is not None:
            args.append(f"--session_store=redis://127.0.0.1:{redis.port}")
        return args

    def local_redis(self, tmp):
        """With a redis:// store: redis-server with the overlay's Redis args (None without
        such a store; the test is skipped without redis-server)."""
        if not self.config.value("session_store", "").startswith("redis://"):
            return None
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            self.skipTest("redis-server and redis-cli are not installed (Debian: redis-server)")
        _, container = redis_container(self.resources)
        return LocalRedis(container.get("args", []), tmp)

    def channel(self, port):
        """A channel to the server's gRPC port as a client of this overlay dials it."""
        import grpc
        return grpc.insecure_channel(f"127.0.0.1:{port}")

    def probe_port(self, server):
        """The server's port that the probes ask (moved to a free one, as its gRPC port)."""
        if self.health_port < 0:
            return server.grpc_port
        self.assertIsNotNone(server.health_port, "--health_port set, no health port printed")
        return server.health_port

    def test_real_server_serves_what_the_probes_ask(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_mounts_")
        redis = server = None
        try:
            redis = self.local_redis(tmp)
            server = dc.Server(ARGS.build_dir, self.server_args(tmp, redis))
            services = {self.container[p]["grpc"].get("service", "") for p in PROBES}
            for service in services:
                # The kubelet's gRPC probe: plaintext, no credentials.
                self.assertEqual(dc.health_check(HEALTH, self.probe_port(server), service),
                                 "SERVING", f"probe service {service!r}")
            self.assertEqual(dc.health_check(HEALTH, self.probe_port(server), "no.such.Service"),
                             "NOT_FOUND")
            self.assertIn("policy [standard up to 4095 tokens", server.text())
            # Reflection as the flag says (on unless turned off).
            with self.channel(server.grpc_port) as channel:
                codes = reflection_codes(channel)
            if self.config.value("reflection", "true") == "false":
                self.assertEqual(codes, ["UNIMPLEMENTED"] * len(codes),
                                 "--reflection=false, yet reflection answers")
            else:
                self.assertIn("OK", codes)
            if self.health_port >= 0:
                # The plaintext health port serves grpc.health.v1 and nothing else.
                import grpc
                with grpc.insecure_channel(f"127.0.0.1:{self.probe_port(server)}") as channel:
                    self.assertEqual(reflection_codes(channel), ["UNIMPLEMENTED"] * 2,
                                     "reflection on the plaintext health port")
            code, seconds = server.terminate(self.pod["terminationGracePeriodSeconds"])
            self.assertEqual(code, 0, server.text())
            self.assertLess(seconds, self.pod["terminationGracePeriodSeconds"]
                            - prestop_seconds(self.container))
        finally:
            if server:
                server.stop()
            if redis:
                redis.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    def test_real_server_keeps_sessions_across_a_restart(self):
        tmp = tempfile.mkdtemp(prefix="attnserve_mounts_")
        store = self.config.value("session_store")
        redis, servers = None, []

        def stored(session_id):
            """Whether the store holds the session (checks its TTL on Redis)."""
            if redis is None:
                names = os.listdir(self.config.folders[store[len("dir:"):]])
                return any(n.startswith(session_id) and ".tmp." not in n for n in names)
            ttl_ms = int(redis.cli("pttl", f"attnserve:session:{session_id}"))
            if ttl_ms == -1:
                raise AssertionError("the session's key has no TTL")
            self.assertLessEqual(ttl_ms, int(self.config.value("session_ttl_s")) * 1000)
            return ttl_ms > 0

        try:
            redis = self.local_redis(tmp)
            args = self.server_args(tmp, redis)
            # A session with two appends (5 tokens), left open: the stream ends without close.
            servers.append(dc.Server(ARGS.build_dir, args))
            with self.channel(servers[0].grpc_port) as channel:
                stub = PB_GRPC.AttnServeStub(channel)
                responses = list(stub.Stream(iter([
                    PB.StreamRequest(open=PB.StreamOpen(model="mamba")),
                    PB.StreamRequest(append=PB.StreamAppend(sequence_number=1, tokens=[1, 2, 3])),
                    PB.StreamRequest(append=PB.StreamAppend(sequence_number=2, tokens=[4, 5])),
                ]), timeout=60))
            session_id = responses[0].opened.session_id
            self.assertEqual(responses[-1].result.position, 5)
            # Fewer appends than a checkpoint: the drain writes it. With a checkpoint at every
            # append (the gateway overlay) each result came after its write: stored already.
            if int(self.config.value("checkpoint_every_appends")) <= 2:
                self.assertTrue(responses[-1].result.stored)
                self.assertTrue(stored(session_id), "stored before its result was sent")
            code, _ = servers[0].terminate(self.pod["terminationGracePeriodSeconds"])
            self.assertEqual(code, 0, servers[0].text())
            self.assertTrue(stored(session_id), f"{store}: no session {session_id} after the "
                            f"drain:\n{servers[0].text()}")

            # A new process, the same store: the session is where it was, and goes on.
            servers.append(dc.Server(ARGS.build_dir, args))
            with self.channel(servers[1].grpc_port) as channel:
                stub = PB_GRPC.AttnServeStub(channel)
                info = stub.GetSession(PB.GetSessionRequest(session_id=session_id), timeout=30)
                self.assertEqual((info.model, info.position, info.last_sequence_number),
                                 ("mamba", 5, 2))
                responses = list(stub.Stream(iter([
                    PB.StreamRequest(open=PB.StreamOpen(session_id=session_id)),
                    PB.StreamRequest(append=PB.StreamAppend(sequence_number=3, tokens=[6])),
                ]), timeout=60))
                self.assertEqual(responses[0].opened.position, 5)
                self.assertEqual(responses[-1].result.position, 6)
                stub.CloseSession(PB.CloseSessionRequest(session_id=session_id), timeout=30)
            deadline = time.time() + 10
            while stored(session_id) and time.time() < deadline:
                time.sleep(0.1)
            self.assertFalse(stored(session_id), "closing a session deletes it from the store")
        finally:
            for server in servers:
                server.stop()
            if redis:
                redis.stop()
            shutil.rmtree(tmp, ignore_errors=True)
