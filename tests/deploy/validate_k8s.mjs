// Validates every Kubernetes manifest under deploy/k8s/base and every rendered overlay (the
// redis overlay's Redis Deployment, Service and NetworkPolicy among them) against the
// Kubernetes OpenAPI schemas (npm kubernetes-models; the ServiceMonitor against
// the prometheus-operator CRD's schema, @kubernetes-models/prometheus-operator), twice:
//   1. the models' validate(): types, required fields, enums, formats (quantities,
//      durations), patterns, as the API server's schema does;
//   2. strict fields: each resource as a TypeScript object literal typed with the model's
//      interface, compiled by tsc, so that an unknown or misspelt field is an error (as
//      `kubectl apply --validate=strict` makes it; validate() alone lets it through).
// KServe's ServingRuntime and InferenceService (overlays/kserve) are checked against the
// schemas of KServe's published CRDs (tests/deploy/schemas/kserve.json, vendored by
// vendor_kserve_schemas.py, its origin recorded in the file) with Ajv, every object schema
// closed to fields it does not name (unless it preserves unknown fields), which is both steps
// at once for them.
// It first shows that both steps reject known-bad resources, so it cannot pass vacuously.
//
// Usage: node validate_k8s.mjs --node-modules DIR --source-dir SOURCE (run by CTest; DIR
// holds tests/deploy/package-lock.json's packages, installed by npm_install.sh).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => (i % 2 ? pairs : [...pairs, [arg, all[i + 1]]]), []));
const nodeModules = path.resolve(args["--node-modules"]);
const sourceDir = path.resolve(args["--source-dir"]);
const here = path.dirname(new URL(import.meta.url).pathname);
const yaml = await import(pathToFileURL(path.join(nodeModules, "yaml/dist/index.js")));

// apiVersion + kind -> the model's module, relative to node_modules.
function modelPath(resource) {
  const [group, version] = resource.apiVersion.includes("/")
    ? resource.apiVersion.split("/") : ["", resource.apiVersion];
  const inCore = group === "" ? `kubernetes-models/${version}/${resource.kind}`
    : `kubernetes-models/${group}/${version}/${resource.kind}`;
  for (const candidate of [inCore,
    `@kubernetes-models/prometheus-operator/${group}/${version}/${resource.kind}`]) {
    if (fs.existsSync(path.join(nodeModules, `${candidate}.js`))) return candidate;
  }
  throw new Error(`no schema for ${resource.apiVersion} ${resource.kind}`);
}

// KServe's CRD schemas, compiled once: an object schema with properties and no
// additionalProperties (or x-kubernetes-preserve-unknown-fields) is closed, as strict field
// validation treats it.
const kserve = JSON.parse(fs.readFileSync(path.join(here, "schemas", "kserve.json"), "utf8"));
const Ajv = (await import(pathToFileURL(path.join(nodeModules, "ajv/dist/ajv.js")))).default;
const ajv = new Ajv({ strict: false, allErrors: true });
// The only formats KServe's schemas use: Kubernetes' integer widths.
ajv.addFormat("int32", { type: "number", validate: (x) => Number.isInteger(x) && x >= -(2 ** 31) && x < 2 ** 31 });
ajv.addFormat("int64", { type: "number", validate: (x) => Number.isInteger(x) });
function closed(schema) {
  if (Array.isArray(schema)) return schema.map(closed);
  if (schema === null || typeof schema !== "object") return schema;
  const out = Object.fromEntries(Object.entries(schema).map(([k, v]) =>
    [k, k === "properties" ? Object.fromEntries(Object.entries(v).map(([p, s]) => [p, closed(s)]))
      : closed(v)]));
  if (out.properties && out.additionalProperties === undefined &&
      !out["x-kubernetes-preserve-unknown-fields"]) {
    out.additionalProperties = false;
  }
  return out;
}
const kserveValidators = Object.fromEntries(Object.entries(kserve.schemas).map(([key, schema]) => {
  // metadata is ObjectMeta, checked by the API server: the CRD only says "object".
  const s = closed(schema);
  s.properties.metadata = { type: "object" };
  s.required = [...new Set([...(s.required ?? []), "apiVersion", "kind", "metadata", "spec"])];
  return [key, ajv.compile(s)];
}));
function kserveKey(resource) {
  return resource.apiVersion?.startsWith("serving.kserve.io/")
    ? `${resource.apiVersion}/${resource.kind}` : null;
}

async function validateSchema(resource) {
  const key = kserveKey(resource);
  if (key !== null) {
    const validate = kserveValidators[key];
    if (!validate) throw new Error(`no KServe schema for ${key}`);
    if (!validate(resource)) throw new Error(ajv.errorsText(validate.errors));
    return;
  }
  const module = await import(pathToFileURL(path.join(nodeModules, `${modelPath(resource)}.js`)));
  new module[resource.kind](resource).validate();
}

// One tsc run over every resource; returns tsc's errors, keyed by the resource's label.
function strictFields(resources) {
  const dir = fs.mkdtempSync(path.join(nodeModules, "..", "strict-"));
  try {
    const lines = [];
    resources.forEach(({ label, resource }, i) => {
      lines.push(`import type { I${resource.kind} as T${i} } from "${modelPath(resource)}";`);
      lines.push(`// ${label}`);
      lines.push(`export const r${i}: T${i} = ${JSON.stringify(resource)};`);
    });
    const file = path.join(dir, "resources.ts");
    fs.writeFileSync(file, lines.join("\n") + "\n");
    const tsc = path.join(nodeModules, "typescript/bin/tsc");
    try {
      execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck",
        "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", file],
        { cwd: dir, encoding: "utf8" });
      return [];
    } catch (e) {
      if (e.status === undefined || !/error TS/.test(e.stdout)) throw e;
      // resources.ts(LINE,COL): error TS...: the resource is the one on that line.
      return e.stdout.trim().split("\n").map((line) => {
        const m = /^.*?\((\d+),\d+\): (error .*)$/.exec(line);
        return m ? `${resources[Math.floor((Number(m[1]) - 1) / 3)]?.label}: ${m[2]}` : line;
      });
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function render(folder) {
  const out = execFileSync("/usr/bin/python3", [path.join(here, "kustomize.py"), folder, "--json"],
    { encoding: "utf8" });
  return JSON.parse(out);
}

const failures = [];
function check(ok, message) {
  if (!ok) failures.push(message);
}

// 1. Both steps reject what they must.
const bad = [
  { label: "non-string data value", resource: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" }, data: { a: 1 } } },
  { label: "bad field", resource: { apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "x" },
    spec: { selector: {}, template: { spec: { containers: [{ name: "c", imagee: "i" }] } } } } },
  { label: "bad interval", resource: { apiVersion: "monitoring.coreos.com/v1", kind: "ServiceMonitor",
    metadata: { name: "x" }, spec: { selector: {}, endpoints: [{ port: "m", interval: "15 seconds" }] } } },
];
bad.push(
  { label: "KServe field misspelt", resource: { apiVersion: "serving.kserve.io/v1beta1", kind: "InferenceService",
    metadata: { name: "x" }, spec: { predictor: { model: { modelFormat: { name: "attnserve" }, runtme: "attnserve" } } } } },
  { label: "KServe wrong type", resource: { apiVersion: "serving.kserve.io/v1alpha1", kind: "ServingRuntime",
    metadata: { name: "x" }, spec: { protocolVersions: "grpc-v2", containers: [{ name: "c" }] } } },
  { label: "KServe missing required", resource: { apiVersion: "serving.kserve.io/v1alpha1", kind: "ServingRuntime",
    metadata: { name: "x" }, spec: { supportedModelFormats: [{ name: "attnserve" }] } } });
for (const { label, resource } of [bad[0], bad[2], bad[3], bad[4], bad[5]]) {
  let rejected = false;
  try { await validateSchema(resource); } catch { rejected = true; }
  check(rejected, `self-check: validate() accepted a resource with a ${label}`);
}
const badErrors = strictFields([bad[1]]);
check(badErrors.some((e) => /imagee/.test(e)), `self-check: tsc accepted an unknown field: ${badErrors}`);

// 2. Every manifest file of the base, and every rendered folder.
const k8s = path.join(sourceDir, "deploy/k8s");
const resources = [];
for (const name of fs.readdirSync(path.join(k8s, "base")).sort()) {
  if (!name.endsWith(".yaml") || name === "kustomization.yaml") continue;
  for (const doc of yaml.parseAllDocuments(fs.readFileSync(path.join(k8s, "base", name), "utf8"))) {
    check(doc.errors.length === 0, `base/${name}: ${doc.errors}`);
    resources.push({ label: `base/${name} ${doc.toJS()?.kind}`, resource: doc.toJS() });
  }
}
const folders = ["base", ...fs.readdirSync(path.join(k8s, "overlays")).sort().map((o) => `overlays/${o}`)];
const kinds = {};
for (const folder of folders) {
  const rendered = render(path.join(k8s, folder));
  kinds[folder] = rendered.map((r) => r.kind).sort();
  for (const resource of rendered) {
    resources.push({ label: `${folder} (rendered) ${resource.kind}/${resource.metadata.name}`, resource });
  }
}
let validated = 0;
for (const { label, resource } of resources) {
  try {
    await validateSchema(resource);
    validated += 1;
  } catch (e) {
    failures.push(`${label}: ${e.message}`);
  }
}
failures.push(...strictFields(resources.filter(({ resource }) => kserveKey(resource) === null)));
// Every folder renders the base's kinds; the redis overlay adds its Redis, the gateway overlay
// Redis and HAProxy.
const baseKinds = ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget",
  "Service", "Service", "ServiceMonitor"];
const added = {
  "overlays/redis": ["Deployment", "NetworkPolicy", "Service"],
  // The redis overlay's, and the gateway's config, Deployment and Service.
  "overlays/gateway": ["Deployment", "NetworkPolicy", "Service", "ConfigMap", "Deployment", "Service"],
};
// The kserve overlay is KServe's resources alone: KServe makes the pods.
const only = { "overlays/kserve": ["InferenceService", "ServingRuntime"] };
for (const folder of folders) {
  const expected = (only[folder] ?? [...baseKinds, ...(added[folder] ?? [])]).sort();
  check(JSON.stringify(kinds[folder]) === JSON.stringify(expected),
    `${folder}: renders ${kinds[folder]}, expected ${expected}`);
}

for (const f of failures) console.error(`FAIL ${f}`);
console.log(`${resources.length} resources (each base file, then ${folders.join(", ")} ` +
  `rendered): ${validated} pass validate(), strict fields ${failures.length ? "see above" : "clean"}`);
console.log(`${failures.length ? "FAILED" : "OK"}: ${failures.length} failure(s)`);
process.exit(failures.length ? 1 : 0);
