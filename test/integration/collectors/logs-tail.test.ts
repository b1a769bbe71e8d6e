/** The log tail engine against real files in a temp directory and a recording pipeline (no exporter). */
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LogsConfig } from "../../../src/collectors/logs/config";
import { testLogsConfig } from "../../helpers/logs-config";
import { TailEngine } from "../../../src/collectors/logs";
import type { LogRecordItem } from "../../../src/export/model";
import { Logger } from "../../../src/log/logger";
import { RecordingPipeline, waitFor } from "../../helpers/fakes/collectors";

const ID = "b".repeat(64);
const quiet = new Logger({ sink: () => {} });
const dirs: string[] = [];
const engines: TailEngine[] = [];

afterEach(async () => {
  for (const e of engines.splice(0)) await e.stop(1000);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setup(overrides: Partial<LogsConfig> = {}) {
  const dir = mkdtempSync(join(tmpdir(), "svc-logs-"));
  dirs.push(dir);
  mkdirSync(join(dir, "logs"));
  const config = testLogsConfig(dir, { include: [join(dir, "logs/*.log"), join(dir, "logs/**/*.log")], exclude: ["**/*.gz"], max_line_size: "1KiB", ...overrides });
  return { dir, logs: join(dir, "logs"), config };
}

function start(config: LogsConfig, pipeline: RecordingPipeline, workloads?: { forContainer(id: string): Record<string, string> | undefined }) {
  const e = new TailEngine({ config, pipeline, workloads: workloads && { forContainer: workloads.forContainer, forPid: () => undefined }, logger: quiet });
  e.start();
  engines.push(e);
  return e;
}

/** Lets the engine complete `n` more poll rounds (each would deliver a duplicate or a late line if there were one). */
async function rounds(e: TailEngine, n = 3): Promise<void> {
  const target = e.stats.rounds + n;
  await waitFor(`${n} more poll rounds`, () => e.stats.rounds >= target);
}

const bodies = (p: RecordingPipeline) => p.accepted.logs.map((r: LogRecordItem) => r.body as string);
const cri = (msg: string, stream = "stdout", tag = "F") => `2024-01-02T03:04:05.000000007Z ${stream} ${tag} ${msg}\n`;
const lines = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe("log tailing", () => {
  test("CRI lines (with partials joined) and Docker JSON lines become records with stream, time and path attributes", async () => {
    const { logs, config } = setup();
    const criPath = join(logs, `web_shop_nginx-${ID}.log`);
    writeFileSync(criPath, cri("one") + cri("two, part a; ", "stderr", "P") + cri("three") + cri("part b", "stderr", "F"));
    writeFileSync(join(logs, "docker.log"), '{"log":"d1\\n","stream":"stdout","time":"2024-01-02T03:04:05.5Z"}\n{"log":"split ","stream":"stderr","time":"2024-01-02T03:04:06Z"}\n{"log":"line\\n","stream":"stderr","time":"2024-01-02T03:04:07Z"}\n');
    const p = new RecordingPipeline();
    start(config, p, { forContainer: (id) => (id === ID ? { "k8s.pod.uid": "uid-1", "container.image.name": "nginx" } : undefined) });
    await waitFor("5 records", () => p.accepted.logs.length >= 5);
    const byBody = new Map(p.accepted.logs.map((r) => [r.body as string, r]));
    expect([...byBody.keys()].sort()).toEqual(["d1", "one", "split line", "three", "two, part a; part b"]);
    const joined = byBody.get("two, part a; part b")!;
    expect(joined.attributes).toMatchObject({ "log.iostream": "stderr", "log.file.path": criPath });
    expect(joined.timeUnixNano).toBe(1704164645000000007n);
    // The container's workload identity: named by its container (no label or owner known), instance namespace.pod.container.
    expect(joined.resource).toEqual({
      "service.name": "nginx",
      "service.namespace": "shop",
      "service.instance.id": "shop.web.nginx",
      "k8s.pod.name": "web",
      "k8s.namespace.name": "shop",
      "k8s.container.name": "nginx",
      "container.id": ID,
      "k8s.pod.uid": "uid-1",
      "container.image.name": "nginx",
    });
    expect(byBody.get("d1")!.timeUnixNano).toBe(1704164645500000000n);
    expect(byBody.get("split line")!.attributes?.["log.iostream"]).toBe("stderr");
  });

  test("a file reached through a symlink and directly is read once; over-long lines are cut and flagged", async () => {
    const { logs, config } = setup();
    mkdirSync(join(logs, "pods/c"), { recursive: true });
    writeFileSync(join(logs, "pods/c/0.log"), `short\n${"x".repeat(3000)}\nafter\n`);
    symlinkSync(join(logs, "pods/c/0.log"), join(logs, "link.log"));
    const p = new RecordingPipeline();
    const e = start(config, p);
    await waitFor("3 records", () => p.accepted.logs.length >= 3);
    await rounds(e);
    expect(bodies(p).map((b) => b.slice(0, 5))).toEqual(["short", "xxxxx", "after"]);
    expect((p.accepted.logs[1]!.body as string).length).toBe(1024);
    expect(p.accepted.logs[1]!.attributes?.["log.truncated"]).toBe(true);
  });

  test("rotation by rename + create: the old file is drained, the new one read from its start, nothing lost or repeated", async () => {
    const { logs, config } = setup();
    const path = join(logs, "app.log");
    writeFileSync(path, lines("a", 100).join("\n") + "\n");
    const p = new RecordingPipeline();
    const e = start(config, p);
    await waitFor("first 100", () => p.accepted.logs.length >= 100);
    appendFileSync(path, lines("b", 50).join("\n") + "\n"); // written just before the rename, maybe not read yet
    renameSync(path, join(logs, "app.log.1"));
    writeFileSync(path, lines("c", 70).join("\n") + "\n");
    await waitFor("all 220", () => p.accepted.logs.length >= 220);
    await rounds(e);
    expect(bodies(p)).toEqual([...lines("a", 100), ...lines("b", 50), ...lines("c", 70)]);
  });

  test("truncation (copytruncate): reading starts again at offset 0", async () => {
    const { logs, config } = setup();
    const path = join(logs, "app.log");
    writeFileSync(path, lines("old", 40).join("\n") + "\n");
    const p = new RecordingPipeline();
    start(config, p);
    await waitFor("old lines", () => p.accepted.logs.length >= 40);
    truncateSync(path, 0);
    appendFileSync(path, lines("new", 5).join("\n") + "\n");
    await waitFor("new lines", () => p.accepted.logs.length >= 45);
    expect(bodies(p)).toEqual([...lines("old", 40), ...lines("new", 5)]);
  });

  test("restart: a stopped tailer resumes from its checkpoint without loss or duplication, also across a rotation while stopped", async () => {
    const { logs, config } = setup();
    const path = join(logs, "app.log");
    writeFileSync(path, lines("r1", 300).join("\n") + "\n");
    const p1 = new RecordingPipeline();
    const e1 = start(config, p1);
    await waitFor("first run", () => p1.accepted.logs.length >= 300);
    appendFileSync(path, lines("r2", 10).join("\n") + "\n");
    await waitFor("r2", () => p1.accepted.logs.length >= 310);
    await e1.stop(1000);
    const saved = JSON.parse(readFileSync(config.checkpoint_file, "utf8"));
    expect(saved.files[0].offset).toBe(readFileSync(path).length);
    // While stopped: more lines, then a rotation, then a new file.
    appendFileSync(path, lines("r3", 20).join("\n") + "\n");
    renameSync(path, join(logs, "app.log.1"));
    writeFileSync(path, lines("r4", 5).join("\n") + "\n");
    const p2 = new RecordingPipeline();
    const e2 = start(config, p2);
    await waitFor("second run", () => p2.accepted.logs.length >= 25);
    await rounds(e2);
    expect(bodies(p2).sort()).toEqual([...lines("r3", 20), ...lines("r4", 5)].sort());
    expect([...bodies(p1), ...bodies(p2)].length).toBe(335);
  });

  test("start_at end: a file without checkpoint entry found at startup is read from its end; a file appearing later from its start", async () => {
    const { logs, config } = setup({ start_at: "end" });
    writeFileSync(join(logs, "old.log"), lines("before", 10).join("\n") + "\n");
    const p = new RecordingPipeline();
    const e = start(config, p);
    await rounds(e);
    appendFileSync(join(logs, "old.log"), "after-0\n");
    writeFileSync(join(logs, "new.log"), "new-0\nnew-1\n");
    await waitFor("3 records", () => p.accepted.logs.length >= 3);
    await rounds(e);
    expect(bodies(p).sort()).toEqual(["after-0", "new-0", "new-1"]);
  });

  test("slow backend: reading pauses while the pipeline has no room; every line arrives once and nothing is offered beyond the room", async () => {
    const { logs, config } = setup();
    const N = 10_000;
    writeFileSync(join(logs, "big.log"), lines("s", N).join("\n") + "\n");
    const p = new RecordingPipeline(100);
    const e = start(config, p);
    let paused = 0;
    while (p.accepted.logs.length < N) {
      await waitFor("the queue to fill", () => p.queued === p.capacity || p.accepted.logs.length === N);
      // Bounded read-ahead: the tailer holds at most its pending limit beyond what was accepted.
      expect(e.stats.linesRead - e.stats.recordsAccepted).toBeLessThanOrEqual(8192);
      paused++;
      p.drain(500);
    }
    expect(paused).toBeGreaterThan(10);
    expect(p.overOffered).toBe(0);
    expect(bodies(p)).toEqual(lines("s", N));
  });

  test("without room(): records refused by submit are offered again later, not lost", async () => {
    const { logs, config } = setup();
    writeFileSync(join(logs, "x.log"), lines("n", 1000).join("\n") + "\n");
    const p = new RecordingPipeline(50, false);
    start(config, p);
    while (p.accepted.logs.length < 1000) {
      await waitFor("refusals", () => p.queued === 50 || p.accepted.logs.length === 1000);
      p.drain(50);
    }
    expect(bodies(p)).toEqual(lines("n", 1000));
  });
});

describe("multiline records and severity", () => {
  const START = String.raw`^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}`;
  const javaTrace = (i: number) =>
    [
      `2024-01-02 03:04:05,${String(i).padStart(3, "0")} ERROR [main] com.acme.App - request ${i} failed`,
      `java.lang.IllegalStateException: boom ${i}`,
      "\tat com.acme.App.handle(App.java:42)",
      "\tat com.acme.App.main(App.java:7)",
      `Caused by: java.io.IOException: disk ${i}`,
      "\t... 2 more",
    ].join("\n");
  const info = (i: number) => `2024-01-02 03:04:06,000 INFO [main] com.acme.App - ok ${i} (no error)`;

  function multilineSetup(flushTimeout = "200ms", bounds: { max_lines?: number; max_bytes?: string } = {}) {
    const s = setup();
    s.config.multiline = [
      { include: [join(s.logs, "other-*.log")], start_pattern: "^never$", max_lines: 1000, max_bytes: "1MiB", flush_timeout: "1h" },
      { include: [join(s.logs, "*.log")], start_pattern: START, max_lines: bounds.max_lines ?? 1000, max_bytes: bounds.max_bytes ?? "1MiB", flush_timeout: flushTimeout },
    ];
    return s;
  }

  test("Java traces become one record each, severity from their first line; the last one comes after the flush timeout", async () => {
    const { logs, config } = multilineSetup();
    writeFileSync(join(logs, "java.log"), [javaTrace(1), info(2), javaTrace(3)].join("\n") + "\n");
    const p = new RecordingPipeline();
    const e = start(config, p);
    await waitFor("the first two records", () => p.accepted.logs.length >= 2);
    await waitFor("the last record after the flush timeout", () => p.accepted.logs.length >= 3);
    await rounds(e);
    expect(bodies(p)).toEqual([javaTrace(1), info(2), javaTrace(3)]);
    expect(p.accepted.logs.map((r) => [r.severityNumber, r.severityText])).toEqual([[17, "ERROR"], [9, "INFO"], [17, "ERROR"]]);
    expect(e.stats.multilineRecords).toBe(2);
  });

  test("CRI: each stream joins its own lines (partials first), and keeps the runtime's time", async () => {
    const { logs, config } = multilineSetup();
    const trace = javaTrace(7).split("\n");
    writeFileSync(
      join(logs, `api_shop_java-${ID}.log`),
      cri(trace[0]!, "stderr") + cri("2024-01-02T03:04:05Z INFO stdout line", "stdout") + cri(trace[1]!.slice(0, 10), "stderr", "P") + cri(trace[1]!.slice(10), "stderr") +
        trace.slice(2).map((l) => cri(l, "stderr")).join("") + cri("2024-01-02T03:04:06Z WARN next", "stderr"),
    );
    const p = new RecordingPipeline();
    start(config, p);
    await waitFor("three records", () => p.accepted.logs.length >= 3);
    const byStream = (s: string) => p.accepted.logs.filter((r) => r.attributes?.["log.iostream"] === s).map((r) => r.body);
    expect(byStream("stderr")).toEqual([javaTrace(7), "2024-01-02T03:04:06Z WARN next"]);
    expect(byStream("stdout")).toEqual(["2024-01-02T03:04:05Z INFO stdout line"]);
    expect(p.accepted.logs.every((r) => r.timeUnixNano === 1704164645000000007n)).toBe(true);
  });

  test("Docker json-file: split lines joined first, then each stream's trace lines joined into a record", async () => {
    const { logs, config } = multilineSetup();
    const trace = javaTrace(9).split("\n");
    const docker = (log: string, stream: string, second: number) => JSON.stringify({ log, stream, time: `2024-01-02T03:04:0${second}.25Z` }) + "\n";
    writeFileSync(
      join(logs, "docker-json.log"),
      docker(trace[0]! + "\n", "stderr", 1) +
        docker("2024-01-02 03:04:05 INFO [main] between\n", "stdout", 2) +
        docker(trace[1]!.slice(0, 12), "stderr", 3) +
        docker(trace[1]!.slice(12) + "\n", "stderr", 3) +
        trace.slice(2).map((l) => docker(l + "\n", "stderr", 4)).join("") +
        docker("2024-01-02 03:04:09 WARN [main] after\n", "stderr", 5),
    );
    const p = new RecordingPipeline();
    start(config, p);
    await waitFor("three records", () => p.accepted.logs.length >= 3);
    // The last record of each stream goes out on its flush timeout: compare in time order.
    const got = p.accepted.logs.map((r) => [r.attributes?.["log.iostream"], r.body, r.timeUnixNano, r.severityText] as const);
    expect(got.toSorted((a, b) => Number(a[2]! - b[2]!))).toEqual([
      ["stderr", javaTrace(9), 1704164641250000000n, "ERROR"],
      ["stdout", "2024-01-02 03:04:05 INFO [main] between", 1704164642250000000n, "INFO"],
      ["stderr", "2024-01-02 03:04:09 WARN [main] after", 1704164645250000000n, "WARN"],
    ]);
  });

  test("CRI: a record in progress on one stream holds the checkpoint back while the other stream's records go out", async () => {
    const { logs, config } = multilineSetup("1h");
    const path = join(logs, `api_shop_java-${ID}.log`);
    const trace = javaTrace(8).split("\n");
    writeFileSync(path, cri(trace[0]!, "stderr") + cri("2024-01-02T03:04:05Z INFO a", "stdout") + cri(trace[1]!, "stderr") + cri("2024-01-02T03:04:05Z INFO b", "stdout"));
    const p = new RecordingPipeline();
    const e = start(config, p);
    await waitFor("the first stdout record", () => p.accepted.logs.length >= 1);
    await rounds(e);
    await e.checkpointNow();
    expect(bodies(p)).toEqual(["2024-01-02T03:04:05Z INFO a"]);
    // Both streams have a record in progress; the stderr one began at offset 0.
    expect(JSON.parse(readFileSync(config.checkpoint_file, "utf8")).files[0].offset).toBe(0);
    appendFileSync(path, cri("2024-01-02T03:04:06Z INFO c", "stdout") + cri("2024-01-02T03:04:06Z WARN d", "stderr"));
    await waitFor("the trace and b", () => p.accepted.logs.length >= 3);
    await e.checkpointNow();
    expect(bodies(p)).toEqual(["2024-01-02T03:04:05Z INFO a", "2024-01-02T03:04:05Z INFO b", trace.slice(0, 2).join("\n")]);
    // Now the stdout record c (after the trace's lines) is the earliest in progress.
    const cStart = readFileSync(path, "utf8").indexOf("2024-01-02T03:04:05.000000007Z stdout F 2024-01-02T03:04:06Z INFO c");
    expect(JSON.parse(readFileSync(config.checkpoint_file, "utf8")).files[0].offset).toBe(cStart);
  });

  test("CRI, stopped while one stream's record is in progress: the other stream's records sent meanwhile are not sent again", async () => {
    const { logs, config } = multilineSetup("1h");
    const path = join(logs, `api_shop_java-${ID}.log`);
    const trace = javaTrace(5).split("\n");
    const b = (i: number) => `2024-01-02T03:04:05Z INFO b${i}`;
    writeFileSync(path, cri(trace[0]!, "stderr") + cri(b(1), "stdout") + cri(trace[1]!, "stderr") + cri(b(2), "stdout") + cri(b(3), "stdout"));
    const p1 = new RecordingPipeline();
    const e1 = start(config, p1);
    await waitFor("b1 and b2", () => p1.accepted.logs.length >= 2);
    await rounds(e1);
    await e1.stop(1000);
    engines.splice(engines.indexOf(e1), 1);
    expect(bodies(p1)).toEqual([b(1), b(2)]);
    const saved = JSON.parse(readFileSync(config.checkpoint_file, "utf8")).files[0];
    const text = readFileSync(path, "utf8");
    expect(saved.offset).toBe(0);
    expect(saved.streams.stdout).toBe(text.indexOf(cri(b(3), "stdout")));
    appendFileSync(path, cri(trace[2]!, "stderr"));
    const p2 = new RecordingPipeline();
    const e2 = start({ ...config, multiline: config.multiline.map((r) => ({ ...r, flush_timeout: "100ms" })) }, p2);
    await waitFor("the trace and b3", () => p2.accepted.logs.length >= 2);
    // Nothing more comes: 30 more poll rounds (10 ms apart, past the 100 ms flush timeout twice over).
    await rounds(e2, 30);
    expect(bodies(p2).toSorted()).toEqual([b(3), trace.slice(0, 3).join("\n")].toSorted());
  });

  test("stopped while a record is in progress: the checkpoint stops at its start and a restart sends it once, whole", async () => {
    const { logs, config } = multilineSetup("1h");
    const path = join(logs, "java.log");
    writeFileSync(path, [info(0), javaTrace(1)].join("\n") + "\n");
    const p1 = new RecordingPipeline();
    const e1 = start(config, p1);
    await waitFor("the first record", () => p1.accepted.logs.length >= 1);
    await rounds(e1);
    await e1.stop(1000);
    engines.splice(engines.indexOf(e1), 1);
    expect(bodies(p1)).toEqual([info(0)]);
    const saved = JSON.parse(readFileSync(config.checkpoint_file, "utf8"));
    expect(saved.files[0].offset).toBe(Buffer.byteLength(info(0)) + 1);
    // While stopped, the trace goes on; then a new record starts.
    appendFileSync(path, "\tat com.acme.Late.frame(Late.java:1)\n" + info(2) + "\n");
    const p2 = new RecordingPipeline();
    start({ ...config, multiline: config.multiline.map((r) => ({ ...r, flush_timeout: "100ms" })) }, p2);
    await waitFor("the rest", () => p2.accepted.logs.length >= 2);
    expect(bodies(p2)).toEqual([javaTrace(1) + "\n\tat com.acme.Late.frame(Late.java:1)", info(2)]);
  });

  test("max_lines and max_bytes: the rest of the record is dropped up to the next start line, flagged and counted", async () => {
    const { logs, config } = multilineSetup("100ms", { max_lines: 3 });
    writeFileSync(join(logs, "java.log"), [javaTrace(1), info(2)].join("\n") + "\n");
    const p = new RecordingPipeline();
    const e = start(config, p);
    await waitFor("two records", () => p.accepted.logs.length >= 2);
    expect(bodies(p)).toEqual([javaTrace(1).split("\n").slice(0, 3).join("\n"), info(2)]);
    expect(p.accepted.logs.map((r) => r.attributes?.["log.truncated"])).toEqual([true, undefined]);
    expect(e.stats.truncated).toEqual({ max_line_size: 0, max_lines: 1, max_bytes: 0 });
  });

  test("severity none leaves records without severity", async () => {
    const { logs, config } = setup({ severity: "none" });
    writeFileSync(join(logs, "a.log"), "ERROR one\n" + '{"level":"warn"}\n');
    const p = new RecordingPipeline();
    start(config, p);
    await waitFor("two records", () => p.accepted.logs.length >= 2);
    expect(p.accepted.logs.map((r) => r.severityNumber)).toEqual([undefined, undefined]);
  });
});
