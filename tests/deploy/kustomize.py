#!/usr/bin/python3
"""A small kustomize renderer: the subset of `kustomize build` that deploy/k8s uses.

kustomize (and kubectl, which embeds it) is not packaged in Debian 12, so the deploy tests
render the overlays with this module. It does what kustomize v5 does for these features and
refuses every other one (an unknown kustomization field is an error, never ignored):

  * resources: YAML files (one or more documents) and folders holding a kustomization;
  * configMapGenerator: files (KEY=PATH or PATH), literals (KEY=VALUE), behavior create,
    merge or replace, and kustomize's content-hash name suffix, with the references to the
    ConfigMap (volumes, projected volumes, envFrom, env valueFrom) renamed to match;
  * patches: a strategic-merge patch or a JSON 6902 patch (add, remove, replace, test), from
    `path` or inline `patch`, for the resource that the patch names or that `target` selects
    (group, version, kind, name);
  * images: name -> newName, newTag, digest in every container and initContainer.

tests/deploy/kustomize_test.py holds it to kustomize's behaviour, including the whole output
of `kubectl kustomize` for every overlay when kubectl is installed.

Usage: kustomize.py DIR [--json]   (YAML documents on stdout, or one JSON list)
"""
import copy
import hashlib
import json
import os
import re
import sys

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "configMapGenerator", "patches", "images"}

# Strategic-merge keys of the lists this subset merges (Kubernetes' patchMergeKey); every
# other list is replaced by the patch's, as in Kubernetes for lists without a merge key.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}


class KustomizeError(Exception):
    pass


def _load_yaml_documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _kustomization_file(folder):
    for name in KUSTOMIZATION_FILES:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    raise KustomizeError(f"no kustomization file in {folder}")


def _inside(root, path):
    """kustomize's load restrictor: files must lie under the kustomization's folder."""
    root, path = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([root, path]) != root:
        raise KustomizeError(f"{path} is outside the kustomization root {root}")
    return path


def _group_version(api_version):
    group, _, version = api_version.rpartition("/")
    return group, version


def _resource_id(res):
    return (res.get("apiVersion", ""), res.get("kind", ""), res.get("metadata", {}).get("name", ""))


# --- ConfigMap generation and its hash -----------------------------------------------------

def _go_json(value):
    """json.Marshal's output in Go: sorted keys, no spaces, <, >, & and U+2028/9 escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def config_map_hash(config_map):
    """kustomize's name suffix for a generated ConfigMap (api/hasher in kustomize v5)."""
    # kustomize hashes the generated object before it has a name: "name" is always "".
    encoded = {"kind": "ConfigMap", "name": "",
               "data": config_map.get("data", {})}
    if config_map.get("binaryData"):
        encoded["binaryData"] = config_map["binaryData"]
    if "immutable" in config_map:
        encoded["immutable"] = config_map["immutable"]
    digest = hashlib.sha256(_go_json(encoded).encode()).hexdigest()
    return digest[:10].translate(str.maketrans({"0": "g", "1": "h", "3": "k", "a": "m", "e": "t"}))


def _generate_config_map(root, spec):
    unknown = set(spec) - {"name", "behavior", "files", "literals"}
    if unknown:
        raise KustomizeError(f"configMapGenerator fields not supported: {sorted(unknown)}")
    data = {}
    for entry in spec.get("files", []):
        key, sep, path = entry.partition("=")
        if not sep:
            key, path = os.path.basename(entry), entry
        with open(_inside(root, os.path.join(root, path))) as f:
            data[key] = f.read()
    for entry in spec.get("literals", []):
        key, sep, value = entry.partition("=")
        if not sep:
            raise KustomizeError(f"literal {entry!r} is not KEY=VALUE")
        data[key] = value
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": spec["name"]},
            "data": data}


# --- patches ---------------------------------------------------------------------------

def strategic_merge(target, patch):
    """Kubernetes' strategic merge of `patch` into `target` (maps merge, null deletes, lists
    with a merge key merge by it, other lists are replaced). Returns the merged value."""
    if not isinstance(target, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target)
    for key, value in patch.items():
        if isinstance(key, str) and key.startswith("$"):
            raise KustomizeError(f"strategic-merge directive {key} not supported")
        if value is None:
            merged.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = _merge_list(merged[key], value, MERGE_KEYS[key])
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = strategic_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merge_list(target, patch, merge_key):
    """kustomize's order: the patch's items (merged into the target's item of the same key
    when there is one), then the target's items that the patch does not name."""
    by_key = {}
    for item in target:
        by_key.setdefault(item.get(merge_key), item)
    merged, named = [], set()
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise KustomizeError(f"list item {item!r} has no merge key {merge_key!r}")
        key = item[merge_key]
        named.add(key)
        merged.append(strategic_merge(by_key[key], item) if key in by_key else copy.deepcopy(item))
    merged += [copy.deepcopy(item) for item in target if item.get(merge_key) not in named]
    return merged


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} does not start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, tokens, path):
    node = doc
    for token in tokens:
        if isinstance(node, list):
            if not token.isdigit() or int(token) >= len(node):
                raise KustomizeError(f"JSON patch path {path}: no index {token}")
            node = node[int(token)]
        elif isinstance(node, dict):
            if token not in node:
                raise KustomizeError(f"JSON patch path {path}: no member {token}")
            node = node[token]
        else:
            raise KustomizeError(f"JSON patch path {path}: {token} inside a scalar")
    return node


def json6902(doc, operations):
    """RFC 6902 add, remove, replace and test on a copy of `doc`."""
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, path = op.get("op"), op.get("path")
        tokens = _pointer(path)
        if not tokens:
            raise KustomizeError("JSON patch on the whole document is not supported")
        parent, last = _walk(doc, tokens[:-1], path), tokens[-1]
        if kind == "test":
            if _walk(doc, tokens, path) != op["value"]:
                raise KustomizeError(f"JSON patch test failed at {path}")
        elif kind == "add":
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if index > len(parent):
                    raise KustomizeError(f"JSON patch add {path}: index out of range")
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind in ("remove", "replace"):
            _walk(doc, tokens, path)  # must exist
            if kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            else:
                parent[int(last) if isinstance(parent, list) else last] = copy.deepcopy(op["value"])
        else:
            raise KustomizeError(f"JSON patch op {kind!r} not supported")
    return doc


def _matches(res, target):
    unknown = set(target) - {"group", "version", "kind", "name"}
    if unknown:
        raise KustomizeError(f"patch target fields not supported: {sorted(unknown)}")
    group, version = _group_version(res.get("apiVersion", ""))
    if "group" in target and target["group"] != group:
        return False
    if "version" in target and target["version"] != version:
        return False
    if "kind" in target and target["kind"] != res.get("kind"):
        return False
    if "name" in target and not re.fullmatch(target["name"], res["metadata"]["name"]):
        return False
    return True


def _apply_patch(resources, root, spec):
    unknown = set(spec) - {"path", "patch", "target"}
    if unknown:
        raise KustomizeError(f"patch fields not supported: {sorted(unknown)}")
    if ("path" in spec) == ("patch" in spec):
        raise KustomizeError("a patch needs exactly one of path and patch")
    if "path" in spec:
        with open(_inside(root, os.path.join(root, spec["path"]))) as f:
            text = f.read()
    else:
        text = spec["patch"]
    body = yaml.safe_load(text)
    if isinstance(body, list):  # JSON 6902
        if "target" not in spec:
            raise KustomizeError("a JSON 6902 patch needs a target")
        targets = [i for i, r in enumerate(resources) if _matches(r, spec["target"])]
        if not targets:
            raise KustomizeError(f"no resource matches patch target {spec['target']}")
        for i in targets:
            resources[i] = json6902(resources[i], body)
        return
    if "target" in spec:
        targets = [i for i, r in enumerate(resources) if _matches(r, spec["target"])]
    else:
        group, _ = _group_version(body.get("apiVersion", ""))
        targets = [i for i, r in enumerate(resources)
                   if r.get("kind") == body.get("kind")
                   and _group_version(r.get("apiVersion", ""))[0] == group
                   and r["metadata"]["name"] == body.get("metadata", {}).get("name")]
    if not targets:
        raise KustomizeError(f"no resource matches strategic-merge patch "
                             f"{body.get('kind')}/{body.get('metadata', {}).get('name')}")
    for i in targets:
        patch = copy.deepcopy(body)
        if "target" in spec:  # the target chooses; the patch's own name may differ
            patch.setdefault("metadata", {})["name"] = resources[i]["metadata"]["name"]
        resources[i] = strategic_merge(resources[i], patch)


# --- images ------------------------------------------------------------------------------

def _split_image(image):
    name, digest = image, None
    if "@" in name:
        name, digest = name.split("@", 1)
    tag = None
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest


def _set_images(node, rules):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict) and "image" in container:
                        container["image"] = _new_image(container["image"], rules)
            _set_images(value, rules)
    elif isinstance(node, list):
        for item in node:
            _set_images(item, rules)


def _new_image(image, rules):
    name, tag, digest = _split_image(image)
    for rule in rules:
        unknown = set(rule) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise KustomizeError(f"images fields not supported: {sorted(unknown)}")
        if rule["name"] != name:
            continue
        name = rule.get("newName", name)
        if "digest" in rule:
            tag, digest = None, rule["digest"]
        elif "newTag" in rule:
            tag, digest = str(rule["newTag"]), None
        break
    return name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


# --- build -------------------------------------------------------------------------------

def _build(folder, hashed):
    """Resources of one kustomization; `hashed` collects the ids of generated ConfigMaps,
    whose hash suffix is added once, at the end of the whole build, as kustomize does."""
    path = _kustomization_file(folder)
    with open(path) as f:
        kustomization = yaml.safe_load(f) or {}
    unknown = set(kustomization) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: fields not supported by this renderer: {sorted(unknown)}")
    resources = []
    for entry in kustomization.get("resources", []):
        target = os.path.realpath(os.path.join(folder, entry))
        if os.path.isdir(target):  # another kustomization: may lie anywhere
            resources += _build(target, hashed)
        else:  # a file: only under this kustomization's folder
            resources += _load_yaml_documents(_inside(folder, target))
    seen = set()
    for res in resources:
        rid = _resource_id(res)
        if rid in seen:
            raise KustomizeError(f"{path}: resource {rid} appears twice")
        seen.add(rid)

    for spec in kustomization.get("configMapGenerator", []):
        generated = _generate_config_map(folder, spec)
        behavior = spec.get("behavior", "create")
        existing = [i for i, r in enumerate(resources)
                    if r.get("kind") == "ConfigMap" and r["metadata"]["name"] == spec["name"]]
        if behavior == "create":
            if existing:
                raise KustomizeError(f"{path}: ConfigMap {spec['name']} exists; use behavior merge")
            resources.append(generated)
            hashed.add(_resource_id(generated))
        elif behavior in ("merge", "replace"):
            if not existing:
                raise KustomizeError(f"{path}: no ConfigMap {spec['name']} to {behavior}")
            i = existing[0]
            if behavior == "merge":
                resources[i] = copy.deepcopy(resources[i])
                resources[i].setdefault("data", {}).update(generated["data"])
            else:
                resources[i] = generated
        else:
            raise KustomizeError(f"{path}: configMapGenerator behavior {behavior!r}")

    for spec in kustomization.get("patches", []):
        _apply_patch(resources, folder, spec)
    if kustomization.get("images"):
        for res in resources:
            _set_images(res, kustomization["images"])
    return resources


def _rename_config_map_references(node, renames):
    if isinstance(node, dict):
        for key in ("configMap", "configMapRef", "configMapKeyRef"):
            ref = node.get(key)
            if isinstance(ref, dict) and ref.get("name") in renames:
                ref["name"] = renames[ref["name"]]
        for value in node.values():
            _rename_config_map_references(value, renames)
    elif isinstance(node, list):
        for item in node:
            _rename_config_map_references(item, renames)


def build(folder):
    """The resources `kustomize build folder` prints, as a list of dicts."""
    hashed = set()
    resources = _build(os.path.realpath(folder), hashed)
    renames = {}
    for res in resources:
        if _resource_id(res) in hashed:
            old = res["metadata"]["name"]
            res["metadata"]["name"] = f"{old}-{config_map_hash(res)}"
            renames[old] = res["metadata"]["name"]
    for res in resources:
        if res.get("kind") != "ConfigMap":
            _rename_config_map_references(res, renames)
    return resources


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--json"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        resources = build(argv[1])
    except (KustomizeError, OSError, yaml.YAMLError) as e:
        print(f"kustomize.py: {e}", file=sys.stderr)
        return 1
    if len(argv) == 3:
        json.dump(resources, sys.stdout, indent=1)
        print()
    else:
        print(yaml.safe_dump_all(resources, sort_keys=True), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
