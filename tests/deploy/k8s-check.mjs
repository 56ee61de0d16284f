// Offline checks of deploy/kubernetes (tests/integration/test_deploy_k8s.py).
//
//   node k8s-check.mjs validate FILE...   YAML (multi-document) or JSON files of
//                                         Kubernetes objects; prints one JSON report
//   node k8s-check.mjs render DIR         a minimal kustomize build of DIR, as JSON
//
// validate: each object against the Kubernetes OpenAPI schema of its kind, as the
// kubernetes-models package compiles it (types, enums, formats, required fields),
// plus what those validators do not check: a field the schema does not know (a
// typo such as "procMounts" would otherwise pass). The unknown fields are found by
// giving the validator a Proxy of the object that records every property it reads:
// a field the schema names is read; a map (labels, data) is iterated; anything
// else was never looked at, so the schema has no such field.
//
// render: the subset of kustomize that deploy/kubernetes uses (resources,
// namespace, images, configMapGenerator with files, JSON 6902 patches with a
// target), for machines without kubectl; where kubectl exists the test compares
// the two renders.
import fs from "node:fs";
import path from "node:path";
import { parseAllDocuments } from "yaml";

function load(file) {
  const text = fs.readFileSync(file, "utf8");
  if (file.endsWith(".json")) {
    const v = JSON.parse(text);
    return Array.isArray(v) ? v : [v];
  }
  const docs = parseAllDocuments(text);
  for (const d of docs)
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
  return docs.map((d) => d.toJS()).filter((d) => d !== null && d !== undefined);
}

// ---- validate ----------------------------------------------------------------------

function schemaModule(obj) {
  const [group, version] = obj.apiVersion.includes("/") ? obj.apiVersion.split("/") : ["core", obj.apiVersion];
  const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  return `IoK8sApi${cap(group.split(".")[0])}${cap(version)}${obj.kind}`;
}

function tracked(value, where, seen, iterated) {
  if (value === null || typeof value !== "object") return value;
  return new Proxy(value, {
    get(target, prop, receiver) {
      if (typeof prop === "string" && Object.prototype.hasOwnProperty.call(target, prop)) {
        seen.add(`${where}/${prop}`);
        return tracked(target[prop], `${where}/${prop}`, seen, iterated);
      }
      return Reflect.get(target, prop, receiver);
    },
    ownKeys(target) {
      iterated.add(where);
      return Reflect.ownKeys(target);
    },
  });
}

function unknownFields(value, where, seen, iterated, out) {
  if (value === null || typeof value !== "object") return;
  const mapLike = iterated.has(where);
  for (const [k, v] of Object.entries(value)) {
    const p = `${where}/${k}`;
    if (!Array.isArray(value) && !mapLike && !seen.has(p)) out.push(p);
    else unknownFields(v, p, seen, iterated, out);
  }
}

async function validate(files) {
  const report = { valid: [], errors: [] };
  for (const file of files) {
    for (const obj of load(file)) {
      const name = `${file}: ${obj.kind}/${obj.metadata?.name}`;
      let mod;
      try {
        mod = await import(`kubernetes-models/_schemas/${schemaModule(obj)}`);
      } catch {
        report.errors.push(`${name}: no schema for ${obj.apiVersion} ${obj.kind}`);
        continue;
      }
      const seen = new Set(), iterated = new Set();
      const ok = mod.validate(tracked(obj, "", seen, iterated));
      const errs = ok ? [] : mod.validate.errors.map((e) => `${e.instancePath || "/"} ${e.message || e.keyword + " " + JSON.stringify(e.params)}`);
      const unknown = [];
      unknownFields(obj, "", seen, iterated, unknown);
      for (const u of unknown) errs.push(`${u}: unknown field (not in the ${obj.kind} schema)`);
      if (errs.length) report.errors.push(`${name}: ${errs.join("; ")}`);
      else report.valid.push(name);
    }
  }
  return report;
}

// ---- render ------------------------------------------------------------------------

function decodePointer(p) {
  return p.split("/").slice(1).map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function applyJson6902(doc, ops) {
  for (const op of ops) {
    const keys = decodePointer(op.path);
    const last = keys.pop();
    let parent = doc;
    for (const k of keys) {
      if (parent[k] === undefined) throw new Error(`patch ${op.op} ${op.path}: no ${k}`);
      parent = parent[k];
    }
    if (op.op === "add") {
      if (Array.isArray(parent)) parent.splice(last === "-" ? parent.length : Number(last), 0, op.value);
      else parent[last] = op.value;
    } else if (op.op === "replace") {
      if (!(last in parent)) throw new Error(`patch replace ${op.path}: nothing there`);
      parent[last] = op.value;
    } else if (op.op === "remove") {
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else {
      throw new Error(`patch op ${op.op}: not supported by this minimal render`);
    }
  }
}

const NAMESPACED_NOT = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"]);
const KNOWN = new Set(["apiVersion", "kind", "resources", "namespace", "images", "configMapGenerator",
  "generatorOptions", "patches"]);

function render(dir) {
  const k = load(path.join(dir, "kustomization.yaml"))[0];
  for (const key of Object.keys(k))
    if (!KNOWN.has(key)) throw new Error(`${dir}/kustomization.yaml: ${key}: not supported by this minimal render`);
  let out = [];
  for (const r of k.resources || []) {
    const p = path.join(dir, r);
    out = out.concat(fs.statSync(p).isDirectory() ? render(p) : load(p));
  }
  for (const g of k.configMapGenerator || []) {
    if (!k.generatorOptions?.disableNameSuffixHash) throw new Error("configMapGenerator needs disableNameSuffixHash here");
    const data = {};
    for (const f of g.files) data[path.basename(f)] = fs.readFileSync(path.join(dir, f), "utf8");
    out.push({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: g.name }, data });
  }
  for (const p of k.patches || []) {
    const ops = load(path.join(dir, p.path))[0];
    const t = p.target;
    const hits = out.filter((o) => o.kind === t.kind && o.metadata.name === t.name &&
      o.apiVersion === (t.group ? `${t.group}/${t.version}` : t.version));
    if (hits.length !== 1) throw new Error(`patch ${p.path}: ${hits.length} targets`);
    applyJson6902(hits[0], ops);
  }
  if (k.namespace)
    for (const o of out) if (!NAMESPACED_NOT.has(o.kind)) o.metadata.namespace = k.namespace;
  for (const img of k.images || []) {
    const set = (spec) => {
      for (const c of [...(spec?.containers || []), ...(spec?.initContainers || [])])
        if (c.image === img.name || c.image.startsWith(img.name + ":"))
          c.image = `${img.newName || img.name}:${img.newTag}`;
    };
    for (const o of out) set(o.spec?.template?.spec);
  }
  return out;
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "validate" && args.length) {
  const report = await validate(args);
  console.log(JSON.stringify(report, null, 1));
  process.exit(report.errors.length ? 1 : 0);
} else if (cmd === "render" && args.length === 1) {
  console.log(JSON.stringify(render(args[0]), null, 1));
} else {
  console.error("usage: node k8s-check.mjs validate FILE... | render DIR");
  process.exit(2);
}
