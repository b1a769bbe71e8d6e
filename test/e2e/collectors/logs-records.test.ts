/**
 * Log records through the compiled agent, decoded by the official OTLP receiver (protoc-generated Python stubs,
 * Debian's grpcio; test/helpers/official-receiver).
 * - Multiline: a real Java program (stack traces with a cause chain, printStackTrace) and a real Python program
 *   (logging.exception, chained tracebacks with blank lines) write the files. The agent is stopped (SIGTERM) while
 *   the last record of each file is in progress; the Java trace goes on while it is stopped; a restart sends each
 *   of those records once, whole. Records are counted exactly and compared with the programs' output split at its
 *   start lines.
 * - The log data model: severity number (its range) and text, time from the runtime or from the line where it
 *   carries a zone, observed time, trace context, log.file.* and log.iostream attributes, for JSON, logfmt and
 *   plain lines, raw and CRI.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { BINARY, QUIET_CONFIG, spawnAgent, type AgentProcess } from "../../helpers";
import { missingOfficialTools, startOfficialReceiver, type OfficialReceiver, type OfficialRequest } from "../../helpers/official-receiver";

const FIXTURES = resolve(import.meta.dir, "../../fixtures/logs");
const ITERATIONS = 25;
/** A line that begins a record in both programs' layouts. */
const START = String.raw`^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}`;
const START_RE = new RegExp(START);
const NS_PER_MS = 1_000_000n;

const missing = [...missingOfficialTools(), ...(Bun.which("java") ? [] : ["java (openjdk-17-jdk-headless)"]), ...(Bun.which("python3") ? [] : ["python3"])];

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

interface Received {
  body: string;
  severityNumber?: string;
  severityText?: string;
  timeUnixNano?: string;
  observedTimeUnixNano?: string;
  attributes: Record<string, unknown>;
}

function records(reqs: OfficialRequest[]): Received[] {
  const out: Received[] = [];
  for (const r of reqs)
    if (r.signal === "logs")
      for (const rl of r.message.resourceLogs ?? [])
        for (const sl of rl.scopeLogs ?? [])
          for (const lr of sl.logRecords ?? [])
            out.push({
              ...lr,
              body: lr.body?.stringValue ?? "",
              attributes: Object.fromEntries((lr.attributes ?? []).map((a: { key: string; value: Record<string, unknown> }) => [a.key, Object.values(a.value)[0]])),
            });
  return out;
}

/** What a program printed, split into records at its start lines (the oracle). */
function splitRecords(text: string): string[] {
  const out: string[] = [];
  for (const line of text.replace(/\n$/, "").split("\n")) {
    if (START_RE.test(line) || out.length === 0) out.push(line);
    else out[out.length - 1] += `\n${line}`;
  }
  return out;
}

function run(cmd: string[]): string {
  const r = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

function config(dir: string, endpoint: string, flushTimeout: string): string {
  return (
    QUIET_CONFIG +
    `  logs:
    enabled: true
    include: ["${dir}/*.log"]
    checkpoint_file: ${dir}/state/checkpoint.json
    checkpoint_interval: 100ms
    poll_interval: 20ms
    multiline:
      - include: ["${dir}/*.log"]
        start_pattern: '${START}'
        max_lines: 200
        flush_timeout: ${flushTimeout}
`
  ).replace("${OTLP_ENDPOINT:-127.0.0.1:4317}", endpoint);
}

function checkpointOffsets(dir: string): Map<string, number> {
  try {
    const doc = JSON.parse(readFileSync(join(dir, "state/checkpoint.json"), "utf8")) as { files: Array<{ path: string; offset: number }> };
    return new Map(doc.files.map((f) => [f.path, f.offset]));
  } catch {
    return new Map();
  }
}

describe.skipIf(missing.length > 0)(`multiline logs through the compiled agent${missing.length ? `: missing ${missing.join(", ")}` : ""}`, () => {
  test("Java and Python stack traces: one record each, exact counts across a stop mid-record, log data model fields", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-logs-ml-e2e-"));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const rx: OfficialReceiver = await startOfficialReceiver();
    cleanup.push(() => rx.stop());

    // The programs' real output. The Java file stops three lines into its last stack trace (written on later).
    const javaText = run(["java", join(FIXTURES, "TraceLogger.java"), String(ITERATIONS)]);
    const pythonText = run(["python3", join(FIXTURES, "trace_logger.py"), String(ITERATIONS)]);
    const javaRecords = splitRecords(javaText);
    const pythonRecords = splitRecords(pythonText);
    expect(javaRecords).toHaveLength(2 * ITERATIONS);
    expect(pythonRecords).toHaveLength(2 * ITERATIONS);
    const javaLines = javaText.split("\n");
    const lastStart = javaLines.findLastIndex((l) => START_RE.test(l));
    const javaHead = javaLines.slice(0, lastStart + 3).join("\n") + "\n";
    const javaTail = javaText.slice(javaHead.length);
    expect(javaTail.length).toBeGreaterThan(0);
    const javaPath = join(dir, "java.log");
    const pythonPath = join(dir, "python.log");
    writeFileSync(javaPath, javaHead);
    writeFileSync(pythonPath, pythonText);

    const started = BigInt(Date.now()) * NS_PER_MS;
    // First run: a flush timeout longer than the test, so the last record of each file stays in progress.
    const a1: AgentProcess = await spawnAgent({ config: config(dir, rx.endpoint, "10m") });
    cleanup.push(() => void a1.stop());
    const byFile = (rs: Received[], path: string) => rs.filter((r) => r.attributes["log.file.path"] === path);
    await rx.waitFor((all) => {
      const rs = records(all);
      return byFile(rs, javaPath).length >= 2 * ITERATIONS - 1 && byFile(rs, pythonPath).length >= 2 * ITERATIONS - 1;
    }, 30_000);
    // The checkpoint stops at the start of each record in progress.
    const javaInProgressAt = Buffer.byteLength(javaRecords.slice(0, -1).join("\n") + "\n");
    const pythonInProgressAt = Buffer.byteLength(pythonRecords.slice(0, -1).join("\n") + "\n");
    const until = async (what: string, cond: () => boolean) => {
      const end = performance.now() + 20_000;
      while (!cond()) {
        if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
        await Bun.sleep(20);
      }
    };
    await until("the checkpoint at the records in progress", () => {
      const o = checkpointOffsets(dir);
      return o.get(javaPath) === javaInProgressAt && o.get(pythonPath) === pythonInProgressAt;
    });
    expect(await a1.stop()).toBe(0);
    const firstRun = records(rx.requests());
    expect(byFile(firstRun, javaPath).map((r) => r.body)).toEqual(javaRecords.slice(0, -1));
    expect(byFile(firstRun, pythonPath).map((r) => r.body)).toEqual(pythonRecords.slice(0, -1));
    expect(checkpointOffsets(dir)).toEqual(new Map([[javaPath, javaInProgressAt], [pythonPath, pythonInProgressAt]]));

    // While stopped, the Java trace goes on. The restart sends both records in progress, once and whole.
    appendFileSync(javaPath, javaTail);
    const a2 = await spawnAgent({ config: config(dir, rx.endpoint, "300ms") });
    cleanup.push(() => void a2.stop());
    await rx.waitFor((all) => {
      const rs = records(all);
      return byFile(rs, javaPath).length >= 2 * ITERATIONS && byFile(rs, pythonPath).length >= 2 * ITERATIONS;
    }, 30_000);
    // Once the checkpoint covers both files whole, everything read was exported: nothing more can come.
    await until("the checkpoint at the ends of the files", () => {
      const o = checkpointOffsets(dir);
      return o.get(javaPath) === Buffer.byteLength(javaText) && o.get(pythonPath) === Buffer.byteLength(pythonText);
    });
    expect(await a2.stop()).toBe(0);
    const reqs = rx.requests();
    expect(reqs.flatMap((r) => r.unknown_fields)).toEqual([]);
    const all = records(reqs);
    const java = byFile(all, javaPath);
    const python = byFile(all, pythonPath);
    expect(all).toHaveLength(4 * ITERATIONS);
    expect(java.map((r) => r.body)).toEqual(javaRecords);
    expect(python.map((r) => r.body)).toEqual(pythonRecords);

    // Every trace whole: the cause chain in Java, both chained tracebacks (blank lines included) in Python.
    for (const r of java.filter((_, i) => i % 2 === 1)) {
      expect(r.body).toContain("\nCaused by: java.lang.IllegalArgumentException: bad input ");
      expect(r.body).toMatch(/\n\t\.\.\. \d+ more$/);
    }
    for (const [i, r] of python.filter((_, k) => k % 2 === 1).entries()) {
      expect(r.body.split("Traceback (most recent call last):")).toHaveLength(3);
      expect(r.body).toContain("\n\nThe above exception was the direct cause of the following exception:\n\n");
      expect(r.body).toEndWith(`\nValueError: lookup failed for request ${i}`);
    }

    // Severity: number in the data model's range for the level, text as the line wrote it.
    expect(new Set(java.map((r, i) => `${i % 2} ${r.severityNumber} ${r.severityText}`))).toEqual(
      new Set(["0 SEVERITY_NUMBER_INFO INFO", "1 SEVERITY_NUMBER_ERROR ERROR"]),
    );
    expect(new Set(python.map((r, i) => `${i % 2} ${r.severityNumber} ${r.severityText}`))).toEqual(
      new Set(["0 SEVERITY_NUMBER_WARN WARNING", "1 SEVERITY_NUMBER_ERROR ERROR"]),
    );

    // Time: Python's lines carry an RFC 3339 time with a zone; logback's layout has none (left unset).
    for (const r of python) {
      // e.g. 2026-11-25T09:06:48.740074+00:00
      const iso = r.body.slice(0, r.body.indexOf(" "));
      expect(iso).toEndWith("+00:00");
      const seconds = BigInt(Date.parse(`${iso.slice(0, 19)}Z`)) * NS_PER_MS;
      expect(BigInt(r.timeUnixNano!)).toBe(seconds + BigInt(iso.slice(20, 26)) * 1000n);
    }
    expect(java.every((r) => r.timeUnixNano === undefined)).toBe(true);
    // Observed time: when the agent read the record (after this test started it, before the test looked).
    const seen = BigInt(Date.now()) * NS_PER_MS;
    for (const r of all) {
      expect(BigInt(r.observedTimeUnixNano!)).toBeGreaterThanOrEqual(started);
      expect(BigInt(r.observedTimeUnixNano!)).toBeLessThanOrEqual(seen);
    }
    // log.file.* per the semantic conventions; raw lines have no stream.
    expect(java[0]!.attributes).toEqual({ "log.file.path": javaPath, "log.file.name": "java.log" });
    expect(python[0]!.attributes).toEqual({ "log.file.path": pythonPath, "log.file.name": "python.log" });
  }, 120_000);

  test("SIGKILL while Java traces are written: after a restart every record arrives whole; only records after the last checkpoint twice", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-logs-kill-e2e-"));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const rx = await startOfficialReceiver();
    cleanup.push(() => rx.stop());
    const expected = splitRecords(run(["java", join(FIXTURES, "TraceLogger.java"), "300"]));
    expect(expected).toHaveLength(600);
    const path = join(dir, "java.log");
    writeFileSync(path, "");
    const a1 = await spawnAgent({ config: config(dir, rx.endpoint, "200ms") });
    cleanup.push(() => void a1.stop());
    const received = () => records(rx.requests()).map((r) => r.body);
    let written = 0;
    const writeSome = (n: number) => {
      appendFileSync(path, expected.slice(written, written + n).join("\n") + "\n");
      written += n;
    };
    // Written in bursts while the agent reads; killed mid-file once some are exported and checkpointed.
    const writing = (async () => {
      while (written < 600) {
        writeSome(10);
        await Bun.sleep(15);
      }
    })();
    await rx.waitFor((all) => records(all).length >= 100 && (checkpointOffsets(dir).get(path) ?? 0) > 0, 30_000);
    a1.proc.kill("SIGKILL");
    await a1.proc.exited;
    const checkpointed = checkpointOffsets(dir).get(path)!;
    const beforeKill = received().length;
    await writing;
    expect(beforeKill).toBeLessThan(600);
    const a2 = await spawnAgent({ config: config(dir, rx.endpoint, "200ms") });
    cleanup.push(() => void a2.stop());
    await rx.waitFor((all) => new Set(records(all).map((r) => r.body)).size >= 600, 30_000);
    // Everything read was exported once the checkpoint covers the whole file.
    const end = performance.now() + 20_000;
    while (checkpointOffsets(dir).get(path) !== Buffer.byteLength(expected.join("\n") + "\n")) {
      if (performance.now() > end) throw new Error("timed out waiting for the checkpoint at the end of the file");
      await Bun.sleep(20);
    }
    expect(await a2.stop()).toBe(0);
    const got = received();
    const wanted = new Set(expected);
    // No fragment: every record received is one the program wrote, whole.
    expect(got.filter((b) => !wanted.has(b))).toEqual([]);
    expect(new Set(got).size).toBe(600);
    // Only what was exported after the last checkpoint before the kill comes twice.
    let covered = 0;
    for (let offset = 0; offset + Buffer.byteLength(expected[covered]!) + 1 <= checkpointed; covered++) offset += Buffer.byteLength(expected[covered]!) + 1;
    expect(got.length - 600).toBeLessThanOrEqual(beforeKill - covered);
    console.log(`multiline SIGKILL restart: ${beforeKill} records exported before the kill, ${covered} covered by the checkpoint, ${got.length - 600} sent again, 0 lost`);
  }, 120_000);

  test("structured and plain lines, CRI and raw: severity, time, trace context and attributes as the log data model has them", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-logs-dm-e2e-"));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const rx = await startOfficialReceiver();
    cleanup.push(() => rx.stop());
    const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const span = "00f067aa0ba902b7";
    const raw: Array<[line: string, severity: string | undefined, text: string | undefined, time: string | undefined]> = [
      [`{"level":"info","time":"2026-01-02T03:04:05.123456789Z","msg":"upstream answered ERROR 500, retrying","trace_id":"${trace}","span_id":"${span}","trace_flags":"01"}`, "SEVERITY_NUMBER_INFO", "info", "1767323045123456789"],
      ['{"severity":"WARNING","msg":"disk 91% full"}', "SEVERITY_NUMBER_WARN", "WARNING", undefined],
      ['{"level":50,"time":1767323045500,"msg":"pino error"}', "SEVERITY_NUMBER_ERROR", "50", "1767323045500000000"],
      ['{"level":"verbose","msg":"chatty"}', undefined, "verbose", undefined],
      ['{"msg":"no level key; the word error in the body does not count"}', undefined, undefined, undefined],
      ['ts=2026-01-02T03:04:05Z level=debug msg="cache miss, error budget fine"', "SEVERITY_NUMBER_DEBUG", "debug", "1767323045000000000"],
      ["2026-01-02T03:04:06+01:00 FATAL out of memory", "SEVERITY_NUMBER_FATAL", "FATAL", "1767319446000000000"],
      ["E0102 03:04:05.000000       1 reflector.go:138] watch failed", "SEVERITY_NUMBER_ERROR", "E", undefined],
      ["No error found in 12 files", undefined, undefined, undefined],
    ];
    writeFileSync(join(dir, "app.log"), raw.map((r) => r[0]).join("\n") + "\n");
    const id = "c".repeat(64);
    const criPath = join(dir, `web_shop_api-${id}.log`);
    // The container runtime's time wins over the one the application wrote.
    writeFileSync(criPath, `2026-01-02T03:04:07.000000042Z stderr F {"level":"error","time":"2020-01-01T00:00:00Z","msg":"x"}\n2026-01-02T03:04:08Z stdout F plain line\n`);
    const a = await spawnAgent({
      config: QUIET_CONFIG.replace("${OTLP_ENDPOINT:-127.0.0.1:4317}", rx.endpoint) +
        `  logs:\n    enabled: true\n    include: ["${dir}/*.log"]\n    checkpoint_file: ${dir}/state/checkpoint.json\n    poll_interval: 20ms\n`,
    });
    cleanup.push(() => void a.stop());
    const total = raw.length + 2;
    const reqs = await rx.waitFor((all) => records(all).length >= total, 30_000);
    expect(await a.stop()).toBe(0);
    expect(reqs.flatMap((r) => r.unknown_fields)).toEqual([]);
    const all = records(rx.requests());
    expect(all).toHaveLength(total);
    const appRecords = all.filter((r) => r.attributes["log.file.name"] === "app.log");
    expect(appRecords.map((r) => [r.body, r.severityNumber, r.severityText, r.timeUnixNano])).toEqual(raw.map(([line, n, t, time]) => [line, n, t, time]));
    const withTrace = appRecords[0] as Received & { traceId?: string; spanId?: string; flags?: number };
    expect(Buffer.from(withTrace.traceId!, "base64").toString("hex")).toBe(trace);
    expect(Buffer.from(withTrace.spanId!, "base64").toString("hex")).toBe(span);
    expect(withTrace.flags).toBe(1);
    expect(appRecords.slice(1).every((r) => !("traceId" in r))).toBe(true);
    const cri = all.filter((r) => r.attributes["log.file.path"] === criPath);
    expect(cri.map((r) => [r.attributes["log.iostream"], r.attributes["log.file.name"], r.severityNumber, r.timeUnixNano])).toEqual([
      ["stderr", `web_shop_api-${id}.log`, "SEVERITY_NUMBER_ERROR", "1767323047000000042"],
      ["stdout", `web_shop_api-${id}.log`, undefined, "1767323048000000000"],
    ]);
    for (const r of all) expect(BigInt(r.observedTimeUnixNano!)).toBeGreaterThan(0n);
  }, 60_000);
});

test("a start_pattern that is no regular expression: --validate-config names the key and exits 2", () => {
  const dir = mkdtempSync(join(tmpdir(), "svc-logs-bad-"));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "config.yaml");
  writeFileSync(path, 'agent:\n  logs:\n    multiline:\n      - include: ["/var/log/*.log"]\n        start_pattern: "^(\\\\d{4}"\n');
  const r = Bun.spawnSync([BINARY, "--validate-config", path], { stdout: "pipe", stderr: "pipe" });
  expect(r.exitCode).toBe(2);
  expect(r.stdout.toString() + r.stderr.toString()).toContain("agent.logs.multiline[0].start_pattern: not a valid regular expression: ");
});

