import { describe, expect, test } from "bun:test";
import { Logger } from "../../../src/log/logger";

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
});
