import { describe, expect, test } from "bun:test";
import { entrySites } from "../../../../src/collectors/tls/placement";
import { Detaches, TlsTargetRegistry, type AttachProbe, type PlanSites } from "../../../../src/collectors/tls/registry";
import { libsslInMaps, statKey, type StaticVerdict, type TargetSource } from "../../../../src/collectors/tls/targets";

const LIBSSL3 = "7f0000000000-7f0000001000 r-xp 00020000 08:01 4242                       /usr/lib/x86_64-linux-gnu/libssl.so.3";
const mapsWith = (...lines: string[]) => ["55550000-55551000 r-xp 00000000 08:01 100 /usr/bin/python3.11", ...lines, "7fff0000-7fff1000 rw-p 00000000 00:00 0 [stack]"].join("\n");

class FakeSource {
  readonly maps = new Map<number, string>();
  readonly exes = new Map<number, { path: string; key: string; size: number }>();
  mapsOf = (pid: number) => this.maps.get(pid);
  pids = () => [...this.maps.keys()];
  executable = (pid: number) => this.exes.get(pid);
  hostPath = (pid: number, path: string) => `/proc/${pid}/root${path}`;
}

function fixture(max = 8, verdict: (path: string) => StaticVerdict = () => ({ kind: "none" }), plan: PlanSites = (_path, functions) => entrySites(functions), detachDelayMs = 0, closeAside = false) {
  const clock = { now: 1_000_000 };
  /** With closeAside: the detaches in flight (a link's close returns a promise settled by ending it). */
  const inFlight: Array<() => void> = [];
  let detachesDone = 0;
  const src = new FakeSource();
  const source: TargetSource = { maps: src.mapsOf, pids: src.pids, executable: src.executable, hostPath: src.hostPath };
  const links: Array<{ binary: string; func: string; offset?: number; ret: boolean; closed: boolean }> = [];
  const missing = new Set<string>();
  const attach: AttachProbe = (binary, site, ret) => {
    const func = site.program;
    if (missing.has(site.offset === undefined ? func : `${func}+${site.offset}`)) throw new Error(`bpf_program__attach_uprobe_opts: ENOENT (no symbol ${func})`);
    const l = { binary, func, offset: site.offset, ret, closed: false };
    links.push(l);
    return {
      close: () => {
        if (l.closed) return;
        l.closed = true;
        if (closeAside) return new Promise<void>((resolve) => inFlight.push(resolve));
      },
      [Symbol.dispose]() {},
    };
  };
  const detaches = new Detaches();
  const reg = new TlsTargetRegistry(source, attach, max, { verdict: (p) => verdict(p), plan, detachDelayMs, now: () => clock.now, onDetachesDone: () => detachesDone++, detaches });
  /** Ends every detach in flight and lets their promises settle. */
  const endDetaches = async () => {
    for (const end of inFlight.splice(0)) end();
    await Bun.sleep(0);
  };
  return { src, reg, links, missing, clock, detaches, endDetaches, detachesDone: () => detachesDone, live: () => links.filter((l) => !l.closed) };
}

describe("libssl in /proc/<pid>/maps", () => {
  test("each libssl file once (by device and inode), other files and anonymous mappings ignored", () => {
    const text = mapsWith(
      LIBSSL3,
      "7f0000001000-7f0000002000 r--p 00090000 08:01 4242                       /usr/lib/x86_64-linux-gnu/libssl.so.3",
      "7f0000002000-7f0000003000 r-xp 00000000 08:01 4243 /usr/lib/x86_64-linux-gnu/libcrypto.so.3",
      "7f0000003000-7f0000004000 r-xp 00000000 fd:02 99 /opt/app/lib/libssl.so.1.1",
      "7f0000004000-7f0000005000 r-xp 00000000 08:01 98 /usr/lib/libssl.so.3 (deleted)",
    );
    expect(libsslInMaps(text)).toEqual([
      { key: "08:01:4242", path: "/usr/lib/x86_64-linux-gnu/libssl.so.3" },
      { key: "fd:02:99", path: "/opt/app/lib/libssl.so.1.1" },
    ]);
  });

  test("stat devices are written as maps writes them", () => {
    expect(statKey(0x801, 4242)).toBe("08:01:4242");
    expect(statKey(0xfd02, 7)).toBe("fd:02:7");
  });
});

describe("TLS target registry", () => {
  test("a library is attached once for every process mapping it, and detached when the last one exits", () => {
    const { src, reg, live } = fixture();
    src.maps.set(10, mapsWith(LIBSSL3));
    src.maps.set(11, mapsWith(LIBSSL3));
    reg.scan(10);
    reg.scan(11);
    reg.scan(10);
    expect(live()).toHaveLength(8);
    expect(live().map((l) => `${l.func}:${l.ret}`).sort()).toEqual(["SSL_read:false", "SSL_read:true", "SSL_read_ex:false", "SSL_read_ex:true", "SSL_write:false", "SSL_write:true", "SSL_write_ex:false", "SSL_write_ex:true"]);
    expect(live()[0]!.binary).toBe("/proc/10/root/usr/lib/x86_64-linux-gnu/libssl.so.3");
    expect(reg.view()).toEqual([{ path: "/usr/lib/x86_64-linux-gnu/libssl.so.3", kind: "shared", state: "attached", functions: ["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"], processes: 2, pids: [10, 11] }]);
    reg.forget(10);
    expect(live()).toHaveLength(8);
    reg.forget(11);
    expect(live()).toHaveLength(0);
    expect(reg.view()).toEqual([]);
    expect(reg.counters).toEqual({ attaches: 1, detaches: 1, failures: 0 });
  });

  test("with a detach delay, a library no process holds keeps its probes until the delay passes; a process mapping it in the meantime reuses them", () => {
    const { src, reg, live, clock } = fixture(8, undefined, undefined, 60_000);
    const exited = (pid: number) => {
      src.maps.delete(pid);
      reg.forget(pid);
    };
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    exited(10);
    expect(live()).toHaveLength(8);
    expect(reg.attachedCount).toBe(1);
    expect(reg.view()).toEqual([
      { path: "/usr/lib/x86_64-linux-gnu/libssl.so.3", kind: "shared", state: "attached", functions: ["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"], processes: 0, pids: [], detach_at: new Date(1_060_000).toISOString() },
    ]);
    clock.now += 59_999;
    expect(reg.sweep()).toBe(0);
    // A client started again within the delay: the same links, no attach, and it holds the library again.
    src.maps.set(11, mapsWith(LIBSSL3));
    reg.scan(11);
    expect(reg.counters).toEqual({ attaches: 1, detaches: 0, failures: 0 });
    expect(reg.holdsAttached(11)).toBe(true);
    expect(reg.view()[0]).not.toHaveProperty("detach_at");
    clock.now += 120_000;
    expect(reg.sweep()).toBe(0);
    expect(live()).toHaveLength(8);
    exited(11);
    clock.now += 59_999;
    expect(reg.sweep()).toBe(0);
    clock.now += 1;
    expect(reg.sweep()).toBe(1);
    expect(live()).toHaveLength(0);
    expect(reg.view()).toEqual([]);
    expect(reg.counters).toEqual({ attaches: 1, detaches: 1, failures: 0 });
    // After the delay a new process attaches afresh.
    src.maps.set(12, mapsWith(LIBSSL3));
    reg.scan(12);
    expect(live()).toHaveLength(8);
    expect(reg.counters.attaches).toBe(2);
  });

  test("at max targets, libraries no process holds make room for a new one, the longest idle first", () => {
    const { src, reg, live, clock } = fixture(2, undefined, undefined, 60_000);
    const lib = (dev: string, ino: number, path: string) => `7f0000000000-7f0000001000 r-xp 00020000 ${dev} ${ino} ${path}`;
    const a = lib("08:01", 1, "/a/libssl.so.3");
    const b = lib("08:01", 2, "/b/libssl.so.3");
    const c = lib("08:01", 3, "/c/libssl.so.3");
    src.maps.set(10, mapsWith(a));
    src.maps.set(11, mapsWith(b));
    reg.scan(10);
    reg.scan(11);
    reg.forget(10);
    clock.now += 1000;
    reg.forget(11);
    src.maps.set(12, mapsWith(c));
    reg.scan(12);
    expect(reg.view().map((t) => [t.path, t.state, t.processes])).toEqual([
      ["/b/libssl.so.3", "attached", 0],
      ["/c/libssl.so.3", "attached", 1],
    ]);
    expect(live().filter((l) => l.binary.includes("/a/"))).toHaveLength(0);
    expect(reg.counters).toEqual({ attaches: 3, detaches: 1, failures: 0 });
  });

  test("while detaches end on another thread no file is attached: the scan is deferred, and done again once they have ended", async () => {
    const { src, reg, live, detaches, endDetaches, detachesDone } = fixture(8, undefined, undefined, 0, true);
    const other = "7f0000000000-7f0000001000 r-xp 00020000 08:01 77 /opt/b/libssl.so.3";
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    expect(live()).toHaveLength(8);
    reg.forget(10);
    expect(detaches.inFlight).toBe(8);
    // A process mapping another libssl meanwhile: nothing attached yet, its pid kept for later.
    src.maps.set(11, mapsWith(other));
    reg.scan(11);
    expect(live()).toHaveLength(0);
    expect(reg.view()).toEqual([]);
    expect(reg.holdsAttached(11)).toBe(false);
    await endDetaches();
    expect(detaches.inFlight).toBe(0);
    expect(detachesDone()).toBe(1);
    expect(reg.takeDeferred()).toEqual([11]);
    expect(reg.takeDeferred()).toEqual([]);
    reg.scan(11);
    expect(live()).toHaveLength(8);
    expect(reg.holdsAttached(11)).toBe(true);
    expect(reg.counters).toEqual({ attaches: 2, detaches: 1, failures: 0 });
  });

  test("detaches of a closed registry (a reload's) defer the next registry's attaches in the same process", async () => {
    const { src, reg, live, detaches, endDetaches } = fixture(8, undefined, undefined, 0, true);
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    reg.close();
    expect(detaches.inFlight).toBe(8);
    const attached: string[] = [];
    let rescans = 0;
    const next = new TlsTargetRegistry(
      { maps: (pid) => src.maps.get(pid), pids: () => [...src.maps.keys()], executable: () => undefined, hostPath: (_pid, path) => path },
      (binary, site, ret) => {
        attached.push(`${binary}:${site.program}:${ret}`);
        return { close: () => {}, [Symbol.dispose]() {} };
      },
      8,
      { plan: (_path, functions) => entrySites(functions), detaches, onDetachesDone: () => rescans++ },
    );
    next.scan(10);
    expect(attached).toEqual([]);
    await endDetaches();
    expect(live()).toHaveLength(0);
    expect(rescans).toBe(1);
    expect(next.takeDeferred()).toEqual([10]);
    next.scan(10);
    expect(attached).toHaveLength(8);
  });

  test("a library that must make room detaches the idle one and is attached once that detach has ended", async () => {
    const { src, reg, live, detaches, endDetaches, clock } = fixture(1, undefined, undefined, 60_000, true);
    const other = "7f0000000000-7f0000001000 r-xp 00020000 08:01 77 /opt/b/libssl.so.3";
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    reg.forget(10);
    clock.now += 1000;
    src.maps.set(11, mapsWith(other));
    reg.scan(11);
    expect(live()).toHaveLength(0);
    expect(detaches.inFlight).toBe(8);
    await endDetaches();
    expect(reg.takeDeferred()).toEqual([11]);
    reg.scan(11);
    expect(reg.view().map((t) => [t.path, t.state, t.processes])).toEqual([["/opt/b/libssl.so.3", "attached", 1]]);
    expect(live().every((l) => l.binary === "/proc/11/root/opt/b/libssl.so.3")).toBe(true);
  });

  test("a library unmapped by a running process is released on the next scan; a gone process releases everything", () => {
    const { src, reg, live } = fixture();
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    expect(live()).toHaveLength(8);
    src.maps.set(10, mapsWith());
    reg.scan(10);
    expect(live()).toHaveLength(0);
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    src.maps.delete(10);
    reg.scan(10);
    expect(live()).toHaveLength(0);
    expect(reg.pids()).toEqual([]);
  });

  test("OpenSSL without the _ex functions (1.1.0) is attached on SSL_read/SSL_write; without SSL_read it fails with the reason", () => {
    const { src, reg, live, missing } = fixture();
    missing.add("SSL_read_ex").add("SSL_write_ex");
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    expect(live()).toHaveLength(4);
    expect(reg.view()[0]).toMatchObject({ state: "attached", functions: ["SSL_write", "SSL_read"] });
    missing.add("SSL_read");
    src.maps.set(11, mapsWith("7f0000003000-7f0000004000 r-xp 00000000 fd:02 99 /opt/app/lib/libssl.so.1.1"));
    reg.scan(11);
    const failed = reg.view().find((t) => t.state === "failed")!;
    expect(failed.path).toBe("/opt/app/lib/libssl.so.1.1");
    expect(failed.reason).toContain("cannot probe SSL_read");
    expect(failed.reason).toContain("ENOENT");
    expect(live()).toHaveLength(4);
  });

  test("a site inside the library covers the functions that call it; one that does not attach falls back to the functions' entries", () => {
    const routed: PlanSites = () => [
      { program: "SSL_read_ex", offset: 0x35290, covers: ["SSL_read_ex", "SSL_read"] },
      { program: "SSL_write_ex", offset: 0x355a0, covers: ["SSL_write_ex", "SSL_write"] },
    ];
    const { src, reg, missing, live } = fixture(8, undefined, routed);
    missing.add(`SSL_write_ex+${0x355a0}`);
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    expect(live().map((l) => `${l.func}${l.offset === undefined ? "" : `+${l.offset.toString(16)}`}:${l.ret}`)).toEqual([
      "SSL_read_ex+35290:false",
      "SSL_read_ex+35290:true",
      "SSL_write_ex:false",
      "SSL_write_ex:true",
      "SSL_write:false",
      "SSL_write:true",
    ]);
    expect(reg.view()[0]).toMatchObject({ state: "attached", functions: ["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"] });
  });

  test("static executables: with symbols attached by their symbols, without them listed as not traceable", () => {
    const verdicts: Record<string, StaticVerdict> = {
      "/proc/20/exe": { kind: "symbols", functions: ["SSL_write", "SSL_read"] },
      "/proc/21/exe": { kind: "no_symbols", reason: "BoringSSL linked statically without SSL_read/SSL_write symbols (stripped): not traceable" },
    };
    const { src, reg, live } = fixture(8, (p) => verdicts[p] ?? { kind: "none" });
    src.maps.set(20, "00400000-00401000 r-xp 00000000 08:01 500 /usr/bin/node\n");
    src.exes.set(20, { path: "/proc/20/exe", key: "08:01:500", size: 90e6 });
    src.maps.set(21, "00400000-00401000 r-xp 00000000 08:01 501 /usr/local/bin/bun\n");
    src.exes.set(21, { path: "/proc/21/exe", key: "08:01:501", size: 90e6 });
    reg.scan(20);
    reg.scan(21);
    expect(live().map((l) => l.binary)).toEqual(Array(4).fill("/proc/20/exe"));
    expect(reg.view()).toEqual([
      { path: "/usr/bin/node", kind: "static", state: "attached", functions: ["SSL_write", "SSL_read"], processes: 1, pids: [20] },
      { path: "/usr/local/bin/bun", kind: "static", state: "not_traceable", reason: "BoringSSL linked statically without SSL_read/SSL_write symbols (stripped): not traceable", functions: [], processes: 1, pids: [21] },
    ]);
    // Only a process with probes attached has its socket reads followed by the kernel (tls_tgids).
    expect([reg.holdsAttached(20), reg.holdsAttached(21), reg.holdsAttached(22)]).toEqual([true, false, false]);
    reg.forget(21);
    expect(reg.view().map((t) => t.path)).toEqual(["/usr/bin/node"]);
    reg.forget(20);
    expect(reg.holdsAttached(20)).toBe(false);
  });

  test("beyond max targets a library is listed as not attached, with the reason", () => {
    const { src, reg, live } = fixture(1);
    src.maps.set(10, mapsWith(LIBSSL3));
    src.maps.set(11, mapsWith("7f0000003000-7f0000004000 r-xp 00000000 fd:02 99 /opt/app/lib/libssl.so.1.1"));
    reg.scan(10);
    reg.scan(11);
    expect(live()).toHaveLength(8);
    expect(reg.view()[1]).toMatchObject({ path: "/opt/app/lib/libssl.so.1.1", state: "limit", reason: "not attached: 1 TLS libraries are attached already", processes: 1 });
  });

  test("close detaches everything and scans after it attach nothing", () => {
    const { src, reg, live } = fixture();
    src.maps.set(10, mapsWith(LIBSSL3));
    reg.scan(10);
    reg.close();
    reg.close();
    expect(live()).toHaveLength(0);
    reg.scan(10);
    expect(live()).toHaveLength(0);
  });
});
