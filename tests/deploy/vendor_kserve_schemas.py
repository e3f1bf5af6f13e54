#!/usr/bin/python3
"""Writes tests/deploy/schemas/kserve.json: the OpenAPI v3 schemas of KServe's ServingRuntime
(v1alpha1) and InferenceService (v1beta1), taken from KServe's published CRDs
(github.com/kserve/kserve, config/crd/full/serving.kserve.io_servingruntimes.yaml and
serving.kserve.io_inferenceservices.yaml), for validate_k8s.mjs. Only what the kserve overlay
can use is kept: the ServingRuntime's whole schema; of the InferenceService, spec.predictor
without its framework-specific predictors (sklearn, triton, ...) and workerSpec, and no
transformer, explainer or status. Not run by the tests; rerun by hand to update:

  vendor_kserve_schemas.py KSERVE_CHECKOUT COMMIT > tests/deploy/schemas/kserve.json
"""

import json
import os
import sys

import yaml

FRAMEWORKS = ("huggingface", "lightgbm", "onnx", "paddle", "pmml", "pytorch", "sklearn",
              "tensorflow", "triton", "xgboost", "workerSpec")


def schema(checkout, name, version):
    with open(os.path.join(checkout, "config/crd/full", name)) as f:
        crd = yaml.safe_load(f)
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return crd["spec"]["group"], crd["spec"]["names"]["kind"], v["schema"]["openAPIV3Schema"]


def main():
    checkout, commit = sys.argv[1], sys.argv[2]
    out = {"origin": {"repository": "https://github.com/kserve/kserve", "commit": commit,
                      "files": ["config/crd/full/serving.kserve.io_servingruntimes.yaml",
                                "config/crd/full/serving.kserve.io_inferenceservices.yaml"],
                      "license": "Apache-2.0",
                      "pruned": "InferenceService: spec.predictor only, without " +
                                ", ".join(FRAMEWORKS) + "; no status"},
           "schemas": {}}
    group, kind, s = schema(checkout, "serving.kserve.io_servingruntimes.yaml", "v1alpha1")
    s["properties"].pop("status", None)
    out["schemas"]["%s/v1alpha1/%s" % (group, kind)] = s
    group, kind, s = schema(checkout, "serving.kserve.io_inferenceservices.yaml", "v1beta1")
    s["properties"].pop("status", None)
    spec = s["properties"]["spec"]
    spec["properties"] = {"predictor": spec["properties"]["predictor"]}
    for name in FRAMEWORKS:
        spec["properties"]["predictor"]["properties"].pop(name, None)
    out["schemas"]["%s/v1beta1/%s" % (group, kind)] = s
    json.dump(out, sys.stdout, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
