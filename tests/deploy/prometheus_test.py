#!/usr/bin/python3
"""deploy/prometheus and deploy/grafana against promtool, a real scrape and a real Prometheus.

  * `promtool check rules` passes on rules.yml, and on the dashboard's and prometheus-
    adapter's queries written as recording rules (Grafana's variables filled in);
  * `promtool check config` passes on prometheus.yml. Debian's Prometheus 2.42 is built
    without Kubernetes service discovery, so its promtool rejects kubernetes_sd_configs: the
    test checks that block against the fields and meta labels of Prometheus' pod role itself
    and gives promtool the config with that block replaced by file_sd_configs, all else as is;
  * every metric and label that the rules, the dashboard and the adapter use exists in a
    real scrape of attnserve-server after a few calls on every variant;
  * a real Prometheus, running prometheus.yml's relabeling over targets made the way the pod
    role makes them from the rendered Deployment (plus a pod of another app), keeps exactly
    the server's metrics port with the namespace and pod labels, evaluates every alert with
    no error and none firing, and answers every dashboard and adapter query.

Usage: prometheus_test.py --build-dir BUILD --source-dir SOURCE (run by CTest).
"""
import copy
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml

import deploy_common as dc

ARGS = dc.parse_args()
PROM = os.path.join(ARGS.source_dir, "deploy/prometheus")
DASHBOARD = os.path.join(ARGS.source_dir, "deploy/grafana/attnserve.json")
NAMESPACE, POD = "attnserve-test", "attnserve-5d8f7c9b4-x2x7q"
# Labels a scrape adds (prometheus.yml's relabeling; the ServiceMonitor adds the same ones).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "node", "container", "app"}
# Grafana's variables, as the dashboard's "All" would fill them in.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": ".*", "$variant": ".*",
                     "${datasource}": "prometheus"}
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
}
# prometheus.yml may use these of the pod role's meta labels (Prometheus' documentation).
POD_META = re.compile(
    r"__meta_kubernetes_(namespace|pod_(name|ip|ready|phase|node_name|host_ip|uid|"
    r"controller_kind|controller_name|container_(name|id|image|init|port_name|port_number|"
    r"port_protocol)|(label|labelpresent|annotation|annotationpresent)_[a-zA-Z0-9_]+))$")
KUBERNETES_SD_FIELDS = {
    "api_server", "role", "kubeconfig_file", "namespaces", "selectors", "attach_metadata",
    "basic_auth", "authorization", "oauth2", "proxy_url", "no_proxy", "proxy_from_environment",
    "proxy_connect_header", "follow_redirects", "enable_http2", "tls_config", "http_headers"}
GRPC_CODES = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
              "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
              "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
              "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}


def promql_parts(expr):
    """(metric selectors [(name, {label: [values matched]})], grouping labels) of a PromQL
    expression, enough for the queries in deploy/: every name{...} or bare name that is not
    a function, keyword or aggregation, and the labels of by/without/on/ignoring (...)."""
    expr = re.sub(r"#.*", "", expr)
    selectors, grouping = [], set()
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        grouping.update(l.strip() for l in m.group(2).split(",") if l.strip())
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}", expr):
        matchers = {}
        for label, _, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', m.group(2)):
            matchers.setdefault(label, []).append(value)
        selectors.append((m.group(1), matchers))
    bare = re.sub(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{[^}]*\}", " ", expr)
    bare = re.sub(r'"[^"]*"|\[[^\]]*\]', " ", bare)
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", bare):
        if m.group(2) or m.group(1).lower() in PROMQL_WORDS:
            continue  # a function call or a keyword
        selectors.append((m.group(1), {}))
    return selectors, grouping


def fill_variables(expr):
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    if "$" in expr:
        raise AssertionError(f"unknown Grafana variable in {expr}")
    return expr


def load_rules():
    with open(os.path.join(PROM, "rules.yml")) as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


def dashboard_targets():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    return [(panel, target) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def adapter_queries():
    """prometheus-adapter's rules with its templates filled in as it would for one pod."""
    with open(os.path.join(PROM, "adapter-rules.yml")) as f:
        rules = yaml.safe_load(f)["rules"]
    out = []
    for rule in rules:
        series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule["seriesQuery"]).group(1)
        query = (rule["metricsQuery"].replace("<<.Series>>", series)
                 .replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod=~"{POD}"')
                 .replace("<<.GroupBy>>", "pod"))
        out.append((rule, series, query))
    return out


def every_query():
    """(where, PromQL) of every query in deploy/: alerts, dashboard targets, adapter rules."""
    queries = [(f"rules.yml {r.get('alert') or r.get('record')}", r["expr"]) for r in load_rules()]
    queries += [(f"dashboard panel {p['id']} {t['refId']}", fill_variables(t["expr"]))
                for p, t in dashboard_targets()]
    for rule, _, query in adapter_queries():
        queries.append((f"adapter {rule['name']['as']}", query))
        queries.append((f"adapter series {rule['name']['as']}", rule["seriesQuery"]))
    return queries


def recording_rules(queries):
    """The queries as one rules file of recording rules, named query_<n>."""
    return {"groups": [{"name": "deploy_queries", "interval": "1s", "rules": [
        {"record": f"query_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]}]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_targets(deployment, pod_name, namespace, port_for):
    """The targets Prometheus' Kubernetes pod role makes for a pod of `deployment`: one per
    container port, with its meta labels; port_for(name) is where that port listens here."""
    template = deployment["spec"]["template"]
    labels = {"__meta_kubernetes_namespace": namespace,
              "__meta_kubernetes_pod_name": pod_name,
              "__meta_kubernetes_pod_ip": "127.0.0.1",
              "__meta_kubernetes_pod_ready": "true",
              "__meta_kubernetes_pod_phase": "Running",
              "__meta_kubernetes_pod_node_name": "node-1",
              "__meta_kubernetes_pod_host_ip": "127.0.0.1",
              "__meta_kubernetes_pod_controller_kind": "ReplicaSet",
              "__meta_kubernetes_pod_controller_name": pod_name.rsplit("-", 1)[0]}
    for key, value in template["metadata"].get("labels", {}).items():
        labels[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
        labels[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
    targets = []
    for container in template["spec"]["containers"]:
        for port in container.get("ports", []):
            target_labels = dict(labels)
            target_labels.update({
                "__meta_kubernetes_pod_container_name": container["name"],
                "__meta_kubernetes_pod_container_image": container["image"],
                "__meta_kubernetes_pod_container_init": "false",
                "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP")})
            targets.append({"targets": [f"127.0.0.1:{port_for(port.get('name'))}"],
                            "labels": target_labels})
    return targets


def promtool(*args):
    result = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


class StaticTest(unittest.TestCase):
    """What needs no server."""

    def test_promtool_check_rules(self):
        code, out = promtool("check", "rules", os.path.join(PROM, "rules.yml"))
        self.assertEqual(code, 0, out)
        alerts = {r["alert"] for r in load_rules() if "alert" in r}
        for required in ("AttnserveHighErrorRatio", "AttnserveHighP99Latency",
                         "AttnserveStateBudgetNearFull"):
            self.assertIn(required, alerts)

    def test_rules_say_what_they_watch(self):
        for rule in load_rules():
            if "alert" in rule:
                self.assertIn("severity", rule.get("labels", {}), rule["alert"])
                self.assertIn("summary", rule.get("annotations", {}), rule["alert"])
        latency = next(r for r in load_rules() if r.get("alert") == "AttnserveHighP99Latency")
        self.assertRegex(latency["expr"], r"histogram_quantile\(\s*0\.99,\s*sum by \([^)]*\bvariant\b")
        self.assertIn("attnserve_request_duration_seconds_bucket", latency["expr"])

    def test_grpc_codes_in_queries_exist(self):
        for where, expr in every_query():
            for _, matchers in promql_parts(expr)[0]:
                for value in matchers.get("code", []):
                    self.assertTrue(set(value.split("|")) <= GRPC_CODES, f"{where}: {value}")

    def test_queries_as_recording_rules(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "queries.yml")
            with open(path, "w") as f:
                yaml.safe_dump(recording_rules(every_query()), f)
            code, out = promtool("check", "rules", path)
            self.assertEqual(code, 0, out)

    def test_kubernetes_sd_block(self):
        with open(os.path.join(PROM, "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        jobs = {j["job_name"]: j for j in config["scrape_configs"]}
        job = jobs["attnserve"]
        self.assertEqual(len(job["kubernetes_sd_configs"]), 1)
        sd = job["kubernetes_sd_configs"][0]
        self.assertTrue(set(sd) <= KUBERNETES_SD_FIELDS, set(sd) - KUBERNETES_SD_FIELDS)
        self.assertEqual(sd["role"], "pod")
        used = {label for rule in job["relabel_configs"] for label in rule.get("source_labels", [])}
        for label in used:
            self.assertRegex(label, POD_META)
        produced = {rule["target_label"] for rule in job["relabel_configs"] if "target_label" in rule}
        self.assertTrue({"namespace", "pod"} <= produced, "the adapter and rules need both")

    def test_promtool_check_config(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(PROM, "prometheus.yml")) as f:
                config = yaml.safe_load(f)
            for job in config["scrape_configs"]:
                if job.pop("kubernetes_sd_configs", None) is not None:
                    job["file_sd_configs"] = [{"files": ["targets.json"]}]
            with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
                yaml.safe_dump(config, f)
            shutil.copy(os.path.join(PROM, "rules.yml"), tmp)
            code, out = promtool("check", "config", os.path.join(tmp, "prometheus.yml"))
            self.assertEqual(code, 0, out)
            self.assertIn("SUCCESS", out)

    def test_dashboard(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        self.assertEqual(dashboard["uid"], "attnserve")
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        variables = {v["name"] for v in dashboard["templating"]["list"]}
        self.assertEqual(variables, {"datasource", "namespace", "variant"})
        # Panels do not overlap on Grafana's 24-column grid.
        cells = set()
        for panel in dashboard["panels"]:
            g = panel["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, panel["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, f"{panel['title']} overlaps")
                    cells.add((x, y))
        for panel, target in dashboard_targets():
            self.assertEqual(panel["datasource"]["uid"], "${datasource}")
            self.assertTrue(target["expr"].strip(), panel["title"])
        # What the issue asks the dashboard to show.
        exprs = " ".join(t["expr"] for _, t in dashboard_targets())
        for needed in (r"histogram_quantile\(0\.99, sum by \(variant, le\) \(rate\(attnserve_request_duration_seconds_bucket",
                       r"rate\(attnserve_tokens_total", r"attnserve_sessions\{",
                       r"attnserve_session_state_bytes\{", r"rate\(attnserve_policy_decisions_total"):
            self.assertRegex(exprs, needed)

    def test_query_parser(self):
        selectors, grouping = promql_parts(
            'sum by (a, b) (rate(m1{x="1", code=~"A|B"}[5m])) / on() group_left m2 > 0.9 * 4 '
            'and histogram_quantile(0.99, m3_bucket)')
        self.assertEqual(sorted(n for n, _ in selectors), ["m1", "m2", "m3_bucket"])
        self.assertEqual(dict(selectors)["m1"], {"x": ["1"], "code": ["A|B"]})
        self.assertEqual(grouping, {"a", "b"})


class ScrapeTest(unittest.TestCase):
    """Against a real attnserve-server and a real Prometheus."""

    @classmethod
    def setUpClass(cls):
        cls.pb, cls.rpc, _, cls.stubs = dc.grpc_stubs(ARGS.source_dir)
        cls.server = dc.Server(ARGS.build_dir, ["--intra_op_threads=1"])
        cls.tmp = tempfile.mkdtemp(prefix="attnserve_prometheus_")
        cls.prometheus = None
        import grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        stub = cls.rpc.AttnServeStub(channel)
        pb = cls.pb
        for variant in ("standard", "linformer", "linear", "mamba", "hybrid", "sliding_window",
                        "performer", "rwkv", "sparse"):
            stub.Infer(pb.InferRequest(model=variant, tokens=list(range(8))))
        stub.Infer(pb.InferRequest(model="auto", tokens=[1, 2, 3]))
        try:
            stub.Infer(pb.InferRequest(model="no-such-model", tokens=[1]))
        except grpc.RpcError:
            pass

        # A stream left open: a session with state on mamba; appends of 4 and 1 tokens.
        def requests():
            yield pb.StreamRequest(open=pb.StreamOpen(model="mamba"))
            yield pb.StreamRequest(append=pb.StreamAppend(sequence_number=1, tokens=[1, 2, 3, 4]))
            yield pb.StreamRequest(append=pb.StreamAppend(sequence_number=2, tokens=[5]))
        list(stub.Stream(requests()))
        channel.close()
        cls.metrics = dc.parse_metrics(cls.server.scrape())

    @classmethod
    def tearDownClass(cls):
        if cls.prometheus:
            cls.prometheus.terminate()
            cls.prometheus.wait(10)
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        shutil.rmtree(cls.stubs, ignore_errors=True)

    def test_every_metric_and_label_exists(self):
        self.assertIn("attnserve_request_duration_seconds_bucket", self.metrics)
        checked = 0
        for where, expr in every_query():
            selectors, grouping = promql_parts(expr)
            available = set(TARGET_LABELS)
            for name, matchers in selectors:
                self.assertIsNotNone(name, f"{where}: a selector without a metric name")
                if name == "up":  # made by Prometheus for every target
                    labels = {"job", "instance"}
                else:
                    self.assertTrue(name in self.metrics, f"{where}: no metric {name} in the "
                                                          f"scrape ({sorted(self.metrics)})")
                    labels = self.metrics[name]
                    checked += 1
                for label in matchers:
                    self.assertIn(label, labels | TARGET_LABELS, f"{where}: {name} has no {label}")
                available |= labels
            for label in grouping:
                self.assertIn(label, available, f"{where}: grouping by missing label {label}")
        self.assertGreater(checked, 20)

    def test_real_prometheus(self):
        resources = dc.render(dc.overlays(ARGS.source_dir)["cpu"])
        deployment = dc.one(resources, "Deployment")
        ports = {"metrics": self.server.metrics_port, "grpc": self.server.grpc_port}
        targets = pod_targets(deployment, POD, NAMESPACE, ports.get)
        other = copy.deepcopy(deployment)  # a pod of another app, with a metrics port too
        other["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] = "other"
        targets += pod_targets(other, "other-7f9c-abcde", NAMESPACE, ports.get)
        with open(os.path.join(self.tmp, "targets.json"), "w") as f:
            json.dump(targets, f)

        with open(os.path.join(PROM, "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"].update({"scrape_interval": "1s", "scrape_timeout": "1s",
                                 "evaluation_interval": "1s"})
        config.pop("alerting")  # no Alertmanager here; alert states are read from the API
        queries = every_query()[len(load_rules()):]  # the dashboard's and the adapter's
        with open(os.path.join(self.tmp, "queries.yml"), "w") as f:
            yaml.safe_dump(recording_rules(queries), f)
        shutil.copy(os.path.join(PROM, "rules.yml"), self.tmp)
        config["rule_files"] = config["rule_files"] + ["queries.yml"]
        for job in config["scrape_configs"]:
            job.pop("kubernetes_sd_configs")
            job["file_sd_configs"] = [{"files": [os.path.join(self.tmp, "targets.json")],
                                       "refresh_interval": "1s"}]
        with open(os.path.join(self.tmp, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f)
        port = free_port()
        type(self).prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={os.path.join(self.tmp, 'prometheus.yml')}",
             f"--storage.tsdb.path={os.path.join(self.tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def api(path, **params):
            url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return json.load(r)["data"]
            except OSError:
                return None

        def wait_for(predicate, what, timeout=90):
            deadline = time.time() + timeout
            while time.time() < deadline:
                result = predicate()
                if result:
                    return result
                if self.prometheus.poll() is not None:
                    self.fail(f"prometheus exited {self.prometheus.returncode}")
                time.sleep(0.5)
            self.fail(f"timed out waiting for {what}")

        # Relabeling keeps the server's metrics port only, labelled as the rules expect.
        def discovered():  # every target kept or dropped, and each kept one scraped
            data = api("targets")
            return data and len(data["activeTargets"]) + len(data["droppedTargets"]) == \
                len(targets) and all(t["health"] != "unknown" for t in data["activeTargets"]) \
                and data
        active = wait_for(discovered, "the targets to be discovered and scraped")["activeTargets"]
        self.assertEqual(len(active), 1, [t["labels"] for t in active])
        self.assertEqual(active[0]["health"], "up", active[0].get("lastError"))
        labels = active[0]["labels"]
        self.assertEqual(labels["instance"], f"127.0.0.1:{self.server.metrics_port}")
        self.assertEqual((labels["job"], labels["namespace"], labels["pod"], labels["container"]),
                         ("attnserve", NAMESPACE, POD, "attnserve"))
        self.assertEqual(len(api("targets")["droppedTargets"]), len(targets) - 1)

        # Every rule evaluates without error, after at least two scrapes (rate() needs them).
        def evaluated():
            data = api("rules")
            rules = data and [r for g in data["groups"] for r in g["rules"]]
            fresh = rules and all(not r["lastEvaluation"].startswith("0001") for r in rules)
            samples = api("query", query='count_over_time(up{job="attnserve"}[1m])')
            return fresh and samples and samples["result"] and \
                float(samples["result"][0]["value"][1]) >= 3 and rules
        time.sleep(2)
        rules = wait_for(evaluated, "the rules to be evaluated")
        for rule in rules:
            self.assertEqual(rule["health"], "ok", f"{rule['name']}: {rule.get('lastError')}")
            if rule["type"] == "alerting":
                self.assertEqual(rule["state"], "inactive", f"{rule['name']} fires on a healthy server")
        self.assertEqual(len([r for r in rules if r["type"] == "alerting"]),
                         len([r for r in load_rules() if "alert" in r]))

        # Every dashboard and adapter query has an answer; the error ratio has none (no
        # server-side error happened) and the adapter's series query finds the one pod.
        for i, (where, expr) in enumerate(queries):
            if "code=~" in expr:
                continue
            result = wait_for(lambda: (api("query", query=f"query_{i}") or {}).get("result"),
                              f"{where}: {expr}", timeout=30)
            if where.startswith("adapter "):
                self.assertEqual([r["metric"].get("pod") for r in result], [POD], where)


if __name__ == "__main__":
    unittest.main()
