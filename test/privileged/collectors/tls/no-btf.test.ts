/**
 * Privileged: the `tls` set as it loads on a kernel without BTF (tlsSetSpec with kernelBtf false). The task storage
 * map is left out and its code pruned by the verifier; a thread's SSL call lives in the `active_by_tid` hash; the
 * socket programs (tp_btf) are not loaded. Loaded on this kernel and attached to the system's libssl.so.3, the
 * plaintext of a curl request and of Python's answer arrive as tls_events, as they do with task storage.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { embeddedObject, openBpfRuntime } from "../../../../ffi";
import type { BpfLinkApi } from "../../../../ffi/types";
import { FeatureProbes } from "../../../../src/ebpf/features";
import { loadProgramSet } from "../../../../src/ebpf/loader";
import { TLS_ENTRY_PROGRAMS, TLS_RETURN_PROGRAM, tlsSetSpec } from "../../../../src/collectors/tls/spec";
import type { TlsEvent } from "../../../../src/collectors/tls/decoder";
import { makeSelfSignedCert } from "../../../helpers/self-signed-cert";
import { expectReleased, until } from "../../ebpf/helpers";
import { startPortServer } from "./harness";

setDefaultTimeout(60_000);

const LIBSSL = "/usr/lib/x86_64-linux-gnu/libssl.so.3";
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
const isRoot = process.getuid?.() === 0;
const missing = [...(existsSync(LIBSSL) ? [] : [LIBSSL]), ...(Bun.which("curl") ? [] : ["curl"])];
const cert = isRoot && missing.length === 0 ? makeSelfSignedCert() : undefined;
afterAll(() => cert && rmSync(cert.dir, { recursive: true, force: true }));

describe.skipIf(!isRoot || missing.length > 0)("tls set without kernel BTF", () => {
  test("program choice: no socket programs, the task storage map left out, the calls' hash sized", () => {
    const spec = tlsSetSpec({ selfPid: 1, exchangesPerSecond: 10, h2RecordsPerSecond: 50_000, kernelBtf: false });
    expect(spec.programs.some((p) => p.attach.kind === "tp_btf")).toBe(false);
    expect(spec.mapsLeftOut).toEqual(["active"]);
    expect(spec.constants?.task_storage).toBe(0);
    const withBtf = tlsSetSpec({ selfPid: 1, exchangesPerSecond: 10, h2RecordsPerSecond: 50_000, kernelBtf: true });
    expect(withBtf.programs.filter((p) => p.attach.kind === "tp_btf").map((p) => p.name)).toEqual(["tls_send_length", "tls_recv_length", "tls_sock_close"]);
    expect(withBtf.mapSizes).toEqual({ active_by_tid: 1 });
    expect(withBtf.constants?.task_storage).toBe(1);
  });

  test("loads, and curl's request and Python's answer arrive as plaintext tls_events", async () => {
    const runtime = await openBpfRuntime(process.env);
    const spec = tlsSetSpec({ selfPid: 1, exchangesPerSecond: 1_000_000_000, h2RecordsPerSecond: 50_000, kernelBtf: false });
    const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
    if (!out.ok) throw out.error;
    const links: BpfLinkApi[] = [];
    const { proc: server, port } = await startPortServer(["/usr/bin/python3", SERVER, cert!.certPath, `${cert!.dir}/key.pem`]);
    try {
      for (const [func, name] of Object.entries(TLS_ENTRY_PROGRAMS)) {
        links.push(out.set.object.program(name)!.attach({ kind: "uprobe", binary: LIBSSL, func }));
        links.push(out.set.object.program(TLS_RETURN_PROGRAM)!.attach({ kind: "uretprobe", binary: LIBSSL, func }));
      }
      const curl = Bun.spawn(["curl", "-sk", "--http1.1", `https://127.0.0.1:${port}/no-btf`], { stdout: "pipe" });
      expect(await new Response(curl.stdout).text()).toBe("hello /no-btf\n");
      const events: TlsEvent[] = [];
      const drain = () => {
        for (const r of out.set.readers) r.reader.consume((v, o, len) => events.push(r.decode(v, o, len) as TlsEvent));
      };
      const text = (e: TlsEvent) => new TextDecoder().decode(e.data);
      await until(() => (drain(), events.some((e) => e.pid === server.pid && e.io === 1 && text(e).startsWith("HTTP/1.1 200"))), "Python's answer as a tls_event", 10_000);
      expect(events.some((e) => e.pid === curl.pid && e.io === 1 && text(e).startsWith("GET /no-btf HTTP/1.1"))).toBe(true);
      expect(events.some((e) => e.pid === server.pid && e.io === 0 && text(e).startsWith("GET /no-btf HTTP/1.1"))).toBe(true);
      // No socket programs: the calls carry no socket.
      expect(events.every((e) => !e.socketKnown)).toBe(true);
    } finally {
      server.kill();
      await server.exited;
      for (const l of links) l.close();
      const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
      out.set.close();
      await expectReleased(ids);
    }
  });
});
