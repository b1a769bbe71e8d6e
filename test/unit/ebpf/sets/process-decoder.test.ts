import { describe, expect, test } from "bun:test";
import { decodeProcessEvent, PROCESS_EVENT_LAYOUT as L } from "../../../../src/ebpf/sets/process-decoder";

/** A record laid out as `struct process_event` in ffi/bpf/process.bpf.c, at `at` inside a larger buffer. */
function fixture(at: number, kind: number, filename: string): DataView {
  const buf = new Uint8Array(at + L.size + 16);
  const dv = new DataView(buf.buffer);
  dv.setBigUint64(at + 0, 123456789n, true);
  dv.setBigUint64(at + 8, 4242n, true);
  dv.setUint32(at + 16, kind, true);
  dv.setUint32(at + 20, 1000, true);
  dv.setUint32(at + 24, 1001, true);
  dv.setUint32(at + 28, 1, true);
  dv.setUint32(at + 32, 65534, true);
  dv.setInt32(at + 36, 256, true);
  buf.set(new TextEncoder().encode("curl\0garbage"), at + 40);
  buf.set(new TextEncoder().encode(filename + "\0"), at + 56);
  return dv;
}

describe("decodeProcessEvent", () => {
  test("decodes every field at the C offsets", () => {
    const e = decodeProcessEvent(fixture(24, 1, "/usr/bin/curl"), 24, L.size);
    expect(e).toEqual({
      kind: "exec",
      timestampNs: 123456789n,
      cgroupId: 4242n,
      pid: 1000,
      tid: 1001,
      ppid: 1,
      uid: 65534,
      exitCode: 256,
      comm: "curl",
      filename: "/usr/bin/curl",
    });
  });

  test("exit events carry no filename", () => {
    expect(decodeProcessEvent(fixture(0, 2, "/ignored"), 0, L.size).filename).toBe("");
  });

  test("a comm that fills its 16 bytes has no NUL and is read whole", () => {
    const dv = fixture(0, 1, "/x");
    new Uint8Array(dv.buffer).set(new TextEncoder().encode("abcdefghijklmnop"), 40);
    expect(decodeProcessEvent(dv, 0, L.size).comm).toBe("abcdefghijklmnop");
  });

  test("short records and unknown kinds are RangeErrors", () => {
    expect(() => decodeProcessEvent(fixture(0, 1, "/x"), 0, L.size - 1)).toThrow(RangeError);
    expect(() => decodeProcessEvent(fixture(0, 9, "/x"), 0, L.size)).toThrow(RangeError);
  });
});
