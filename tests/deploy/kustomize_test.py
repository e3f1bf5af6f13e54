#!/usr/bin/python3
"""tests/deploy/kustomize.py against kustomize's behaviour.

The expected values were taken from `kubectl kustomize` (kustomize v5.5.0) on the same
inputs. Where kubectl with kustomize is installed, the test also renders every folder under
deploy/k8s and the fixtures below with it and requires the same resources.

Usage: kustomize_test.py --source-dir SOURCE [--build-dir BUILD] (run by CTest).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kustomize  # noqa: E402

parser = argparse.ArgumentParser(add_help=False)
parser.add_argument("--source-dir", required=True)
parser.add_argument("--build-dir")
ARGS, rest = parser.parse_known_args()
sys.argv[1:] = rest

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      tolerations:
        - {key: a, operator: Exists}
      containers:
        - name: web
          image: registry.example:5000/team/web:1.0
          args: ["--a", "--b"]
          env:
            - {name: KEEP, value: "1"}
            - {name: CHANGE, value: "old"}
          resources:
            limits: {cpu: "1", memory: 1Gi}
          volumeMounts:
            - {name: config, mountPath: /etc/web}
        - name: sidecar
          image: sidecar
      volumes:
        - name: config
          configMap: {name: web-config}
"""


def write(folder, files):
    for name, text in files.items():
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))


def kubectl_kustomize(folder):
    """`kubectl kustomize folder` as {(kind, name): resource}, or None without kubectl."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    out = subprocess.run([kubectl, "kustomize", folder], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder}: {out.stderr}")
    return {(r["kind"], r["metadata"]["name"]): r for r in yaml.safe_load_all(out.stdout) if r}


class RendererTest(unittest.TestCase):
    maxDiff = None
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kustomize_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def build(self, files, folder=""):
        write(self.tmp, files)
        path = os.path.join(self.tmp, folder)
        resources = {(r["kind"], r["metadata"]["name"]): r for r in kustomize.build(path)}
        theirs = kubectl_kustomize(path)
        if theirs is not None:
            self.assertEqual(resources, theirs, "differs from kubectl kustomize")
        return resources

    def test_config_map_hash_is_kustomizes(self):
        # Names and data from kubectl kustomize: the hash, its letter mapping, Go's JSON
        # escaping of <, > and &, and non-ASCII text.
        out = self.build({"kustomization.yaml": """\
            configMapGenerator:
              - name: a
                literals: [k=v]
              - name: html
                literals: ["a=<b> & c", "z=é ü", "m=line1\\nline2"]
            """})
        self.assertIn(("ConfigMap", "a-bdg947hgcc"), out)
        self.assertIn(("ConfigMap", "html-4c8d2845c5"), out)

    def test_overlay_merges_config_map_and_renames_references(self):
        out = self.build({
            "base/kustomization.yaml": """\
                resources: [deployment.yaml]
                configMapGenerator:
                  - name: web-config
                    files: [web.flags, extra.flags]
                """,
            "base/deployment.yaml": DEPLOYMENT,
            "base/web.flags": "--x=1\n",
            "base/extra.flags": "# none\n",
            "overlay/kustomization.yaml": """\
                resources: [../base]
                configMapGenerator:
                  - name: web-config
                    behavior: merge
                    files: [extra.flags]
                """,
            "overlay/extra.flags": "--y=2\n",
        }, "overlay")
        config_maps = [r for (kind, _), r in out.items() if kind == "ConfigMap"]
        self.assertEqual(len(config_maps), 1)
        self.assertEqual(config_maps[0]["data"], {"web.flags": "--x=1\n", "extra.flags": "--y=2\n"})
        name = config_maps[0]["metadata"]["name"]
        self.assertRegex(name, r"^web-config-[a-z0-9]{10}$")
        volume = out[("Deployment", "web")]["spec"]["template"]["spec"]["volumes"][0]
        self.assertEqual(volume["configMap"]["name"], name)

    def test_strategic_merge_patch(self):
        out = self.build({
            "kustomization.yaml": """\
                resources: [deployment.yaml]
                patches:
                  - path: patch.yaml
                """,
            "deployment.yaml": DEPLOYMENT,
            "patch.yaml": """\
                apiVersion: apps/v1
                kind: Deployment
                metadata:
                  name: web
                spec:
                  template:
                    spec:
                      nodeSelector: {gpu: "true"}
                      tolerations:
                        - {key: b, operator: Exists}
                      containers:
                        - name: web
                          args: ["--c"]
                          env:
                            - {name: CHANGE, value: "new"}
                            - {name: ADDED, value: "2"}
                          resources:
                            limits: {nvidia.com/gpu: "1", memory: null}
                """,
        })
        spec = out[("Deployment", "web")]["spec"]["template"]["spec"]
        web = spec["containers"][0]
        self.assertEqual([c["name"] for c in spec["containers"]], ["web", "sidecar"])
        self.assertEqual(web["args"], ["--c"])  # no merge key: replaced
        self.assertEqual(spec["tolerations"], [{"key": "b", "operator": "Exists"}])
        # kustomize puts the patch's items first, then the ones it does not name.
        self.assertEqual(web["env"], [{"name": "CHANGE", "value": "new"},
                                      {"name": "ADDED", "value": "2"},
                                      {"name": "KEEP", "value": "1"}])
        self.assertEqual(web["resources"]["limits"], {"cpu": "1", "nvidia.com/gpu": "1"})
        self.assertEqual(spec["nodeSelector"], {"gpu": "true"})

    def test_json6902_patch_with_target(self):
        out = self.build({
            "kustomization.yaml": """\
                resources: [deployment.yaml]
                patches:
                  - target: {group: apps, version: v1, kind: Deployment, name: w.b}
                    patch: |-
                      - op: test
                        path: /spec/template/spec/containers/0/name
                        value: web
                      - op: add
                        path: /spec/template/spec/containers/0/args/-
                        value: --z
                      - op: replace
                        path: /spec/template/spec/containers/1/image
                        value: sidecar:2
                      - op: remove
                        path: /spec/template/spec/tolerations
                      - op: add
                        path: /spec/replicas
                        value: 3
                """,
            "deployment.yaml": DEPLOYMENT,
        })
        deployment = out[("Deployment", "web")]
        spec = deployment["spec"]["template"]["spec"]
        self.assertEqual(spec["containers"][0]["args"], ["--a", "--b", "--z"])
        self.assertEqual(spec["containers"][1]["image"], "sidecar:2")
        self.assertNotIn("tolerations", spec)
        self.assertEqual(deployment["spec"]["replicas"], 3)

    def test_images(self):
        out = self.build({
            "kustomization.yaml": """\
                resources: [deployment.yaml]
                images:
                  - name: registry.example:5000/team/web
                    newTag: "2.0"
                  - name: sidecar
                    newName: other/sidecar
                    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
                """,
            "deployment.yaml": DEPLOYMENT,
        })
        containers = out[("Deployment", "web")]["spec"]["template"]["spec"]["containers"]
        self.assertEqual(containers[0]["image"], "registry.example:5000/team/web:2.0")
        self.assertEqual(containers[1]["image"], "other/sidecar@sha256:0123456789abcdef"
                                                 "0123456789abcdef0123456789abcdef0123456789abcdef")

    def test_refuses_what_it_does_not_do(self):
        write(self.tmp, {"kustomization.yaml": "resources: [d.yaml]\nnamePrefix: x-\n",
                         "d.yaml": DEPLOYMENT})
        with self.assertRaisesRegex(kustomize.KustomizeError, "namePrefix"):
            kustomize.build(self.tmp)
        write(self.tmp, {"kustomization.yaml": "configMapGenerator:\n"
                                               "  - {name: c, files: [../outside]}\n"})
        with self.assertRaisesRegex(kustomize.KustomizeError, "outside the kustomization root"):
            kustomize.build(self.tmp)
        write(self.tmp, {"kustomization.yaml": "resources: [d.yaml]\npatches:\n"
                                               "  - patch: '[{op: test, path: /kind, value: X}]'\n"
                                               "    target: {kind: Deployment}\n"})
        with self.assertRaisesRegex(kustomize.KustomizeError, "test failed"):
            kustomize.build(self.tmp)

    def test_deploy_folders_render_as_kubectl_does(self):
        root = os.path.join(ARGS.source_dir, "deploy/k8s")
        folders = [os.path.join(root, "base")] + [
            os.path.join(root, "overlays", n) for n in sorted(os.listdir(os.path.join(root, "overlays")))]
        for folder in folders:
            resources = {(r["kind"], r["metadata"]["name"]): r for r in kustomize.build(folder)}
            # The kserve overlay is KServe's two resources; every other folder the base's.
            least = 2 if os.path.basename(folder) == "kserve" else 7
            self.assertGreaterEqual(len(resources), least, folder)
            theirs = kubectl_kustomize(folder)
            if theirs is None:
                print(f"note: no kubectl here; {folder} rendered by kustomize.py only")
            else:
                self.assertEqual(resources, theirs, f"{folder} differs from kubectl kustomize")


if __name__ == "__main__":
    unittest.main()
