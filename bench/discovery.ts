/**
 * Discovery benchmark: the `discovery` status view (what GET /status/discovery serialises) with 10, 1,000
 * and 10,000 pods on the node and one service per 10 pods, filled through the real list path from our
 * Kubernetes API server (TLS, in-cluster layout). Figures per size:
 *   - initial list + sync time (wall clock, from start() to connected),
 *   - view assembly after a change (discovered_services recomputed through the label index) and cached,
 *     each with JSON.stringify as the route does, against the reference of a naive services x pods
 *     selector match over the same objects, measured in the same run,
 *   - directory lookups (forContainer, forPid through the main-pid/cgroup cache) against a plain Map.get.
 *
 * Usage: bun bench/discovery.ts [--sizes 10,1000,10000]
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { discoveryHarness, until } from "../test/helpers/discovery-harness";
import { FakeKubeApiServer } from "../test/helpers/fakes/k8s-api-server";
import { makeSelfSignedCert } from "../test/helpers/self-signed-cert";
import { podReady, type Pod, type Service } from "../src/discovery/kubernetes/pods";
import { report, type BenchRow } from "./lib/report";
import type { BenchResultWithCurves } from "./lib/curves";
import { argText } from "./lib/args";

const DEFAULT_SIZES = [10, 1_000, 10_000];
const PODS_PER_SERVICE = 10;
const MIN_ITERATIONS = 20;
const MIN_TIME_MS = 300;
const LOOKUPS = 200_000;
/** The naive reference is quadratic: fewer rounds keep the 10,000-pod run short. */
const NAIVE_MIN_ITERATIONS = 3;

/** Mean milliseconds per call of `fn` over at least `minIterations` calls and MIN_TIME_MS. */
function timeIt(fn: () => void, minIterations = MIN_ITERATIONS): number {
  fn();
  let n = 0;
  const start = performance.now();
  while (n < minIterations || performance.now() - start < MIN_TIME_MS) {
    fn();
    n++;
  }
  return (performance.now() - start) / n;
}

function naiveServices(services: Iterable<Service>, pods: Pod[]): number {
  let total = 0;
  for (const s of services) {
    const sel = Object.entries(s.spec?.selector ?? {});
    if (!sel.length) continue;
    for (const p of pods) if (p.metadata?.namespace === s.metadata?.namespace && podReady(p) && sel.every(([k, v]) => p.metadata?.labels?.[k] === v)) total++;
  }
  return total;
}

const hex = (n: number) => n.toString(16).padStart(64, "0");

async function run(size: number): Promise<Record<string, string>> {
  const cert = makeSelfSignedCert();
  const sa = mkdtempSync(join(tmpdir(), "svc-bench-sa-"));
  writeFileSync(join(sa, "token"), "bench");
  writeFileSync(join(sa, "ca.crt"), cert.cert);
  writeFileSync(join(sa, "namespace"), "bench");
  const api = new FakeKubeApiServer({ tokens: ["bench"], tls: cert });
  const services = Math.max(1, Math.floor(size / PODS_PER_SERVICE));
  for (let i = 0; i < size; i++) {
    const ns = `ns-${i % 10}`;
    api.put("pods", FakeKubeApiServer.pod({ name: `pod-${i}`, namespace: ns, node: "bench-node", labels: { app: `svc-${i % services}`, tier: i % 2 ? "fe" : "be" }, owner: { kind: "ReplicaSet", name: `svc-${i % services}-abc` }, containers: [{ name: "app", id: `containerd://${hex(i + 1)}` }], ready: i % 7 !== 0 }));
  }
  for (let s = 0; s < services; s++) api.put("services", FakeKubeApiServer.service({ name: `svc-${s}`, namespace: `ns-${s % 10}`, selector: { app: `svc-${s}` }, ports: [80, 8080] }));
  const h = discoveryHarness(
    `
agent:
  discovery:
    kubernetes:
      node_name: bench-node
      service_account_dir: ${sa}
    docker:
      enabled: false
    cloud:
      enabled: false
`,
    { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(api.port) },
  );
  const t0 = performance.now();
  await h.start();
  await until("synced", () => h.view().kubernetes.connected && h.view().kubernetes.pods_watched === size, 120_000);
  const syncMs = performance.now() - t0;

  const k8s = h.parts.kubernetes;
  const changed = timeIt(() => {
    k8s.generation++;
    JSON.stringify(h.view());
  });
  const cached = timeIt(() => JSON.stringify(h.view()));
  const snap = k8s.snapshot();
  const pods = [...snap.pods.values()];
  const naive = timeIt(() => naiveServices(snap.services.values(), pods), NAIVE_MIN_ITERATIONS);

  const ids = pods.map((_, i) => hex(i + 1));
  const plain = new Map(ids.map((id) => [id, { id }]));
  const lookup = (fn: (id: string) => unknown) => {
    const start = performance.now();
    for (let i = 0; i < LOOKUPS; i++) fn(ids[i % ids.length]!);
    return ((performance.now() - start) * 1e6) / LOOKUPS;
  };
  const dirNs = lookup((id) => h.parts.workloads.forContainer(id));
  const mapNs = lookup((id) => plain.get(id));
  const viewBytes = JSON.stringify(h.view()).length;
  await h.stop();
  api.stop();
  return {
    pods: String(size),
    services: String(services),
    "list+sync ms": syncMs.toFixed(1),
    "view after change ms": changed.toFixed(3),
    "view cached ms": cached.toFixed(3),
    "ref naive match ms": naive.toFixed(3),
    "view bytes": String(viewBytes),
    "forContainer ns": dirNs.toFixed(0),
    "ref Map.get ns": mapNs.toFixed(0),
  };
}

const sizes = (argText("sizes") ?? DEFAULT_SIZES.join(",")).split(",").map(Number);
const rows: Array<Record<string, string>> = [];
for (const s of sizes) rows.push(await run(s));
const cols = Object.keys(rows[0]!);
const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => r[c]!.length)));
console.log(`bun ${Bun.version}, ${navigator.hardwareConcurrency} cores`);
console.log(cols.map((c, i) => c.padStart(width[i]!)).join("  "));
for (const r of rows) console.log(cols.map((c, i) => r[c]!.padStart(width[i]!)).join("  "));
const discoveryResult: BenchResultWithCurves = {
  bench: "discovery: the discovery status view at 10 to 10,000 pods (real list path from a local Kubernetes API server)",
  rows: rows.flatMap((r): BenchRow[] => [
    { name: `view after a change + JSON.stringify, ${r.pods} pods`, agent: Number(r["view after change ms"]), reference: Number(r["ref naive match ms"]), referenceName: "naive services x pods selector match", unit: "ms" },
    { name: `view cached + JSON.stringify, ${r.pods} pods`, agent: Number(r["view cached ms"]), unit: "ms" },
    { name: `forContainer lookup, ${r.pods} pods`, agent: Number(r["forContainer ns"]), reference: Number(r["ref Map.get ns"]), referenceName: "Map.get", unit: "ns" },
    { name: `initial list + sync, ${r.pods} pods`, agent: Number(r["list+sync ms"]), unit: "ms" },
  ]),
  curves: [
    {
      id: "discovery-view",
      title: "Discovery view (real list path) vs pods",
      xLabel: "pods",
      yLabel: "ms",
      unit: "ms",
      x: rows.map((r) => Number(r.pods)),
      xLog: true,
      yLog: true,
      series: [
        { name: "view after a change", y: rows.map((r) => Number(r["view after change ms"])) },
        { name: "view cached", y: rows.map((r) => Number(r["view cached ms"])) },
        { name: "naive selector match (reference)", y: rows.map((r) => Number(r["ref naive match ms"])) },
      ],
    },
  ],
  notes: [`one service per ${PODS_PER_SERVICE} pods; bun ${Bun.version}`],
};
report(discoveryResult);
