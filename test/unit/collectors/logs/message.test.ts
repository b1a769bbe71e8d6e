/** Severity and time read from log messages (src/collectors/logs/message.ts). */
import { describe, expect, test } from "bun:test";
import { logfmtPairs, parseTimeValue, readMessage, severityOfLevel } from "../../../../src/collectors/logs/message";

const sev = (m: string) => {
  const f = readMessage(m);
  return f.severityNumber === undefined ? undefined : [f.severityNumber, f.severityText];
};

describe("severity from the message", () => {
  test("level words map to the data model's ranges (TRACE 1-4, DEBUG 5-8, INFO 9-12, WARN 13-16, ERROR 17-20, FATAL 21-24)", () => {
    const expected: Record<string, number> = {
      TRACE: 1, FINEST: 1, DEBUG: 5, FINER: 5, FINE: 6, INFO: 9, NOTICE: 10, WARN: 13, WARNING: 13, ERROR: 17, ERR: 17,
      SEVERE: 17, CRITICAL: 18, DPANIC: 18, ALERT: 19, PANIC: 19, FATAL: 21, EMERG: 21,
    };
    for (const [word, n] of Object.entries(expected)) {
      expect(severityOfLevel(word)).toBe(n);
      expect(severityOfLevel(word.toLowerCase())).toBe(n);
    }
    expect([10, 20, 30, 40, 50, 60].map((n) => severityOfLevel(n))).toEqual([1, 5, 9, 13, 17, 21]);
    expect(severityOfLevel("35")).toBeUndefined();
    expect(severityOfLevel("verbose-ish")).toBeUndefined();
  });

  test("JSON: the level key wins over words in the message body", () => {
    expect(sev('{"level":"info","msg":"request failed with ERROR 500"}')).toEqual([9, "info"]);
    expect(sev('{"msg":"ERROR: disk full","severity":"WARNING"}')).toEqual([13, "WARNING"]);
    expect(sev('{"log.level":"error","message":"x"}')).toEqual([17, "error"]);
    expect(sev('{"log":{"level":"debug"},"message":"x"}')).toEqual([5, "debug"]);
    expect(sev('{"levelname":"CRITICAL","message":"x"}')).toEqual([18, "CRITICAL"]);
    expect(sev('{"Level":"Warn","Message":"x"}')).toEqual([13, "Warn"]);
    expect(sev('{"level":50,"time":1704164645123,"msg":"pino"}')).toEqual([17, "50"]);
    // A JSON line without a level key has no severity, whatever its text says.
    expect(sev('{"msg":"ERROR everywhere","status":"error"}')).toBeUndefined();
    // The first level key present decides, even when its value is not a level.
    expect(sev('{"level":"chatty","severity":"error"}')).toBeUndefined();
  });

  test("logfmt: level= wins; quoted values are values, not keys", () => {
    expect(sev('time=2024-01-02T03:04:05Z level=info msg="upstream error level=error"')).toEqual([9, "info"]);
    expect(sev("ts=1704164645.5 lvl=warn caller=main.go:12 msg=slow")).toEqual([13, "warn"]);
    expect(sev('msg="no level here, ERROR inside" status=500')).toBeUndefined();
    expect(logfmtPairs('a=1 b="two \\"q\\" words" c= d')).toEqual(new Map([["a", "1"], ["b", 'two "q" words'], ["c", ""]]));
  });

  test("plain text: the first level token near the start", () => {
    const cases: Array<[string, number, string]> = [
      ["2024-01-02 03:04:05,123 ERROR [main] com.acme.Billing - charge failed", 17, "ERROR"],
      ["2024-01-02T03:04:05.123Z  INFO 4242 --- [main] o.s.b.App : Started with an error count of 0", 9, "INFO"],
      ["12:00:01.123 [http-nio-8080-exec-1] WARN  c.a.Api - slow", 13, "WARN"],
      ["WARNING:root:disk almost full", 13, "WARNING"],
      ["[Wed Oct 11 14:32:52 2000] [error] [client 127.0.0.1] denied", 17, "error"],
      ["2024/01/02 03:04:05 [warn] 12#0: *1 upstream slow", 13, "warn"],
      ["I, [2024-01-02T03:04:05.000 #1]  INFO -- : Completed 200", 9, "INFO"],
      ["E0102 03:04:05.000000       1 reflector.go:138] watch failed", 17, "E"],
      ["2024-01-02T03:04:05.000Z\tdebug\tpkg/x.go:1\tcache miss", 5, "debug"],
      ["Error: connect ECONNREFUSED 127.0.0.1:5432", 17, "Error"],
      ["2024-01-02 03:04:05 INFO Request error for user 7", 9, "INFO"],
    ];
    for (const [line, n, text] of cases) expect(sev(line), line).toEqual([n, text]);
  });

  test("plain text: words inside a sentence are not levels", () => {
    expect(sev("No error found in 12 files")).toBeUndefined();
    expect(sev("GET /api/error 200 12ms")).toBeUndefined();
    expect(sev("Notice that the cache is cold")).toBeUndefined();
    expect(sev("user updated their info at 12:00")).toBeUndefined();
    expect(sev("Traceback (most recent call last):")).toBeUndefined();
    expect(sev("\tat com.acme.Main.main(Main.java:5)")).toBeUndefined();
    expect(sev(`${"x ".repeat(10)}ERROR late in the line`)).toBeUndefined();
    expect(sev("")).toBeUndefined();
  });
});

describe("time from the message", () => {
  test("JSON, logfmt and a leading RFC 3339 time with a zone", () => {
    expect(readMessage('{"time":"2024-01-02T03:04:05.123456789Z","level":"info"}').timeUnixNano).toBe(1704164645123456789n);
    expect(readMessage('{"@timestamp":"2024-01-02T04:04:05.5+01:00"}').timeUnixNano).toBe(1704164645500000000n);
    expect(readMessage('{"level":30,"time":1704164645123,"msg":"pino"}').timeUnixNano).toBe(1704164645123000000n);
    expect(readMessage('{"ts":1704164645.25,"level":"info"}').timeUnixNano).toBe(1704164645250000000n);
    expect(readMessage("time=2024-01-02T03:04:05Z level=info msg=x").timeUnixNano).toBe(1704164645000000000n);
    expect(readMessage("2024-01-02T03:04:05.000001Z INFO x").timeUnixNano).toBe(1704164645000001000n);
    expect(readMessage("[2024-01-02 03:04:05,250+0000] WARN x").timeUnixNano).toBe(1704164645250000000n);
  });

  test("no zone, no time", () => {
    expect(readMessage("2024-01-02 03:04:05,123 ERROR x").timeUnixNano).toBeUndefined();
    expect(readMessage('{"time":"yesterday"}').timeUnixNano).toBeUndefined();
    expect(parseTimeValue("2024-13-45T03:04:05Z")).toBeUndefined();
    expect(parseTimeValue(1704164645123456789)).toBe(BigInt(1704164645123456789));
  });
});

describe("other fields of structured messages", () => {
  test("a level value that is no known level is kept as severity text alone", () => {
    expect(readMessage('{"level":"verbose","msg":"x"}')).toEqual({ severityText: "verbose" });
    expect(readMessage("level=notice2 msg=x")).toEqual({ severityText: "notice2" });
    expect(readMessage('{"level":"a sentence, not a level"}')).toEqual({});
    expect(readMessage('{"level":{"nested":1}}')).toEqual({});
  });

  test("trace context from JSON and logfmt (valid, non-zero ids only)", () => {
    const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const span = "00f067aa0ba902b7";
    const f = readMessage(`{"level":"info","trace_id":"${trace}","span_id":"${span}","trace_flags":"01"}`);
    expect(Buffer.from(f.traceId!).toString("hex")).toBe(trace);
    expect(Buffer.from(f.spanId!).toString("hex")).toBe(span);
    expect(f.traceFlags).toBe(1);
    const ecs = readMessage(`{"log.level":"warn","trace.id":"${trace.toUpperCase()}","span.id":"${span}"}`);
    expect(Buffer.from(ecs.traceId!).toString("hex")).toBe(trace);
    const lf = readMessage(`level=info trace_id=${trace} span_id=${span} trace_flags=1 msg=x`);
    expect([Buffer.from(lf.traceId!).toString("hex"), Buffer.from(lf.spanId!).toString("hex"), lf.traceFlags]).toEqual([trace, span, 1]);
    expect(readMessage(`{"trace_id":"${"0".repeat(32)}","span_id":"${span}"}`).traceId).toBeUndefined();
    expect(readMessage('{"trace_id":"not-hex","span_id":"x"}').traceId).toBeUndefined();
    // A span id without a trace id is not used.
    expect(readMessage(`{"span_id":"${span}"}`).spanId).toBeUndefined();
  });
});

