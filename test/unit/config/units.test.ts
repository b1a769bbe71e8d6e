import { describe, expect, test } from "bun:test";
import { parseConfig } from "../../../src/config/load";
import { redactConfig } from "../../../src/config/secrets";
import { bytesOf, formatDuration, msOf, parseDuration, parseSize } from "../../../src/config/units";

describe("durations", () => {
  test.each([
    ["500ms", 500],
    ["1s", 1000],
    ["2m", 120_000],
    ["1h30m", 5_400_000],
    ["1.5s", 1500],
    ["250us", 0.25],
    ["0", 0],
  ])("%s is %d ms", (text, ms) => expect(parseDuration(text)).toBe(ms));

  test.each(["", "5", "5x", "s", "1s2", "-1s", "1 s", "ms500"])("%p is not a duration", (text) =>
    expect(parseDuration(text)).toBeUndefined(),
  );

  test("formats back the way operators write them", () => {
    expect(formatDuration(120_000)).toBe("2m");
    expect(formatDuration(1500)).toBe("1500ms");
    expect(formatDuration(3_600_000)).toBe("1h");
  });
});

describe("sizes", () => {
  test.each([
    ["64MiB", 64 * 1024 * 1024],
    ["16777216", 16777216],
    [16777216, 16777216],
    ["1GiB", 1024 ** 3],
    ["4KiB", 4096],
    ["2MB", 2_000_000],
    ["10 kb", 10_000],
  ] as const)("%p is %d bytes", (text, bytes) => expect(parseSize(text)).toBe(bytes));

  test.each(["12QB", "", "MiB", "-5", "1.5.2MiB"])("%p is not a size", (text) => expect(parseSize(text)).toBeUndefined());
  test("negative and fractional integers are refused", () => {
    expect(parseSize(-1)).toBeUndefined();
    expect(parseSize(1.5)).toBeUndefined();
  });
});

describe("typed view of a loaded configuration", () => {
  const yaml = [
    "shutdown_timeout: 1h30m",
    "queues:",
    "  traces: { mem_limit: 2MiB, batch_timeout: 250ms }",
    "  logs: { mem_limit: 4096 }",
    "otlp:",
    "  signals:",
    "    metrics: { timeout: 3s }",
    "agent:",
    "  ebpf: { ringbuf_size: 8MiB }",
    "  memory_limit: { limit: 1GiB }",
    "  logs:",
    "    multiline: [{ include: ['/x/*.log'], start_pattern: '^a', max_bytes: 1KiB, flush_timeout: 2s }]",
  ].join("\n");

  test("durations and sizes read as numbers, the configuration keeps the text as written", () => {
    const c = parseConfig(yaml, {});
    expect(msOf(c, "shutdown_timeout")).toBe(5_400_000);
    expect(msOf(c.queues.traces, "batch_timeout")).toBe(250);
    expect(bytesOf(c.queues.traces, "mem_limit")).toBe(2 * 1024 ** 2);
    expect(bytesOf(c.queues.logs, "mem_limit")).toBe(4096);
    expect(msOf(c.otlp.signals.metrics, "timeout")).toBe(3000);
    expect(bytesOf(c.agent.ebpf, "ringbuf_size")).toBe(8 * 1024 ** 2);
    expect(bytesOf(c.agent.memory_limit, "limit")).toBe(1024 ** 3);
    expect(bytesOf(c.agent.logs.multiline[0]!, "max_bytes")).toBe(1024);
    expect(msOf(c.agent.logs.multiline[0]!, "flush_timeout")).toBe(2000);
    expect(msOf(c.backoff, "max")).toBe(30_000);
    const shown = redactConfig(c);
    expect(shown.shutdown_timeout).toBe("1h30m");
    expect(shown.queues.traces.mem_limit).toBe("2MiB");
    expect(JSON.parse(JSON.stringify(c)).agent.ebpf.ringbuf_size).toBe("8MiB");
  });

  test("a value changed after load, or a node built elsewhere, is read from its text", () => {
    const c = parseConfig(yaml, {});
    c.queues.traces.batch_timeout = "2s";
    expect(msOf(c.queues.traces, "batch_timeout")).toBe(2000);
    expect(msOf({ interval: "15s" }, "interval")).toBe(15_000);
    expect(bytesOf({ max_bytes: "1KB" }, "max_bytes")).toBe(1000);
    expect(() => msOf({ interval: "soon" }, "interval")).toThrow("not a duration");
  });
});
