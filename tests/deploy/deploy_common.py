"""What the deploy tests share: the rendered overlays, the server's flags as the Deployment
passes them, a real attnserve-server on loopback (its mounts, Secrets among them, in a
temporary folder), its health service and its /metrics."""
import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kustomize  # noqa: E402


def parse_args():
    """--build-dir and --source-dir (CTest passes both); the rest goes to unittest."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--node-modules")
    args, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    return args


def overlays(source_dir):
    root = os.path.join(source_dir, "deploy/k8s/overlays")
    names = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    return {name: os.path.join(root, name) for name in names}


def render(folder):
    return kustomize.build(folder)


def one(resources, kind, predicate=lambda r: True):
    found = [r for r in resources if r["kind"] == kind and predicate(r)]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}, found {len(found)}")
    return found[0]


def server_container(resources):
    """The Deployment named attnserve (an overlay may add others: redis) and its container
    named attnserve."""
    deployment = one(resources, "Deployment", lambda r: r["metadata"]["name"] == "attnserve")
    containers = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                  if c["name"] == "attnserve"]
    if len(containers) != 1:
        raise AssertionError(f"expected one container named attnserve, found {len(containers)}")
    return deployment, containers[0]


def parse_flag_lines(text):
    """absl --flagfile content: one --flag=value a line; # comments and blank lines skipped."""
    flags = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("--"):
            raise AssertionError(f"flagfile line {line!r} is not --flag=value")
        name, _, value = line[2:].partition("=")
        flags.append((name, value))
    return flags


class ServerConfig:
    """The attnserve-server command line of a rendered overlay: the container's args, with
    every --flagfile read from the ConfigMap mounted where the container mounts it."""

    def __init__(self, resources):
        self.resources = resources
        deployment, container = server_container(resources)
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        self.mounts = {}  # mount path -> the ConfigMap's data
        self.empty_dirs = {}  # mount path -> the emptyDir volume source
        self.secrets = {}  # mount path -> the secret volume source (the Secret is the user's)
        for mount in container.get("volumeMounts", []):
            source = volumes[mount["name"]].get("configMap")
            if source:
                config_map = one(resources, "ConfigMap",
                                 lambda r: r["metadata"]["name"] == source["name"])
                self.mounts[mount["mountPath"]] = config_map.get("data", {})
            elif "emptyDir" in volumes[mount["name"]]:
                self.empty_dirs[mount["mountPath"]] = volumes[mount["name"]]["emptyDir"]
            elif "secret" in volumes[mount["name"]]:
                self.secrets[mount["mountPath"]] = volumes[mount["name"]]["secret"]
        self.args = list(container.get("command", [])[1:]) + list(container.get("args", []))
        self.flags = []  # (name, value) in the order the server applies them
        self.flagfiles = []
        for arg in self.args:
            name, _, value = arg[2:].partition("=")
            if name == "flagfile":
                for path in value.split(","):
                    self.flagfiles.append(path)
                    self.flags += parse_flag_lines(self.file(path))
            else:
                self.flags.append((name, value))

    def file(self, path):
        """The content of a file in a ConfigMap volume, by its path in the container."""
        for mount, data in self.mounts.items():
            if path.startswith(mount.rstrip("/") + "/"):
                key = path[len(mount.rstrip("/")) + 1:]
                if key not in data:
                    raise AssertionError(f"{path}: the ConfigMap mounted at {mount} has no {key}")
                return data[key]
        raise AssertionError(f"{path} is not in a ConfigMap volume of the container")

    def value(self, name, default=None):
        values = [v for n, v in self.flags if n == name]
        return values[-1] if values else default

    def materialize(self, folder, secrets=None):
        """Writes the mounted ConfigMaps under `folder`, makes an empty folder for each
        emptyDir and writes each mounted Secret from `secrets` ({secret name: {key: bytes}},
        what the user would have created) as the kubelet lays it out; returns the args with
        every mount path in them, and in the ConfigMap files (--policy=@...,
        --session_store=dir:..., --tls_cert=...), rewritten to its folder (what the kubelet
        would have mounted)."""
        rewrites = {}
        self.folders = {}  # mount path -> its folder under `folder`
        order = sorted(self.mounts) + sorted(self.empty_dirs) + sorted(self.secrets)
        for i, mount in enumerate(order):
            target = os.path.join(folder, f"mount{i}")
            os.makedirs(target)
            for key, content in self.mounts.get(mount, {}).items():
                with open(os.path.join(target, key), "w") as f:
                    f.write(content)
            if mount in self.secrets:
                name = self.secrets[mount]["secretName"]
                if name not in (secrets or {}):
                    raise AssertionError(f"the Secret {name} mounted at {mount} is not given")
                self.write_secret(mount, target, secrets[name])
            rewrites[mount.rstrip("/")] = self.folders[mount] = target
        # One pass, longest path first, whole path components only: a rewritten path (under
        # /tmp) is never rewritten again, /tmp does not match /tmpfoo, and /etc/attnserve/tls
        # (a Secret) is not taken for a file of /etc/attnserve (the ConfigMap).
        pattern = re.compile(r"(?<![\w./-])(" + "|".join(
            re.escape(m) for m in sorted(rewrites, key=len, reverse=True)) + r")(?![\w.-])")

        def rewrite(text):
            return pattern.sub(lambda m: rewrites[m.group(1)], text)

        for mount in self.mounts:
            target = rewrites[mount.rstrip("/")]
            for name in os.listdir(target):
                path = os.path.join(target, name)
                if not os.path.isfile(path) or os.path.islink(path):
                    continue
                with open(path) as f:
                    text = f.read()
                with open(path, "w") as f:
                    f.write(rewrite(text))
        return [rewrite(arg) for arg in self.args]

    def write_secret(self, mount, target, data):
        """A Secret volume as the kubelet's atomic writer makes and updates it: the files in a
        timestamped folder, `..data` a symlink to it, each key a symlink `key -> ..data/key`;
        an update writes a new folder and renames a new `..data` over the old (one atomic
        step), then removes the old folder. The files get the volume's defaultMode (or the
        item's mode); `items` pick and rename keys, as in the volume source."""
        source = self.secrets[mount]
        mode = source.get("defaultMode", 0o644)
        files = {}  # path in the volume -> (bytes, mode)
        if source.get("items"):
            for item in source["items"]:
                if item["key"] not in data:
                    raise AssertionError(f"Secret {source['secretName']} has no key {item['key']}")
                files[item["path"]] = (data[item["key"]], item.get("mode", mode))
        else:
            files = {key: (value, mode) for key, value in data.items()}
        stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns() % 10**9:09d}"
        os.makedirs(os.path.join(target, stamp))
        for path, (content, file_mode) in files.items():
            full = os.path.join(target, stamp, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(content if isinstance(content, bytes) else content.encode())
            os.chmod(full, file_mode)
        old = os.path.join(target, "..data")
        previous = os.readlink(old) if os.path.islink(old) else None
        os.symlink(stamp, os.path.join(target, "..data_tmp"))
        os.rename(os.path.join(target, "..data_tmp"), old)
        for path in files:
            top = path.split("/")[0]
            link = os.path.join(target, top)
            if not os.path.lexists(link):
                os.symlink(os.path.join("..data", top), link)
        if previous:
            shutil.rmtree(os.path.join(target, previous))

    def update_secret(self, mount, data):
        """What the kubelet does when the Secret mounted at `mount` changes (after
        materialize): the symlink swap of write_secret."""
        self.write_secret(mount, self.folders[mount], data)


def server_binary(build_dir):
    path = os.path.join(build_dir, "server/attnserve-server")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} is not built")
    return path


def server_flag_names(build_dir):
    """Every flag attnserve-server accepts, from its --helpfull."""
    out = subprocess.run([server_binary(build_dir), "--helpfull"], capture_output=True,
                         text=True, timeout=60)
    names = set(re.findall(r"^\s+--(?:\[no\])?([A-Za-z_][A-Za-z0-9_]*) \(", out.stdout + out.stderr,
                           re.MULTILINE))
    if "port" not in names or "flagfile" not in names:
        raise AssertionError("could not read the flags from attnserve-server --helpfull")
    return names


class Server:
    """attnserve-server on 127.0.0.1 with free ports; extra args come after `args`."""

    def __init__(self, build_dir, args=(), env=None):
        self.tmp = tempfile.mkdtemp(prefix="attnserve_deploy_")
        self.log_path = os.path.join(self.tmp, "server.log")
        self.log = open(self.log_path, "w+")
        command = [server_binary(build_dir), *args, "--host=127.0.0.1", "--port=0",
                   "--metrics_port=0", "--http_port=0"]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
        self.health_port = None  # the plaintext health port (--health_port), if it has one
        deadline = time.time() + 120
        while time.time() < deadline:
            text = self.text()
            grpc_port = re.search(r"listening on [\d.]+:(\d+)", text)
            metrics_port = re.search(r"metrics on [\d.]+:(\d+)", text)
            if grpc_port and metrics_port:
                self.grpc_port, self.metrics_port = int(grpc_port.group(1)), int(metrics_port.group(1))
                # Printed before the main port's line, when there is one.
                health_port = re.search(r"^health\b.* on [\d.]+:(\d+)", text, re.MULTILINE)
                if health_port:
                    self.health_port = int(health_port.group(1))
                return
            if self.process.poll() is not None:
                raise AssertionError(f"attnserve-server {' '.join(args)} exited "
                                     f"{self.process.returncode}:\n{text}")
            time.sleep(0.1)
        self.stop()
        raise AssertionError("attnserve-server did not start in 120 s:\n" + self.text())

    def text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def scrape(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def terminate(self, timeout):
        """SIGTERM (what the kubelet sends after preStop); returns (exit code, seconds)."""
        start = time.time()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        return code, time.time() - start

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def grpc_stubs(source_dir):
    """Python modules for attnserve.v1 and grpc.health.v1 (protoc, as metrics_test.py does).
    Returns (inference_pb2, inference_pb2_grpc, health_pb2, stub folder)."""
    stubs = tempfile.mkdtemp(prefix="attnserve_stubs_")
    plugin = shutil.which("grpc_python_plugin")
    subprocess.check_call(
        ["protoc", "-I" + os.path.join(source_dir, "proto"), "--python_out=" + stubs,
         "--grpc_out=" + stubs, "--plugin=protoc-gen-grpc=" + plugin]
        + [os.path.join(source_dir, "proto/attnserve/v1", f)
           for f in ("inference.proto", "tensor.proto", "model_config.proto")])
    health_proto = os.path.join(source_dir, "client/proto/grpc/health/v1/health.proto")
    subprocess.check_call(["protoc", "-I" + os.path.join(source_dir, "client/proto"),
                           "--python_out=" + stubs, health_proto])
    sys.path.insert(0, stubs)
    from attnserve.v1 import inference_pb2, inference_pb2_grpc
    # grpc/health/v1/health_pb2.py would shadow the grpc package: load it by path.
    spec = importlib.util.spec_from_file_location(
        "attnserve_health_pb2", os.path.join(stubs, "grpc/health/v1/health_pb2.py"))
    health_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health_pb2)
    return inference_pb2, inference_pb2_grpc, health_pb2, stubs


def health_check(health_pb2, port, service):
    """grpc.health.v1.Health/Check for `service`: "SERVING", "NOT_SERVING", ... or the gRPC
    status code's name when the call fails (NOT_FOUND: no such service)."""
    import grpc
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        try:
            response = check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        except grpc.RpcError as e:
            return e.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def parse_metrics(text):
    """{metric name: set of label names} from the text exposition format."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = set(re.findall(r'(\w+)="', m.group(2) or ""))
            out.setdefault(m.group(1), set()).update(labels)
    return out
