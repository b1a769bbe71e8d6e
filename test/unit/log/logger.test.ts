import { describe, expect, test } from "bun:test";
import { Logger, RECENT_MAX_BYTES, RECENT_RECORD_MAX_BYTES } from "../../../src/log/logger";

function capture(options: ConstructorParameters<typeof Logger>[0] = {}) {
  const lines: string[] = [];
  const logger = new Logger({ ...options, sink: (l) => lines.push(l) });
  return { logger, lines };
}

describe("logger", () => {
  test("JSON records have an ISO 8601 UTC timestamp with milliseconds, level, msg and context", () => {
    const { logger, lines } = capture();
    logger.info("export batch", { spans: 512, latency_ms: 12, endpoint: "127.0.0.1:4317" });
    const r = JSON.parse(lines[0]!);
    expect(r.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(r).toMatchObject({ level: "info", msg: "export batch", spans: 512, latency_ms: 12, endpoint: "127.0.0.1:4317" });
  });

  test("records below the level are not written", () => {
    const { logger, lines } = capture({ level: "warn" });
    logger.debug("a");
    logger.info("b");
    logger.warn("c");
    logger.error("d");
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual(["c", "d"]);
  });

  test("configure changes level and format on the next record, for children too", () => {
    const { logger, lines } = capture();
    const child = logger.child({ component: "x/y" });
    logger.configure({ log_level: "debug", log_format: "text" });
    child.debug("hello", { n: 1, s: "two words" });
    expect(lines[0]).toMatch(/^\S+Z DEBUG hello component=x\/y n=1 s="two words"$/);
  });

  test("the ring of recent records is bounded and ordered", () => {
    const { logger } = capture();
    logger.configure({ log_level: "info", log_format: "json", recent_records: 3 });
    for (let i = 0; i < 10; i++) logger.info(`m${i}`);
    expect(logger.recent().map((r) => r.msg)).toEqual(["m7", "m8", "m9"]);
  });

  test("secrets never appear in a written line or in the ring", () => {
    const { logger, lines } = capture();
    logger.setSecrets(["tok-123", ""]);
    logger.error("auth failed for tok-123", { header: "Bearer tok-123", nested: { t: "tok-123" } });
    expect(lines.join("\n")).not.toContain("tok-123");
    expect(JSON.stringify(logger.recent())).not.toContain("tok-123");
    expect(lines[0]).toContain("[REDACTED]");
  });

  test("errors in context are written as their message", () => {
    const { logger, lines } = capture();
    logger.error("failed", { error: new Error("boom") });
    expect(JSON.parse(lines[0]!).error).toBe("boom");
  });

  test("the ring keeps every level written, whatever the mode, and a copy: later changes to a context object do not show", () => {
    const { logger } = capture();
    const context = { items: ["a"] };
    logger.info("one", context);
    logger.warn("two");
    context.items.push("b");
    expect(logger.recent().map((r) => [r.level, r.msg])).toEqual([["info", "one"], ["warn", "two"]]);
    expect(logger.recent()[0]!.items).toEqual(["a"]);
  });

  test("the ring is bounded in bytes as well as in records, whatever svc.recent_records says", () => {
    const { logger } = capture();
    logger.configure({ log_level: "info", log_format: "json", recent_records: 100_000 });
    const problems = Array.from({ length: 30 }, (_, i) => `queues.traces.key_${i}: unknown key (line ${i}, column 1)`);
    for (let i = 0; i < 5000; i++) logger.warn("reload rejected: invalid configuration", { i, problems });
    expect(logger.recentBytes).toBeLessThanOrEqual(RECENT_MAX_BYTES);
    const kept = logger.recent();
    expect(kept.length).toBeGreaterThan(100);
    expect(kept.at(-1)!.i).toBe(4999);
    expect(kept.map((r) => r.i)).toEqual(Array.from({ length: kept.length }, (_, k) => 5000 - kept.length + k));
  });

  test("a record longer than RECENT_RECORD_MAX_BYTES is kept shortened, written whole, and a cut never leaves part of a secret", () => {
    const { logger, lines } = capture();
    const secret = "s3cr3t-" + "x".repeat(600);
    logger.setSecrets([secret]);
    const problems = Array.from({ length: 200 }, (_, i) => `problem ${i}`);
    logger.warn("long", { problems, blob: "y".repeat(10_000), token: secret, nested: { deep: "z".repeat(5000) } });
    expect(lines[0]!.length).toBeGreaterThan(RECENT_RECORD_MAX_BYTES);
    const [kept] = logger.recent();
    expect(JSON.stringify(kept).length).toBeLessThanOrEqual(RECENT_RECORD_MAX_BYTES);
    expect(kept).toMatchObject({ level: "warn", msg: "long", truncated: true, token: "[REDACTED]" });
    expect((kept!.problems as string[])[0]).toBe("problem 0");
    expect((kept!.problems as string[]).at(-1)).toMatch(/^\.\.\. \(\d+ more items\)$/);
    expect(JSON.stringify(kept)).not.toContain("s3cr3t");
  });

  test("changing recent_records keeps the newest records; 0 keeps none", () => {
    const { logger } = capture();
    for (let i = 0; i < 10; i++) logger.info(`m${i}`);
    logger.configure({ log_level: "info", log_format: "json", recent_records: 4 });
    expect(logger.recent().map((r) => r.msg)).toEqual(["m6", "m7", "m8", "m9"]);
    logger.configure({ log_level: "info", log_format: "json", recent_records: 0 });
    logger.info("m10");
    expect(logger.recent()).toEqual([]);
  });
});
