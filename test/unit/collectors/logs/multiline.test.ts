/** Joining the lines of a record by a start pattern (src/collectors/logs/multiline.ts). */
import { describe, expect, test } from "bun:test";
import { MultilineAssembler, ruleFor, type LogicalLine, type MultilineRule } from "../../../../src/collectors/logs/multiline";

function rule(over: Partial<MultilineRule> = {}): MultilineRule {
  return { index: 0, include: [new Bun.Glob("/logs/*.log")], start: /^\d{4}-/, maxLines: 100, maxBytes: 4096, flushTimeoutMs: 1000, ...over };
}

/** Feeds lines (offsets as a file would give them) and collects the records that come out. */
function feed(a: MultilineAssembler, texts: string[], at = 0, generation = 0) {
  const out: Array<{ body: string; end: number; lines: number; truncated: string | undefined }> = [];
  let offset = 0;
  for (const message of texts) {
    const line: LogicalLine = {
      message,
      parsed: { timeUnixNano: undefined, stream: undefined, partial: false, message, format: "raw" },
      start: offset,
      end: offset + Buffer.byteLength(message) + 1,
      cut: false,
      readAtNs: 0n,
    };
    offset = line.end;
    const r = a.push(line, at, generation);
    if (r) out.push({ body: r.body, end: r.end, lines: r.lines, truncated: r.truncated });
  }
  return out;
}

describe("multiline assembly", () => {
  test("a record runs from a start line to the line before the next; the last waits for more or the flush timeout", () => {
    const a = new MultilineAssembler(rule());
    const out = feed(a, ["2024-01-01 ERROR boom", "java.lang.IllegalStateException: x", "\tat A.b(A.java:1)", "2024-01-01 INFO ok", "2024-01-01 INFO tail", "\tmore"]);
    expect(out.map((r) => r.body)).toEqual(["2024-01-01 ERROR boom\njava.lang.IllegalStateException: x\n\tat A.b(A.java:1)", "2024-01-01 INFO ok"]);
    expect(out.map((r) => r.lines)).toEqual([3, 1]);
    // The checkpoint must stop at the record still in progress.
    expect(a.startOffset).toBe(out[1]!.end);
    expect(a.flushIfIdle(999)).toBeUndefined();
    const last = a.flushIfIdle(1000);
    expect(last?.body).toBe("2024-01-01 INFO tail\n\tmore");
    expect(a.startOffset).toBeUndefined();
    expect(a.flush()).toBeUndefined();
  });

  test("lines before the first start line make a record of their own (nothing dropped)", () => {
    const a = new MultilineAssembler(rule());
    const out = feed(a, ["\tat X.y(X.java:9)", "\tat X.z(X.java:10)", "2024-01-01 INFO next"]);
    expect(out.map((r) => r.body)).toEqual(["\tat X.y(X.java:9)\n\tat X.z(X.java:10)"]);
  });

  test("max_lines and max_bytes drop the rest up to the next start line and mark the record", () => {
    const byLines = new MultilineAssembler(rule({ maxLines: 3 }));
    const out = feed(byLines, ["2024-01-01 a", "l1", "l2", "l3", "l4", "2024-01-01 next"]);
    // The dropped lines l3 and l4 still belong to it: its end (the checkpoint) is after them.
    expect(out).toEqual([{ body: "2024-01-01 a\nl1\nl2", end: 25, lines: 3, truncated: "max_lines" }]);
    const byBytes = new MultilineAssembler(rule({ maxBytes: 20 }));
    const out2 = feed(byBytes, ["2024-01-01 a", "1234567", "x", "2024-01-01 b"]);
    // 12 + 1 + 7 = 20 bytes fit; the next line would pass the bound.
    expect(out2.map((r) => [r.body, r.truncated])).toEqual([["2024-01-01 a\n1234567", "max_bytes"]]);
    const longFirst = new MultilineAssembler(rule({ maxBytes: 5 }));
    feed(longFirst, ["2024-01-01 a long first line"]);
    expect(longFirst.flush()).toMatchObject({ body: "2024-", truncated: "max_bytes" });
  });

  test("a new tailer generation (the file was truncated) ends the record in progress", () => {
    const a = new MultilineAssembler(rule());
    feed(a, ["2024-01-01 a", "cont"], 0, 0);
    const out = feed(a, ["cont after truncation"], 0, 1);
    expect(out).toEqual([{ body: "2024-01-01 a\ncont", end: 18, lines: 2, truncated: undefined }]);
    expect(a.flush()?.generation).toBe(1);
  });

  test("a file takes the first rule whose patterns match its path", () => {
    const java = rule({ index: 0, include: [new Bun.Glob("/logs/java-*.log")] });
    const all = rule({ index: 1, include: [new Bun.Glob("/logs/*.log"), new Bun.Glob("/other/**/*.log")] });
    expect(ruleFor([java, all], "/logs/java-1.log")?.index).toBe(0);
    expect(ruleFor([java, all], "/logs/py.log")?.index).toBe(1);
    expect(ruleFor([java, all], "/other/a/b.log")?.index).toBe(1);
    expect(ruleFor([java, all], "/elsewhere/x.log")).toBeUndefined();
  });
});
