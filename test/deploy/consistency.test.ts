/**
 * The deployment files agree with the binary and with each other:
 * - deploy/kubernetes/svc-agent.yaml is exactly the Helm chart rendered with its defaults, and every
 *   object has only fields the Kubernetes API knows (round trip through @kubernetes/client-node's models);
 * - the ConfigMap's configuration passes `svc-agent --validate-config`; every ${VAR} it names is set in
 *   the container's environment; every value under the chart's `config` is a key of the configuration
 *   schema, and every other value is used by a template;
 * - ports, probe paths and the metrics path come from the schema's defaults and the ConfigMap, and the
 *   binary run with the ConfigMap's configuration really answers on them (probes and scrape without a
 *   token, /status only with it);
 * - the memory request and limit are derived from the memory limiter's defaults (src/memory): in a cgroup limited
 *   to the DaemonSet's limit, `agent.memory_limit: auto` gives the default hard limit, whose soft limit is the
 *   request; the idle RSS measured here with the eBPF program sets loaded stays below that soft limit, and the
 *   room between the limit and the hard limit holds the ring buffers (charged to the cgroup, not to RSS alone);
 * - the systemd unit passes `systemd-analyze verify`, its capability set is enough to attach the eBPF
 *   programs (run under setpriv with exactly that bounding set) and a smaller one is not; the sample
 *   /etc/svc-agent/config.yaml validates; the Dockerfile exposes the default port.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Value } from "@sinclair/typebox/value";
import { parse as parseYaml, parseAllDocuments } from "yaml";
import { ObjectSerializer } from "@kubernetes/client-node/dist/gen/models/ObjectSerializer.js";
import { ConfigSchema, type ConfigDocument } from "../../src/config/document";
import { parseConfig, SYSTEM_CONFIG_PATH } from "../../src/config/load";
import { durationMs, parseDuration, parseSize, sizeBytes } from "../../src/config/units";
import { DEFAULT_HARD_LIMIT_BYTES, deploymentMemory, resolveLimits } from "../../src/memory";
import type { EbpfView } from "../../src/ebpf/status";
import { renderChart, renderNotes, setValue } from "../../deploy/helm/render";
import { DURATION_PATTERN, SIZE_PATTERN, VALUES_SCHEMA_PATH, valuesSchemaText } from "../../deploy/helm/values-schema";
import Ajv from "ajv";
import { CHART_DIR, MANIFEST_RENDER, MANIFESTS_PATH, manifestsText } from "../../deploy/kubernetes/generate";
import { IMAGE_BINARY_PATH, NONROOT_UID } from "../../deploy/container/stage-rootfs";
import { BINARY, spawnAgent } from "../helpers/agent-process";
import { closedLoopbackPort } from "../helpers/ports";

const ROOT = resolve(import.meta.dir, "../..");
const CHART = CHART_DIR;
const MANIFESTS = MANIFESTS_PATH;
const UNIT = join(ROOT, "deploy/systemd/svc-agent.service");
const SAMPLE_CONFIG = join(ROOT, "deploy/systemd/config.yaml");
const DOCKERFILE = join(ROOT, "deploy/container/Dockerfile");
const TEST_TOKEN = "deploy-test-token";
const IDLE_SAMPLE_MS = 5000;
const SAMPLE_EVERY_MS = 100;
const ATTACH_TIMEOUT_MS = 30_000;
const LIVE_TIMEOUT_MS = 60_000;

type Obj = Record<string, any>;

const manifests = (): Obj[] =>
  parseAllDocuments(readFileSync(MANIFESTS, "utf8"))
    .map((d) => d.toJS() as Obj | null)
    .filter((o): o is Obj => o !== null);
const find = (objs: Obj[], kind: string): Obj => {
  const o = objs.find((x) => x.kind === kind);
  if (!o) throw new Error(`no ${kind} among ${objs.map((x) => x.kind).join(", ")}`);
  return o;
};
const container = (objs: Obj[]): Obj => find(objs, "DaemonSet").spec.template.spec.containers[0];
const configMapText = (objs: Obj[]): string => find(objs, "ConfigMap").data["config.yaml"] as string;
const defaults = (): ConfigDocument => Value.Default(ConfigSchema, {}) as ConfigDocument;
const portOf = (listen: string): number => Number(listen.slice(listen.lastIndexOf(":") + 1));
const hasBpfPrivileges = () => process.getuid?.() === 0 && existsSync("/sys/kernel/btf/vmlinux");

/** Leaf key paths of a values tree (arrays and empty maps are leaves). */
function leaves(v: unknown, prefix = ""): string[] {
  if (v === null || typeof v !== "object" || Array.isArray(v) || Object.keys(v).length === 0) return [prefix];
  return Object.entries(v).flatMap(([k, x]) => leaves(x, prefix ? `${prefix}.${k}` : k));
}

/** Whether `path` (dotted) names a key of the TypeBox/JSON schema `schema`. */
function schemaHasPath(schema: Obj, path: string[]): boolean {
  let node: Obj | undefined = schema;
  for (const key of path) {
    if (!node) return false;
    if (node.properties) node = node.properties[key];
    else if (node.patternProperties) node = Object.values(node.patternProperties)[0] as Obj;
    else return false;
  }
  return node !== undefined;
}

describe("Kubernetes manifests and the Helm chart", () => {
  test("deploy/kubernetes/svc-agent.yaml is the chart rendered with its default values", () => {
    const rendered = renderChart(CHART, MANIFEST_RENDER).objects;
    if (readFileSync(MANIFESTS, "utf8") !== manifestsText())
      throw new Error("deploy/kubernetes/svc-agent.yaml is stale (the chart changed): run `bun deploy/kubernetes/generate.ts`");
    expect(manifests()).toEqual(rendered);
    expect(rendered.map((o) => o.kind).sort()).toEqual(["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Service", "ServiceAccount"]);
  });

  test("every object has only fields the Kubernetes API knows", () => {
    const variants = [
      ...manifests(),
      ...renderChart(CHART, { values: { apiToken: { value: "x" }, config: { agent: { discovery: { docker: { enabled: true } } } } } }).objects,
    ];
    for (const o of variants.filter((x) => x.kind !== "ServiceMonitor")) {
      const type = `V1${o.kind}`;
      const roundTrip = JSON.parse(JSON.stringify(ObjectSerializer.serialize(ObjectSerializer.deserialize(o, type, ""), type, "")));
      expect({ kind: o.kind, object: roundTrip }).toEqual({ kind: o.kind, object: o });
    }
  });

  test("the ConfigMap's configuration passes svc-agent --validate-config (and a broken one does not)", () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-deploy-cm-"));
    try {
      const good = join(dir, "config.yaml");
      writeFileSync(good, configMapText(manifests()));
      const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", API_TOKEN: TEST_TOKEN, NODE_NAME: "node-1" };
      const ok = Bun.spawnSync([BINARY, "--validate-config", good], { env, stdout: "pipe", stderr: "pipe" });
      expect({ code: ok.exitCode, out: ok.stderr.toString() }).toEqual({ code: 0, out: expect.any(String) });
      const noToken = Bun.spawnSync([BINARY, "--validate-config", good], { env: { PATH: env.PATH }, stdout: "pipe", stderr: "pipe" });
      expect(noToken.exitCode).toBe(2);
      const bad = join(dir, "bad.yaml");
      writeFileSync(bad, configMapText(manifests()).replace("ringbuf_size: auto", "ringbuf_size: 16 parsecs"));
      expect(Bun.spawnSync([BINARY, "--validate-config", bad], { env, stdout: "pipe", stderr: "pipe" }).exitCode).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, LIVE_TIMEOUT_MS);

  test("the documented Secret command creates the Secret and key the DaemonSet reads", () => {
    const ref = (container(manifests()).env as Obj[]).find((e) => e.name === "API_TOKEN")!.valueFrom.secretKeyRef;
    const command = `kubectl -n ${find(manifests(), "DaemonSet").metadata.namespace} create secret generic ${ref.name} --from-literal=${ref.key}=`;
    expect(readFileSync(join(ROOT, "deploy/README.md"), "utf8")).toContain(command);
    expect(readFileSync(MANIFESTS, "utf8")).toContain(command);
  });

  test("every ${VAR} of the configuration is set in the container; NODE_NAME comes from the downward API, API_TOKEN from the Secret", () => {
    const objs = manifests();
    const env = container(objs).env as Obj[];
    const vars = [...configMapText(objs).matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]);
    expect(vars).toContain("API_TOKEN");
    for (const v of vars) expect(env.map((e) => e.name)).toContain(v);
    expect(env.find((e) => e.name === "NODE_NAME")).toEqual({ name: "NODE_NAME", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } });
    expect(env.find((e) => e.name === "API_TOKEN")).toEqual({
      name: "API_TOKEN",
      valueFrom: { secretKeyRef: { name: "svc-agent-api-token", key: "api-token" } },
    });
    const cm = parseConfig(configMapText(objs), { API_TOKEN: TEST_TOKEN });
    expect(cm.self_telemetry.auth.bearer_token).toBe(TEST_TOKEN);
    // Kubernetes discovery takes the node from NODE_NAME when the key is empty.
    expect(cm.agent.discovery.kubernetes.node_name).toBe("");
  });

  test("ports, probe paths and the metrics path match the binary's defaults and the ConfigMap", () => {
    const objs = manifests();
    const d = defaults();
    const cm = parseConfig(configMapText(objs), { API_TOKEN: TEST_TOKEN });
    const port = portOf(d.self_telemetry.listen);
    expect(port).toBeGreaterThan(0);
    expect(portOf(cm.self_telemetry.listen)).toBe(port);
    const c = container(objs);
    expect(c.ports).toEqual([{ name: "http", containerPort: port, protocol: "TCP" }]);
    // Probes are the paths the schema's defaults exempt from authentication and rate limiting ("probes").
    const probePaths = [c.livenessProbe.httpGet.path, c.readinessProbe.httpGet.path];
    expect(d.self_telemetry.auth.exempt_paths).toEqual(probePaths);
    expect(d.self_telemetry.rate_limit.exempt_paths).toEqual(probePaths);
    expect(c.livenessProbe.httpGet.port).toBe("http");
    expect(c.readinessProbe.httpGet.port).toBe("http");
    for (const p of probePaths) expect(cm.self_telemetry.auth.exempt_paths).toContain(p);
    // Prometheus scrapes without a token: the metrics path is exempt too.
    expect(cm.self_telemetry.auth.exempt_paths).toContain(cm.self_telemetry.path);
    const svc = find(objs, "Service");
    expect(svc.spec.clusterIP).toBe("None");
    expect(svc.spec.ports).toEqual([{ name: "http", port, targetPort: "http", protocol: "TCP" }]);
    const scrape = { "prometheus.io/scrape": "true", "prometheus.io/port": String(port), "prometheus.io/path": cm.self_telemetry.path };
    expect(svc.metadata.annotations).toEqual(scrape);
    expect(find(objs, "DaemonSet").spec.template.metadata.annotations).toMatchObject(scrape);
    expect(svc.spec.selector).toEqual(find(objs, "DaemonSet").spec.selector.matchLabels);
    // Kubernetes gives the agent terminationGracePeriodSeconds after SIGTERM: more than shutdown_timeout.
    expect(find(objs, "DaemonSet").spec.template.spec.terminationGracePeriodSeconds * 1000).toBeGreaterThan(durationMs(cm.shutdown_timeout));
  });

  test("the binary run with the ConfigMap's configuration answers on those paths (probes and scrape without a token, /status with it)", async () => {
    const objs = manifests();
    const c = container(objs);
    const text = configMapText(objs);
    const tree = parseYaml(text) as Obj;
    tree.self_telemetry.listen = "127.0.0.1:0";
    tree.otlp.endpoint = "127.0.0.1:9";
    tree.agent.ebpf.enabled = false;
    tree.agent.logs.enabled = false;
    tree.agent.discovery = { detect_kubernetes: false, docker: { enabled: false }, cloud: { enabled: false } };
    const agent = await spawnAgent({ config: JSON.stringify(tree), env: { API_TOKEN: TEST_TOKEN, NODE_NAME: "node-1" } });
    try {
      const live = await fetch(agent.url + c.livenessProbe.httpGet.path);
      expect(live.status).toBe(200);
      const ready = await fetch(agent.url + c.readinessProbe.httpGet.path);
      expect([200, 503]).toContain(ready.status);
      expect(((await ready.json()) as { status: string }).status).toMatch(/^(ready|not_ready)$/);
      const annotations = find(objs, "Service").metadata.annotations;
      const metrics = await fetch(agent.url + annotations["prometheus.io/path"]);
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toContain(`${tree.self_telemetry.prometheus_namespace}_`);
      expect((await fetch(`${agent.url}/status`)).status).toBe(401);
      expect((await fetch(`${agent.url}/status`, { headers: { authorization: `Bearer ${TEST_TOKEN}` } })).status).toBe(200);
    } finally {
      await agent.stop();
    }
  }, LIVE_TIMEOUT_MS);

  test("the memory request and limit are derived from the memory limiter's defaults", () => {
    const res = container(manifests()).resources;
    const { requestMiB, limitMiB } = deploymentMemory();
    expect(res.requests.memory).toBe(`${requestMiB}Mi`);
    expect(res.limits.memory).toBe(`${limitMiB}Mi`);
    const cm = parseConfig(configMapText(manifests()), { API_TOKEN: TEST_TOKEN });
    const inPod = resolveLimits(cm.agent.memory_limit, sizeBytes(res.limits.memory));
    expect(cm.agent.memory_limit.enabled).toBe(true);
    expect(inPod.source).toBe("cgroup");
    expect(Math.abs(inPod.hardBytes - DEFAULT_HARD_LIMIT_BYTES)).toBeLessThan(2 ** 20);
    expect(Math.ceil(inPod.softBytes / 2 ** 20)).toBe(requestMiB);
  });

  test.skipIf(!hasBpfPrivileges())(
    "the idle RSS measured with the ConfigMap's configuration, eBPF loaded and a live OTLP backend stays below the request (the soft limit); the limit holds the hard limit plus the ring buffers",
    async () => {
      const objs = manifests();
      const res = container(objs).resources;
      const otlpPort = closedLoopbackPort();
      // A live backend: with a dead one the export queues fill up to their byte bounds, which is not idle.
      const receiver = Bun.spawn([BINARY, "receive", "--listen", `127.0.0.1:${otlpPort}`], { stdout: "ignore", stderr: "ignore" });
      const tree = parseYaml(configMapText(objs)) as Obj;
      tree.self_telemetry.listen = "127.0.0.1:0";
      tree.otlp.endpoint = `127.0.0.1:${otlpPort}`;
      tree.agent.logs.enabled = false;
      tree.agent.discovery = { detect_kubernetes: false, docker: { enabled: false }, cloud: { enabled: false } };
      const agent = await spawnAgent({ config: JSON.stringify(tree), env: { API_TOKEN: TEST_TOKEN } });
      let rssBytes = 0;
      let ringBuffers = 0;
      let ringBytes = 0;
      try {
        await waitAttached(agent.url, { authorization: `Bearer ${TEST_TOKEN}` });
        const deadline = Date.now() + ATTACH_TIMEOUT_MS;
        while ((await fetch(`${agent.url}/ready`)).status !== 200) {
          if (Date.now() > deadline) throw new Error(`not ready within ${ATTACH_TIMEOUT_MS} ms: ${agent.stderr().slice(-2000)}`);
          await Bun.sleep(SAMPLE_EVERY_MS);
        }
        const until = Date.now() + IDLE_SAMPLE_MS;
        while (Date.now() < until) {
          rssBytes = Math.max(rssBytes, vmRssBytes(agent.proc.pid));
          await Bun.sleep(SAMPLE_EVERY_MS);
        }
        const view = (await (await fetch(`${agent.url}/status/ebpf`, { headers: { authorization: `Bearer ${TEST_TOKEN}` } })).json()) as EbpfView;
        ringBuffers = view.maps.filter((m) => m.type === "ringbuf").length;
        ringBytes = view.maps.filter((m) => m.type === "ringbuf").reduce((s, m) => s + m.max_entries, 0);
      } finally {
        await agent.stop();
        receiver.kill();
      }
      const cm = parseConfig(configMapText(objs), { API_TOKEN: TEST_TOKEN });
      const request = sizeBytes(res.requests.memory);
      const limit = sizeBytes(res.limits.memory);
      const hard = resolveLimits(cm.agent.memory_limit, limit).hardBytes;
      console.log(
        `deploy footprint: idle RSS ${(rssBytes / 2 ** 20).toFixed(1)} MiB (eBPF loaded, OTLP backend live); request ${res.requests.memory} (soft limit), limit ${res.limits.memory} >= hard limit ${(hard / 2 ** 20).toFixed(0)} MiB + ${ringBuffers} ring buffers of ${(ringBytes / 2 ** 20).toFixed(2)} MiB in all`,
      );
      expect(rssBytes).toBeGreaterThan(0);
      expect(ringBuffers).toBeGreaterThan(0);
      expect(request).toBeGreaterThanOrEqual(rssBytes);
      expect(limit).toBeGreaterThanOrEqual(hard + ringBytes);
    },
    LIVE_TIMEOUT_MS,
  );

  test("the DaemonSet runs on every node with host PID and the host paths eBPF, logs and state need", () => {
    const objs = manifests();
    const spec = find(objs, "DaemonSet").spec.template.spec;
    const c = container(objs);
    const cm = parseConfig(configMapText(objs), { API_TOKEN: TEST_TOKEN });
    expect(spec.hostPID).toBe(true);
    expect(spec.tolerations).toEqual([{ operator: "Exists" }]);
    expect(c.securityContext).toMatchObject({ privileged: true, runAsUser: 0, readOnlyRootFilesystem: true });
    const mounts = new Map<string, Obj>((c.volumeMounts as Obj[]).map((m) => [m.mountPath, m]));
    const volumes = new Map<string, Obj>((spec.volumes as Obj[]).map((v) => [v.name, v]));
    const hostPathOf = (mountPath: string) => volumes.get(mounts.get(mountPath)?.name)?.hostPath?.path;
    expect(hostPathOf("/sys/fs/bpf")).toBe("/sys/fs/bpf");
    for (const p of ["/sys/kernel/btf", "/sys/kernel/tracing", "/sys/kernel/debug", "/var/log/pods", "/var/log/containers"]) {
      expect({ p, host: hostPathOf(p), readOnly: mounts.get(p)?.readOnly }).toEqual({ p, host: p, readOnly: true });
    }
    expect(volumes.get(mounts.get("/tmp")!.name)!.emptyDir).toBeDefined();
    // The configuration file the container reads is the ConfigMap's key.
    const args = c.args as string[];
    const configPath = args[args.indexOf("--config") + 1]!;
    expect(configPath).toBe(SYSTEM_CONFIG_PATH);
    expect(volumes.get(mounts.get("/etc/svc-agent")!.name)!.configMap.name).toBe(find(objs, "ConfigMap").metadata.name);
    expect(configPath).toBe(`/etc/svc-agent/${Object.keys(find(objs, "ConfigMap").data)[0]}`);
    // Files the agent reads or writes are under mounts: log globs (read-only), the checkpoint (writable state).
    for (const glob of cm.agent.logs.include) expect([...mounts.keys()].some((m) => glob.startsWith(`${m}/`))).toBe(true);
    const state = [...mounts.values()].find((m) => cm.agent.logs.checkpoint_file.startsWith(`${m.mountPath}/`));
    expect(state?.readOnly).toBeUndefined();
    // Persistent queues live under storage.directory: a writable host path too.
    const storage = [...mounts.values()].find((m) => `${cm.storage.directory}/`.startsWith(`${m.mountPath}/`));
    expect(storage?.readOnly).toBeUndefined();
    expect(volumes.get(storage!.name)!.hostPath).toBeDefined();
  });
});

describe("Helm chart values", () => {
  const values = () => renderChart(CHART, MANIFEST_RENDER).values;

  test("every value under `config` is a key of the configuration schema, and every section of the schema is there", () => {
    const config = values().config as Obj;
    const unknown = leaves(config).filter((p) => !schemaHasPath(ConfigSchema as unknown as Obj, p.split(".")));
    expect(unknown).toEqual([]);
    const sections = Object.keys((ConfigSchema as unknown as Obj).properties).filter((k) => k !== "mode");
    expect(sections.filter((s) => !(s in config))).toEqual([]);
    const agentSections = Object.keys((ConfigSchema as unknown as Obj).properties.agent.properties);
    expect(agentSections.filter((s) => !(s in config.agent))).toEqual([]);
  });

  test("config values equal the agent's defaults, except the chart's deliberate choices", () => {
    /** Where the chart departs from the binary's defaults, and why. */
    const DELIBERATE: Record<string, string> = {
      "self_telemetry.auth.enabled": "the interface is reachable from the Pod network: a token is required",
      "self_telemetry.auth.bearer_token": "${API_TOKEN} from the Secret",
      "self_telemetry.auth.exempt_paths": "probes and the Prometheus scrape go without a token",
      "otlp.endpoint": "a collector Service instead of loopback",
      "agent.logs.enabled": "node log collection is what a DaemonSet is for",
      "agent.logs.start_at": "a first install does not re-export every old log line",
      "agent.discovery.docker.enabled": "most nodes run containerd: no Docker socket (readiness would fail)",
    };
    const d = defaults() as unknown as Obj;
    const config = values().config as Obj;
    const drift = leaves(config)
      .filter((p) => !(p in DELIBERATE))
      .filter((p) => {
        const get = (o: Obj) => p.split(".").reduce<unknown>((x, k) => (x as Obj)?.[k], o);
        return JSON.stringify(get(config)) !== JSON.stringify(get(d));
      })
      .map((p) => `config.${p}: chart ${JSON.stringify(p.split(".").reduce<unknown>((x, k) => (x as Obj)?.[k], config))}, agent default ${JSON.stringify(p.split(".").reduce<unknown>((x, k) => (x as Obj)?.[k], d))}`);
    // A difference here: the agent's default changed (update values.yaml) or the chart means it (add it above).
    expect(drift).toEqual([]);
    for (const p of Object.keys(DELIBERATE)) expect(leaves(config)).toContain(p);
  });

  test("every other value is read by a template", () => {
    const templates = ["_helpers.tpl", "clusterrole.yaml", "configmap.yaml", "daemonset.yaml", "secret.yaml", "service.yaml", "serviceaccount.yaml", "servicemonitor.yaml"]
      .map((f) => readFileSync(join(CHART, "templates", f), "utf8"))
      .join("\n");
    const refs = new Set([...templates.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)].map((m) => m[1]!.slice(1)));
    const unused = leaves(values())
      .filter((p) => !p.startsWith("config."))
      .filter((p) => ![...refs].some((r) => p === r || p.startsWith(`${r}.`)));
    expect(unused).toEqual([]);
  });

  test("values.schema.json (checked by Helm on install) is current, accepts the chart's values and refuses unknown keys", () => {
    if (readFileSync(VALUES_SCHEMA_PATH, "utf8") !== valuesSchemaText())
      throw new Error("deploy/helm/svc-agent/values.schema.json is stale (the configuration schema or values.yaml changed): run `bun deploy/helm/values-schema.ts`");
    // Helm validates with a draft-07 validator; ajv is an independent one.
    const validate = new Ajv({ strict: false, allErrors: true }).compile(JSON.parse(readFileSync(VALUES_SCHEMA_PATH, "utf8")));
    const ok = (v: Record<string, unknown>) => (validate(v) ? "valid" : JSON.stringify(validate.errors));
    expect(ok(values())).toBe("valid");
    expect(ok(mergeAll(values(), "config.agent.ebpf.ringbuf_size=4096", "config.shutdown_timeout=1h30m", "config.otlp.insecure=${OTLP_INSECURE}"))).toBe("valid");
    expect(ok(setValue(values(), "config.telegen.log_level=debug"))).toBe("valid");
    for (const bad of ["config.agent.ebpf.ringbuf_sise=16MiB", "config.agent.ebpf.ringbuf_size=16 parsecs", "config.shutdown_timeout=soon", "config.svc.log_level=loud", "tolerationz=[]"])
      expect({ bad, result: ok(setValue(values(), bad)) }).not.toEqual({ bad, result: "valid" });
    // The renderer checks the schema first, as helm does.
    expect(() => renderChart(CHART, { values: setValue(MANIFEST_RENDER.values!, "config.agent.ebpf.ringbuf_sise=1") })).toThrow("ringbuf_sise");
  }, LIVE_TIMEOUT_MS);

  test("the schema's duration and size patterns accept exactly what the agent's parsers accept", () => {
    const duration = new RegExp(DURATION_PATTERN, "u");
    const size = new RegExp(SIZE_PATTERN, "u");
    for (const s of ["0", "1s", " 250ms ", "1h30m", "1.5s", "10µs", "5us", "3ns", "2m", "", "1", "s", "1 s", "1d", "-1s", "1.s", "0s", "1h 30m"])
      expect({ s, pattern: duration.test(s) }).toEqual({ s, pattern: parseDuration(s) !== undefined });
    for (const s of ["16MiB", "16777216", "1.5GB", "64mib", "4 KiB", " 1k ", "1Kb", "1B", "", "MiB", "16 parsecs", "1TiB", "1.MiB", "-1", "1ib"])
      expect({ s, pattern: size.test(s) }).toEqual({ s, pattern: parseSize(s) !== undefined });
  });

  test("NOTES.txt renders with the release's names, port and token Secret", () => {
    const notes = renderNotes(CHART, { ...MANIFEST_RENDER, namespace: "obs" })!;
    expect(notes).toContain("kubectl -n obs rollout status daemonset/svc-agent");
    expect(notes).toContain("port-forward daemonset/svc-agent 19090");
    expect(notes).toContain("get secret svc-agent-api-token -o jsonpath='{.data.api-token}'");
  });

  test("the chart refuses to turn off the HTTP interface its probes use", () => {
    expect(() => renderChart(CHART, { values: setValue(MANIFEST_RENDER.values!, "config.self_telemetry.enabled=false") })).toThrow("must stay true");
  });

  test("the chart's appVersion (the default image tag) is the binary's version", () => {
    const chart = parseYaml(readFileSync(join(CHART, "Chart.yaml"), "utf8")) as Obj;
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    expect(chart.appVersion).toBe(pkg.version);
    const version = Bun.spawnSync([BINARY, "version"], { stdout: "pipe" }).stdout.toString();
    expect(version.split("\n")[0]).toBe(`svc-agent ${chart.appVersion}`);
    expect(container(manifests()).image).toBe(`svc-agent:${chart.appVersion}`);
  }, LIVE_TIMEOUT_MS);

  test("the port follows config.self_telemetry.listen everywhere", () => {
    const objs = renderChart(CHART, { values: setValue(MANIFEST_RENDER.values!, "config.self_telemetry.listen=:9464") }).objects;
    expect(container(objs).ports[0].containerPort).toBe(9464);
    expect(find(objs, "Service").spec.ports[0].port).toBe(9464);
    expect(find(objs, "Service").metadata.annotations["prometheus.io/port"]).toBe("9464");
  });

  test("hostNetwork puts the Pod on the node's network with cluster DNS kept", () => {
    const spec = find(renderChart(CHART, { values: setValue(MANIFEST_RENDER.values!, "hostNetwork=true") }).objects, "DaemonSet").spec.template.spec;
    expect([spec.hostNetwork, spec.dnsPolicy, spec.hostPID]).toEqual([true, "ClusterFirstWithHostNet", true]);
    expect(find(manifests(), "DaemonSet").spec.template.spec.hostNetwork).toBeUndefined();
  });

  test("the token: a value creates the Secret, an existing Secret is referenced, neither is an error", () => {
    const withValue = renderChart(CHART, { name: "a", values: { apiToken: { value: "s3cret" } } }).objects;
    const secret = find(withValue, "Secret");
    expect(Buffer.from(secret.data["api-token"], "base64").toString()).toBe("s3cret");
    expect(container(withValue).env[1].valueFrom.secretKeyRef).toEqual({ name: secret.metadata.name, key: "api-token" });
    expect(manifests().some((o) => o.kind === "Secret")).toBe(false);
    expect(() => renderChart(CHART, {})).toThrow("set apiToken.value");
  });

  test("Docker discovery mounts the configured socket read-only; logs off removes the log mounts", () => {
    const objs = renderChart(CHART, {
      values: mergeAll(MANIFEST_RENDER.values!, "config.agent.discovery.docker.enabled=true", "config.agent.discovery.docker.socket=/run/docker.sock", "config.agent.logs.enabled=false"),
    }).objects;
    const c = container(objs);
    const spec = find(objs, "DaemonSet").spec.template.spec;
    const sock = (c.volumeMounts as Obj[]).find((m) => m.mountPath === "/run/docker.sock");
    expect(sock?.readOnly).toBe(true);
    expect((spec.volumes as Obj[]).find((v) => v.name === sock!.name)!.hostPath).toEqual({ path: "/run/docker.sock", type: "Socket" });
    expect((c.volumeMounts as Obj[]).some((m) => String(m.mountPath).startsWith("/var/log"))).toBe(false);
  });

  test("extra volumes and mounts reach the DaemonSet (e.g. the OTLP backend's CA for otlp.tls.ca_file)", () => {
    const values = mergeAll(MANIFEST_RENDER.values!, "config.otlp.insecure=false", "config.otlp.tls.ca_file=/etc/svc-agent-tls/ca.crt");
    values.extraVolumes = [{ name: "otlp-ca", secret: { secretName: "otlp-ca" } }];
    values.extraVolumeMounts = [{ name: "otlp-ca", mountPath: "/etc/svc-agent-tls", readOnly: true }];
    const objs = renderChart(CHART, { values }).objects;
    expect(container(objs).volumeMounts.at(-1)).toEqual({ name: "otlp-ca", mountPath: "/etc/svc-agent-tls", readOnly: true });
    expect(find(objs, "DaemonSet").spec.template.spec.volumes.at(-1)).toEqual({ name: "otlp-ca", secret: { secretName: "otlp-ca" } });
    expect(parseConfig(configMapText(objs), { API_TOKEN: TEST_TOKEN }).otlp.tls.ca_file).toBe("/etc/svc-agent-tls/ca.crt");
  });

  test("the ServiceMonitor scrapes the metrics path on the named port, with the token when auth is on", () => {
    const objs = renderChart(CHART, { namespace: "obs", values: mergeAll(MANIFEST_RENDER.values!, "serviceMonitor.enabled=true", "config.self_telemetry.path=/m") }).objects;
    const sm = find(objs, "ServiceMonitor");
    expect(sm.spec.endpoints).toEqual([{ port: "http", path: "/m", interval: "30s", bearerTokenSecret: { name: "svc-agent-api-token", key: "api-token" } }]);
    expect(sm.spec.selector.matchLabels).toEqual(find(objs, "Service").spec.selector);
    expect(sm.spec.namespaceSelector.matchNames).toEqual(["obs"]);
  });

  test("a changed configuration changes the Pods' config checksum (rolling restart)", () => {
    const a = find(renderChart(CHART, MANIFEST_RENDER).objects, "DaemonSet");
    const b = find(renderChart(CHART, { ...MANIFEST_RENDER, values: setValue(MANIFEST_RENDER.values!, "config.svc.log_level=debug") }).objects, "DaemonSet");
    expect(a.spec.template.metadata.annotations["checksum/config"]).toMatch(/^[0-9a-f]{64}$/);
    expect(a.spec.template.metadata.annotations["checksum/config"]).not.toBe(b.spec.template.metadata.annotations["checksum/config"]);
  });
});

function mergeAll(base: Record<string, unknown>, ...sets: string[]): Record<string, unknown> {
  return sets.reduce((v, s) => setValue(v, s), base);
}

function vmRssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : 0;
}

async function waitAttached(url: string, headers: Record<string, string> = {}): Promise<EbpfView> {
  const deadline = Date.now() + ATTACH_TIMEOUT_MS;
  let last = "";
  for (;;) {
    const r = await fetch(`${url}/status/ebpf`, { headers }).catch(() => undefined);
    if (r?.ok) {
      const v = (await r.json()) as EbpfView;
      if (v.programs.some((p) => p.attached)) return v;
      last = JSON.stringify(v.programs);
    }
    if (Date.now() > deadline) throw new Error(`no eBPF program attached within ${ATTACH_TIMEOUT_MS} ms: ${last}`);
    await Bun.sleep(SAMPLE_EVERY_MS);
  }
}

describe("systemd unit and sample configuration", () => {
  const unit = () => readFileSync(UNIT, "utf8");
  const directive = (name: string): string[] => [...unit().matchAll(new RegExp(`^${name}=(.*)$`, "gm"))].map((m) => m[1]!.trim());
  let dir = "";
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "svc-deploy-unit-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test.skipIf(Bun.which("systemd-analyze") === null)("systemd-analyze verify finds nothing to say (binary path pointed at dist/svc-agent)", () => {
    const copy = join(dir, "svc-agent.service");
    writeFileSync(copy, unit().replaceAll("/usr/local/bin/svc-agent", BINARY));
    const r = Bun.spawnSync(["systemd-analyze", "verify", copy], { stdout: "pipe", stderr: "pipe" });
    expect({ code: r.exitCode, output: (r.stdout.toString() + r.stderr.toString()).trim() }).toEqual({ code: 0, output: "" });
  });

  test("restart policy, reload by SIGHUP, stop timeout above shutdown_timeout, configuration path", () => {
    expect(directive("Restart")).toEqual(["on-failure"]);
    expect(directive("RestartPreventExitStatus")).toEqual(["2"]);
    expect(directive("ExecReload")).toEqual(["/bin/kill -HUP $MAINPID"]);
    expect(directive("ExecStart")).toEqual([`/usr/local/bin/svc-agent run --config ${SYSTEM_CONFIG_PATH}`]);
    expect(directive("ExecStartPre")).toEqual([`/usr/local/bin/svc-agent --validate-config ${SYSTEM_CONFIG_PATH}`]);
    const sample = parseConfig(readFileSync(SAMPLE_CONFIG, "utf8"), { API_TOKEN: TEST_TOKEN });
    expect(durationMs(directive("TimeoutStopSec")[0]!)).toBeGreaterThan(durationMs(sample.shutdown_timeout));
    expect(portOf(sample.self_telemetry.listen)).toBe(portOf(defaults().self_telemetry.listen));
    expect(sample.agent.logs.checkpoint_file.startsWith(`/var/lib/${directive("StateDirectory")[0]}/`)).toBe(true);
  });

  test("the sample /etc/svc-agent/config.yaml passes svc-agent --validate-config", () => {
    const r = Bun.spawnSync([BINARY, "--validate-config", SAMPLE_CONFIG], { env: { PATH: "/usr/bin:/bin", API_TOKEN: TEST_TOKEN }, stdout: "pipe", stderr: "pipe" });
    expect({ code: r.exitCode, err: r.stderr.toString() }).toEqual({ code: 0, err: expect.any(String) });
  }, LIVE_TIMEOUT_MS);

  test.skipIf(!hasBpfPrivileges() || Bun.which("setpriv") === null)(
    "the unit's commands as systemd runs them: ExecStartPre validates, ExecStart serves, ExecReload reloads, KillSignal stops with 0, a bad file exits 2",
    async () => {
      const port = closedLoopbackPort();
      const config = join(dir, "etc-config.yaml");
      // The sample file, bound to a free loopback port and exporting to a live receiver (so SIGTERM drains at once).
      const otlpPort = closedLoopbackPort();
      const receiver = Bun.spawn([BINARY, "receive", "--listen", `127.0.0.1:${otlpPort}`], { stdout: "ignore", stderr: "ignore" });
      const sample = readFileSync(SAMPLE_CONFIG, "utf8");
      expect(sample).toContain('listen: ":19090"');
      expect(sample).toContain("endpoint: 127.0.0.1:4317");
      writeFileSync(config, sample.replace('listen: ":19090"', `listen: "127.0.0.1:${port}"`).replace("endpoint: 127.0.0.1:4317", `endpoint: 127.0.0.1:${otlpPort}`));
      const envFile = join(dir, "agent.env");
      writeFileSync(envFile, `API_TOKEN=${TEST_TOKEN}\n`);
      const env: Record<string, string> = { PATH: "/usr/bin:/bin" };
      for (const line of readFileSync(envFile, "utf8").split("\n")) if (line.includes("=")) env[line.slice(0, line.indexOf("="))] = line.slice(line.indexOf("=") + 1);
      for (const e of directive("Environment")) env[e.slice(0, e.indexOf("="))] = e.slice(e.indexOf("=") + 1).replace(SYSTEM_CONFIG_PATH, config);
      const argv = (d: string) => directive(d)[0]!.replace(SYSTEM_CONFIG_PATH, config).split(/\s+/).map((w) => (w === "/usr/local/bin/svc-agent" ? BINARY : w));
      const bounding = ["-all", ...directive("CapabilityBoundingSet")[0]!.split(/\s+/).map((c) => `+${c.replace(/^CAP_/, "").toLowerCase()}`)].join(",");

      expect(Bun.spawnSync(argv("ExecStartPre"), { env, stdout: "pipe", stderr: "pipe" }).exitCode).toBe(0);
      const proc = Bun.spawn(["setpriv", `--bounding-set=${bounding}`, "--", ...argv("ExecStart")], { env, stdout: "ignore", stderr: "pipe" });
      let stderr = "";
      void (async () => {
        for await (const chunk of proc.stderr) stderr += new TextDecoder().decode(chunk);
      })();
      const waitFor = async (what: string, ok: () => Promise<boolean> | boolean) => {
        const deadline = Date.now() + ATTACH_TIMEOUT_MS;
        while (!(await ok())) {
          if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`${what}: not seen; stderr:\n${stderr.slice(-3000)}`);
          await Bun.sleep(SAMPLE_EVERY_MS);
        }
      };
      try {
        await waitFor("/healthz", () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false));
        const reload = directive("ExecReload")[0]!.replace("$MAINPID", String(proc.pid)).split(/\s+/);
        expect(Bun.spawnSync(reload).exitCode).toBe(0);
        await waitFor("the reload record", () => stderr.includes('"msg":"configuration reloaded"'));
        expect(proc.exitCode).toBeNull();
      } finally {
        proc.kill(directive("KillSignal")[0] as "SIGTERM");
        void proc.exited.then(() => receiver.kill());
      }
      // systemd sends SIGKILL after TimeoutStopSec: the agent must have exited with 0 before that.
      const killer = setTimeout(() => proc.kill("SIGKILL"), durationMs(directive("TimeoutStopSec")[0]!));
      const code = await proc.exited;
      clearTimeout(killer);
      expect({ code, signal: proc.signalCode }).toEqual({ code: 0, signal: null });
      writeFileSync(config, "agent:\n  ebpf:\n    ringbuf_size: lots\n");
      const bad = Bun.spawnSync(argv("ExecStart"), { env, stdout: "pipe", stderr: "pipe" });
      expect(bad.exitCode).toBe(Number(directive("RestartPreventExitStatus")[0]));
    },
    LIVE_TIMEOUT_MS,
  );

  test.skipIf(!hasBpfPrivileges() || Bun.which("setpriv") === null)(
    "the unit's capability set is enough to attach the eBPF programs, and a set without CAP_BPF/CAP_SYS_ADMIN is not",
    async () => {
      const caps = directive("CapabilityBoundingSet")[0]!.split(/\s+/);
      expect(directive("AmbientCapabilities")[0]!.split(/\s+/)).toEqual(caps);
      expect(caps).toEqual(["CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"]);
      const run = async (set: string[]) => {
        const bounding = ["-all", ...set.map((c) => `+${c.replace(/^CAP_/, "").toLowerCase()}`)].join(",");
        const config = join(dir, `config-${set.length}.yaml`);
        const listenPort = closedLoopbackPort();
        writeFileSync(
          config,
          `self_telemetry:\n  listen: 127.0.0.1:${listenPort}\notlp:\n  endpoint: 127.0.0.1:9\nagent:\n  ebpf:\n    enabled: true\n  discovery:\n    detect_kubernetes: false\n    docker:\n      enabled: false\n    cloud:\n      enabled: false\n`,
        );
        const proc = Bun.spawn(["setpriv", `--bounding-set=${bounding}`, "--", BINARY, "run", "--config", config], { stdout: "ignore", stderr: "pipe" });
        try {
          const url = `http://127.0.0.1:${listenPort}`;
          const deadline = Date.now() + ATTACH_TIMEOUT_MS;
          for (;;) {
            const v = await fetch(`${url}/status/ebpf`).then((r) => (r.ok ? (r.json() as Promise<EbpfView>) : undefined), () => undefined);
            // Settled: some program attached, or every program reported with its reason, or eBPF reported not loadable.
            if (v && (v.programs.some((p) => p.attached) || (v.programs.length > 0 && v.programs.every((p) => p.reason)))) return v;
            const ready = await fetch(`${url}/ready`).then((r) => r.json() as Promise<{ checks: Record<string, string> }>, () => undefined);
            // A set still loading is "failed: ebpf/<set> is starting" in /ready: not settled yet.
            const ebpf = ready?.checks.ebpf;
            if (ebpf?.startsWith("failed") && !ebpf.endsWith(" is starting")) return { programs: [], reason: ebpf } as unknown as EbpfView;
            if (Date.now() > deadline) throw new Error(`eBPF did not settle under ${bounding}`);
            await Bun.sleep(SAMPLE_EVERY_MS);
          }
        } finally {
          proc.kill("SIGTERM");
          await proc.exited;
        }
      };
      const full = await run(caps);
      expect(full.programs.some((p) => p.attached)).toBe(true);
      const reduced = await run(["CAP_DAC_READ_SEARCH"]);
      expect(reduced.programs.some((p) => p.attached)).toBe(false);
    },
    LIVE_TIMEOUT_MS,
  );
});


describe("container image build file", () => {
  test("the Dockerfile runs the staged binary as non-root by default and exposes the default port", () => {
    const text = readFileSync(DOCKERFILE, "utf8");
    expect(text).toMatch(/^FROM scratch$/m);
    expect(text).toContain(`ENTRYPOINT ["${IMAGE_BINARY_PATH}"]`);
    expect(text).toMatch(new RegExp(`^USER ${NONROOT_UID}:${NONROOT_UID}$`, "m"));
    expect(text).toMatch(new RegExp(`^EXPOSE ${portOf(defaults().self_telemetry.listen)}$`, "m"));
  });
});
