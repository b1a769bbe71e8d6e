/**
 * What detaching a TLS library's uprobes costs the event loop: attaches the `tls` set's return program at the entry
 * and return of SSL_read, SSL_write, SSL_read_ex and SSL_write_ex of the system libssl (8 links, as a libssl target
 * has), then closes them, and reports the time close() took on the calling thread, the largest gap between the
 * ticks of a 1 ms timer meanwhile, and when the kernel's teardown ended (the links' close promises): that last time
 * is what the event loop waited while links were closed on it. A tool (in bench/lib, not run by bench/run.ts).
 *
 * Usage (root, after `bun run build`): bun bench/lib/uprobe-detach.ts [--rounds R]
 */
import { resolve } from "node:path";
import { memlockLimit, mountFs, openBpfRuntime, raiseMemlock } from "../../ffi";
import { tlsSetSpec } from "../../src/collectors/tls/spec";
import { checkEnvironment, systemProbe } from "../../src/ebpf/environment";
import { argNumber } from "./args";
import { loadSetFromFile } from "./bpf";

const ROUNDS = argNumber("rounds", 3);
const LIBSSL = "/usr/lib/x86_64-linux-gnu/libssl.so.3";
const FUNCTIONS = ["SSL_read", "SSL_write", "SSL_read_ex", "SSL_write_ex"];

const env = checkEnvironment(systemProbe({ mountFs, memlockLimit, raiseMemlock }));
if (env.blocked) throw new Error(`eBPF unavailable: ${env.blocked}`);
const runtime = await openBpfRuntime(process.env);
const spec = tlsSetSpec({ selfPid: process.pid, exchangesPerSecond: 250, h2RecordsPerSecond: 1000, redCounted: false });
const set = await loadSetFromFile(runtime, spec, resolve(import.meta.dir, "../../build/tls.bpf.o"), 1 << 20);
try {
  const prog = set.object.program("ssl_leave");
  if (!prog) throw new Error("no program ssl_leave in build/tls.bpf.o");
  for (let round = 1; round <= ROUNDS; round++) {
    const links = FUNCTIONS.flatMap((func) => (["uprobe", "uretprobe"] as const).map((kind) => prog.attach({ kind, binary: LIBSSL, func })));
    let largestGap = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      largestGap = Math.max(largestGap, now - last);
      last = now;
    }, 1);
    await Bun.sleep(50);
    const t0 = performance.now();
    const ends = links.map((l) => l.close());
    const onThread = performance.now() - t0;
    await Promise.all(ends);
    const teardown = performance.now() - t0;
    await Bun.sleep(20);
    clearInterval(timer);
    console.log(`round ${round}: close() of ${links.length} uprobe links ${onThread.toFixed(1)} ms on the calling thread; teardown ended after ${teardown.toFixed(0)} ms; largest 1 ms timer gap ${largestGap.toFixed(1)} ms`);
  }
} finally {
  set.close();
}
