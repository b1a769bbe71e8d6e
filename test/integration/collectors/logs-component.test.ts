/** collector/logs as a component: disabled, started, reloaded with new patterns, corrupt checkpoint. */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogsCollector } from "../../../src/collectors/logs";
import { parseConfig } from "../../../src/config/load";
import { fakeContext, recordingHost, waitFor } from "../../helpers/fakes/collectors";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function yaml(dir: string, pattern: string, enabled = true): string {
  return `agent:\n  logs:\n    enabled: ${enabled}\n    include: ["${dir}/${pattern}"]\n    checkpoint_file: ${dir}/state/cp.json\n    poll_interval: 10ms\n    rescan_interval: 20ms\n    checkpoint_interval: 50ms\n`;
}

describe("collector/logs component", () => {
  test("disabled by default; a reload turns it on and later switches patterns; shutdown writes the checkpoint", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-logs-c-"));
    dirs.push(dir);
    writeFileSync(join(dir, "a.log"), "a1\na2\n");
    writeFileSync(join(dir, "b.txt"), "b1\n");
    const ctx = fakeContext("");
    const c = createLogsCollector(ctx);
    const host = recordingHost();
    await c.start(host);
    expect(host.last().state).toBe("disabled");
    const on = parseConfig(yaml(dir, "*.log"), {});
    await c.reload!(on, ctx.config);
    expect(host.last().state).toBe("ok");
    await waitFor("a.log lines", () => ctx.pipeline.accepted.logs.length === 2);
    await c.reload!(parseConfig(yaml(dir, "*.txt"), {}), on);
    await waitFor("b.txt line", () => ctx.pipeline.accepted.logs.length === 3);
    expect(ctx.pipeline.accepted.logs.map((r) => r.body)).toEqual(["a1", "a2", "b1"]);
    await c.shutdown(AbortSignal.timeout(5000));
    const cp = JSON.parse(await Bun.file(join(dir, "state/cp.json")).text()) as { files: Array<{ path: string; offset: number }> };
    expect(cp.files).toEqual([expect.objectContaining({ path: join(dir, "b.txt"), offset: 3 })]);
  });

  test("a corrupt checkpoint file is a permanent error naming the file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-logs-c-"));
    dirs.push(dir);
    mkdirSync(join(dir, "state"));
    writeFileSync(join(dir, "state/cp.json"), "{not json");
    const ctx = fakeContext(yaml(dir, "*.log"));
    const c = createLogsCollector(ctx);
    const host = recordingHost();
    await c.start(host);
    expect(host.last().state).toBe("permanent_error");
    expect(host.last().reason).toContain(`checkpoint file ${join(dir, "state/cp.json")}: not JSON`);
    await c.shutdown(AbortSignal.timeout(1000));
  });

  test("records cut short are counted in logs_truncated_total by reason", async () => {
    const dir = mkdtempSync(join(tmpdir(), "svc-logs-c-"));
    dirs.push(dir);
    const trace = ["2024-01-02 03:04:05 ERROR failed", "java.lang.IllegalStateException: x", "\tat A.b(A.java:1)", "\tat A.c(A.java:2)"];
    writeFileSync(join(dir, "a.log"), [...trace, "2024-01-02 03:04:06 INFO " + "y".repeat(3000), "2024-01-02 03:04:07 INFO next"].join("\n") + "\n");
    const multiline = `    max_line_size: 1KiB\n    multiline:\n      - include: ["${dir}/*.log"]\n        start_pattern: '^\\d{4}-'\n        max_lines: 2\n        flush_timeout: 50ms\n`;
    const ctx = fakeContext(yaml(dir, "*.log") + multiline);
    const c = createLogsCollector(ctx);
    await c.start(recordingHost());
    await waitFor("three records", () => ctx.pipeline.accepted.logs.length === 3);
    await c.shutdown(AbortSignal.timeout(5000));
    expect(ctx.pipeline.accepted.logs.map((r) => r.attributes?.["log.truncated"])).toEqual([true, true, undefined]);
    const text = await ctx.metrics.render();
    expect(text).toContain('svc_logs_truncated_total{reason="max_lines"} 1\n');
    expect(text).toContain('svc_logs_truncated_total{reason="max_line_size"} 1\n');
    // Every reason is a series from the start.
    expect(text).toContain('svc_logs_truncated_total{reason="max_bytes"} 0\n');
  });
});

