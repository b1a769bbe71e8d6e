/**
 * Privileged: the `network` set with the socket length programs as classic tracepoints (what kernels without
 * BTF get; this machine has BTF, so the default is tp_btf) still counts bytes and captures HTTP: a request and
 * its response on loopback arrive as http_events with their first bytes, and the connection's CLOSED record
 * carries the bytes moved.
 */
import { describe, expect, test } from "bun:test";
import { embeddedObject, openBpfRuntime } from "../../../../ffi";
import { loadProgramSet } from "../../../../src/ebpf/loader";
import { FeatureProbes } from "../../../../src/ebpf/features";
import { ConnKind, type HttpEvent, type NetworkEvent } from "../../../../src/collectors/network/decoders";
import { lifecyclePrograms, networkSetSpec } from "../../../../src/collectors/network/spec";
import { expectReleased, until } from "../../ebpf/helpers";

const BODY = "classic tracepoints";

describe("network set on classic tracepoints", () => {
  test("program choice: tp_btf with kernel BTF, classic tracepoints without", () => {
    expect(lifecyclePrograms(true).filter((p) => p.name.includes("length")).map((p) => [p.name, p.attach.kind])).toEqual([["on_send_length", "tp_btf"], ["on_recv_length", "tp_btf"]]);
    expect(lifecyclePrograms(false).filter((p) => p.name.includes("length")).map((p) => [p.name, p.attach.kind])).toEqual([["on_send_length_tp", "tracepoint"], ["on_recv_length_tp", "tracepoint"]]);
  });

  test("bytes and HTTP bytes of a loopback exchange (the test process is the server; the agent's pid is 1 here)", async () => {
    const runtime = await openBpfRuntime(process.env);
    const spec = networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: 1000, maxConnections: 4096, kernelBtf: false });
    const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
    if (!out.ok) throw out.error;
    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(BODY) });
    try {
      expect(out.set.programs.filter((p) => p.name.includes("length")).map((p) => [p.name, p.type, p.attached])).toEqual([["on_send_length_tp", "tracepoint", true], ["on_recv_length_tp", "tracepoint", true]]);
      const curl = Bun.spawn(["curl", "-s", "--http1.1", `http://127.0.0.1:${server.port}/classic?x=1`], { stdout: "pipe" });
      expect(await new Response(curl.stdout).text()).toBe(BODY);
      const events: NetworkEvent[] = [];
      const drain = () => {
        for (const r of out.set.readers) r.reader.consume((v, o, len) => events.push(r.decode(v, o, len) as NetworkEvent));
      };
      const http = () => events.filter((e): e is HttpEvent => e.type === "http" && e.pid === process.pid);
      const text = (e: NetworkEvent) => (e.type === "http" ? new TextDecoder().decode(e.data) : "");
      await until(() => (drain(), http().some((e) => text(e).startsWith("HTTP/1.1 200"))), "the server's request and response as http_events");
      expect(http().some((e) => e.io === 0 && text(e).startsWith("GET /classic?x=1 HTTP/1.1"))).toBe(true);
      await until(() => (drain(), events.some((e) => e.type === "conn" && e.kind === ConnKind.CLOSED && e.pid === process.pid && e.bytesSent > 0 && e.bytesRecv > 0)), "the CLOSED record with bytes", 10_000);
    } finally {
      await server.stop(true);
      const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
      out.set.close();
      await expectReleased(ids);
    }
  });
});
