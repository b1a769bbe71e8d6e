/**
 * Privileged: both program families of the `network` set (tp_btf on per-socket storage, the default with
 * kernel BTF; classic tracepoints on the `conns` hash, what kernels without BTF and syscall capture get), over
 * IPv4 and IPv6 loopback: a request and its response arrive as http_events with their first bytes, both sides
 * of the connection are opened and closed with their addresses, ports, owner and bytes; retransmits are
 * counted as total_retrans counts them (segments dropped in a network namespace; attempts given up on for want of a
 * route left out); the per-socket storage honours max_connections; the
 * per-second exchange budget captures whole exchanges and counts the others.
 */
import { describe, expect, test } from "bun:test";
import { embeddedObject, openBpfRuntime } from "../../../../ffi";
import { loadProgramSet } from "../../../../src/ebpf/loader";
import { FeatureProbes } from "../../../../src/ebpf/features";
import { AF_INET, AF_INET6, ConnKind, decodeHttpEvent, Direction, type ConnEvent, type HttpEvent, type NetworkEvent } from "../../../../src/collectors/network/decoders";
import type { RecordDecoderFn } from "../../../../ffi/types";

/** The set's decoder of a ring, or for http_events the copying one: the set's refills one record per call (decodeHttpEventReused), these records are kept. */
const keeping = (r: { map: string; decode: RecordDecoderFn<unknown> }): RecordDecoderFn<unknown> => (r.map === "http_events" ? decodeHttpEvent : r.decode);
import { lifecyclePrograms, NetworkStat, networkSetSpec } from "../../../../src/collectors/network/spec";
import { expectReleased, until } from "../../ebpf/helpers";

const BODY = "classic tracepoints";
/** The exchange budget is machine-wide (every process is traced): high enough that other load never spends it. */
const UNLIMITED_EXCHANGES = 1_000_000_000;

describe("network set, both connection storages", () => {
  test("program choice: tp_btf on per-socket storage with kernel BTF, classic tracepoints without or with syscall capture", () => {
    const kinds = (ps: ReturnType<typeof lifecyclePrograms>) => ps.filter((p) => p.attach.kind !== "kprobe").map((p) => [p.name, p.attach.kind]);
    expect(kinds(lifecyclePrograms(true))).toEqual([["on_set_state", "tp_btf"], ["on_send_length", "tp_btf"], ["on_recv_length", "tp_btf"], ["on_retransmit", "tp_btf"]]);
    // Kernels with BTF but without the bpf_rdonly_cast kfunc (before 6.2): the socket length programs' helper-only twins.
    expect(kinds(lifecyclePrograms(true, false))).toEqual([["on_set_state", "tp_btf"], ["on_send_length_compat", "tp_btf"], ["on_recv_length_compat", "tp_btf"], ["on_retransmit", "tp_btf"]]);
    expect(kinds(lifecyclePrograms(false))).toEqual([["on_set_state_tp", "tracepoint"], ["on_send_length_tp", "tracepoint"], ["on_recv_length_tp", "tracepoint"], ["on_retransmit_tp", "tracepoint"]]);
    const names = (o: Partial<Parameters<typeof networkSetSpec>[0]>) => networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: 10, maxConnections: 4096, kernelBtf: true, ...o }).programs.map((p) => p.name);
    expect(names({})).toContain("on_set_state");
    expect(names({ httpCapture: "syscalls" })).toContain("on_set_state_tp");
    expect(names({ kernelBtf: false })).toContain("on_set_state_tp");
    expect(names({ kfuncCast: true })).toEqual(expect.arrayContaining(["on_send_length", "on_recv_length"]));
    expect(names({ kfuncCast: false })).toEqual(expect.arrayContaining(["on_send_length_compat", "on_recv_length_compat"]));
    expect(names({ kfuncCast: false })).not.toContain("on_send_length");
    expect(networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: 10, maxConnections: 4096, kernelBtf: true }).mapSizes).toEqual({ conns: 1, red_body_a: 1, red_body_b: 1 });
    // With body sizes counted, their maps keep their full size.
    expect(networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: 10, maxConnections: 4096, kernelBtf: true, redMetrics: true, redBodySizes: true }).mapSizes).toEqual({ conns: 1 });
  });

  const cases = [
    { storage: "classic tracepoints, conns hash", kernelBtf: false, host: "127.0.0.1", family: AF_INET },
    { storage: "tp_btf, per-socket storage", kernelBtf: true, host: "127.0.0.1", family: AF_INET },
    { storage: "tp_btf, per-socket storage", kernelBtf: true, host: "::1", family: AF_INET6 },
    { storage: "tp_btf, per-socket storage, helpers only (the _compat programs of kernels before 6.2), RED on", kernelBtf: true, kfuncCast: false, redMetrics: true, host: "127.0.0.1", family: AF_INET },
    { storage: "classic tracepoints, conns hash", kernelBtf: false, host: "::1", family: AF_INET6 },
  ];
  for (const c of cases) {
    test(`${c.storage}, ${c.host}: lifecycle, addresses, bytes and HTTP bytes of a loopback exchange (the test process is the server; the agent's pid is 1 here)`, async () => {
      const runtime = await openBpfRuntime(process.env);
      const spec = networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: UNLIMITED_EXCHANGES, maxConnections: 4096, kernelBtf: c.kernelBtf, kfuncCast: c.kfuncCast, redMetrics: c.redMetrics });
      const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
      if (!out.ok) throw out.error;
      const server = Bun.serve({ hostname: c.host, port: 0, fetch: () => new Response(BODY) });
      try {
        const suffix = c.kernelBtf ? "" : "_tp";
        const kind = c.kernelBtf ? "tp_btf" : "tracepoint";
        const lengths = c.kfuncCast === false ? "_compat" : "";
        expect(out.set.programs.filter((p) => p.type !== "kprobe").map((p) => [p.name, p.type, p.attached])).toEqual(
          ["on_set_state", `on_send_length${lengths}`, `on_recv_length${lengths}`, "on_retransmit"].map((n) => [n + suffix, kind, true]),
        );
        const url = c.family === AF_INET6 ? `http://[::1]:${server.port}/classic?x=1` : `http://127.0.0.1:${server.port}/classic?x=1`;
        const curl = Bun.spawn(["curl", "-s", "-g", "--http1.1", url], { stdout: "pipe" });
        expect(await new Response(curl.stdout).text()).toBe(BODY);
        const events: NetworkEvent[] = [];
        const drain = () => {
          for (const r of out.set.readers) r.reader.consume((v, o, len) => events.push(keeping(r)(v, o, len) as NetworkEvent));
        };
        const http = () => events.filter((e): e is HttpEvent => e.type === "http" && e.pid === process.pid);
        const text = (e: NetworkEvent) => (e.type === "http" ? new TextDecoder().decode(e.data) : "");
        await until(() => (drain(), http().some((e) => text(e).startsWith("HTTP/1.1 200"))), "the server's request and response as http_events");
        expect(http().some((e) => e.io === 0 && text(e).startsWith("GET /classic?x=1 HTTP/1.1"))).toBe(true);
        const conns = () => events.filter((e): e is ConnEvent => e.type === "conn" && e.family === c.family && (e.localPort === server.port || e.remotePort === server.port));
        await until(() => (drain(), conns().filter((e) => e.kind === ConnKind.CLOSED && e.bytesSent > 0 && e.bytesRecv > 0).length >= 2), "CLOSED records with bytes on both sides", 10_000);
        // The server side (this process), opened through inet_sock_set_state and owned at its first read.
        const inbound = conns().find((e) => e.kind === ConnKind.CLOSED && e.pid === process.pid)!;
        expect(inbound).toMatchObject({ direction: Direction.INBOUND, localAddress: c.host, localPort: server.port, remoteAddress: c.host });
        expect(inbound.establishedNs).toBeGreaterThan(0n);
        expect(conns().some((e) => e.kind === ConnKind.OPEN && e.pid === process.pid)).toBe(true);
        // curl's side: an outbound connect, its owner known from SYN_SENT, established and closed.
        const outbound = conns().find((e) => e.kind === ConnKind.CLOSED && e.pid === curl.pid)!;
        expect(outbound).toMatchObject({ direction: Direction.OUTBOUND, remoteAddress: c.host, remotePort: server.port, localAddress: c.host, comm: "curl" });
        expect(outbound.establishedNs).toBeGreaterThanOrEqual(outbound.startNs);
        expect(outbound.bytesRecv).toBe(inbound.bytesSent);
        expect(outbound.bytesSent).toBe(inbound.bytesRecv);
      } finally {
        await server.stop(true);
        const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
        out.set.close();
        await expectReleased(ids);
      }
    });
  }

  // Every TCP socket of the machine is traced, so other processes' connections share the bound and the count:
  // the checks leave room for them.
  const storageSet = async (maxConnections: number) => {
    const runtime = await openBpfRuntime(process.env);
    const spec = networkSetSpec({ selfPid: 1, http: false, httpCapture: "socket", httpExchangesPerSecond: 10, maxConnections, kernelBtf: true });
    const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
    if (!out.ok) throw out.error;
    const accepted: Array<{ end(): void }> = [];
    const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: (sk) => void accepted.push(sk), data() {} } });
    return {
      live: () => new DataView(out.set.object.map("live_conns")!.lookup!(new Uint8Array(4))!.buffer).getBigInt64(0, true),
      full: () => out.set.object.map("stats")!.sumPerCpuU64(NetworkStat.CONNS_FULL),
      open: async (n: number) => {
        const clients = await Promise.all(Array.from({ length: n }, () => Bun.connect({ hostname: "127.0.0.1", port: server.port, socket: { data() {} } })));
        for (const c of clients) c.write("x");
        return () => {
          for (const c of clients) c.end();
          for (const sk of accepted) sk.end();
        };
      },
      close: async () => {
        server.stop(true);
        const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
        out.set.close();
        await expectReleased(ids);
      },
    };
  };

  test("per-socket storage is bounded by max_connections: connections over it are counted, not tracked", async () => {
    const t = await storageSet(1);
    try {
      const end = await t.open(20);
      // 40 sockets (both ends) moved data; at most one is tracked, each of the others counted at least once.
      await until(() => t.full() >= 39n, "the connections over the bound counted");
      expect(t.live()).toBeLessThanOrEqual(1n);
      end();
    } finally {
      await t.close();
    }
  });

  test("per-socket storage entries are counted while connections live and released when they close", async () => {
    const t = await storageSet(65_536);
    const N = 200;
    const SLACK = 60n;
    try {
      const before = t.live();
      const end = await t.open(N);
      await until(() => t.live() >= before + BigInt(2 * N) - SLACK, `${2 * N} more entries (both ends)`, 10_000);
      end();
      await until(() => t.live() <= before + SLACK, "the entries released on close", 10_000);
    } finally {
      await t.close();
    }
  });

  // Both scripts run in a network namespace of their own and print, once every byte is acknowledged (tcpi_unacked
  // 0): the client's and server's ports, the retransmitted segments tcpi_total_retrans counted, the namespace's
  // RetransSegs from /proc/net/snmp, and the timeouts whose attempt the kernel gave up on before counting (0 for the
  // first).
  const TCP_INFO_PY = `
import socket, struct, subprocess, time
sh = lambda *a: subprocess.run(list(a), check=True)
info = lambda s: s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
total_retrans = lambda s: struct.unpack_from("I", info(s), 100)[0]
def drop_to(port):
    sh("nft", "add table ip svc_retrans")
    sh("nft", "add chain ip svc_retrans in { type filter hook input priority 0 ; }")
    sh("nft", f"add rule ip svc_retrans in tcp dport {port} drop")
def report(c, s, port, size, gave_up):
    got = 0
    while got < size: got += len(s.recv(65536))
    deadline = time.monotonic() + 15
    while struct.unpack_from("I", info(c), 24)[0] != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    snmp = [l.split() for l in open("/proc/net/snmp") if l.startswith("Tcp:")]
    print(c.getsockname()[1], port, total_retrans(c), int(snmp[1][snmp[0].index("RetransSegs")]), gave_up, flush=True)
`;
  // Loopback MTU 1500, so that one skb carries many segments: 256 KiB whose segments to the server are dropped (nft,
  // input hook) until the kernel retransmitted three times, then delivered.
  const RETRANSMITS_PY = `${TCP_INFO_PY}
sh("ip", "link", "set", "lo", "mtu", "1500", "up")
SIZE = 256 * 1024
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(); port = srv.getsockname()[1]
c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * SIZE)
c.connect(("127.0.0.1", port)); s, _ = srv.accept()
c.send(b"a"); s.recv(1)
drop_to(port)
c.sendall(b"x" * SIZE)
deadline = time.monotonic() + 15
while total_retrans(c) < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
sh("nft", "delete table ip svc_retrans")
report(c, s, port, SIZE, 0)
`;
  // 1,000 bytes dropped (nft), then the server's address removed: each retransmission timeout's attempt finds no
  // route and is given up before the kernel counts it (tcpi_retransmits counts the timeouts, total_retrans stays
  // where it was; kernels whose tracepoint carries `err` still fire it); three of them, then the address back and
  // the drop gone.
  const UNROUTED_PY = `${TCP_INFO_PY}
sh("ip", "link", "set", "lo", "up")
sh("ip", "addr", "add", "10.9.0.1/32", "dev", "lo")
srv = socket.socket(); srv.bind(("10.9.0.1", 0)); srv.listen(); port = srv.getsockname()[1]
c = socket.socket(); c.connect(("10.9.0.1", port)); s, _ = srv.accept()
c.send(b"a"); s.recv(1)
drop_to(port)
c.send(b"x" * 1000)
sh("ip", "addr", "del", "10.9.0.1/32", "dev", "lo")
timeouts, counted = info(c)[2], total_retrans(c)
deadline = time.monotonic() + 15
while info(c)[2] < timeouts + 3 and time.monotonic() < deadline:
    time.sleep(0.05)
gave_up = info(c)[2] - timeouts if total_retrans(c) == counted else 0
sh("ip", "addr", "add", "10.9.0.1/32", "dev", "lo")
sh("nft", "delete table ip svc_retrans")
report(c, s, port, 1000, gave_up)
`;
  const retransmitCases = [
    { name: (family: string) => `retransmitted segments (${family}) are counted on the connection as the kernel's total_retrans counts them`, script: RETRANSMITS_PY, gaveUp: 0 },
    {
      name: (family: string) => `retransmission attempts the kernel gave up on before counting them (no route; ${family}) are not counted, as in total_retrans`,
      script: UNROUTED_PY,
      gaveUp: 3,
    },
  ];
  for (const { name, script, gaveUp } of retransmitCases)
    for (const kernelBtf of [true, false]) {
      test(name(kernelBtf ? "tp_btf on per-socket storage" : "classic tracepoint on the conns hash"), async () => {
        const runtime = await openBpfRuntime(process.env);
        const spec = networkSetSpec({ selfPid: 1, http: false, httpCapture: "socket", httpExchangesPerSecond: 10, maxConnections: 4096, kernelBtf });
        const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
        if (!out.ok) throw out.error;
        try {
          expect(out.set.programs.find((p) => p.name === (kernelBtf ? "on_retransmit" : "on_retransmit_tp"))?.attached).toBe(true);
          const py = Bun.spawn(["unshare", "-n", "python3", "-c", script], { stdout: "pipe", stderr: "inherit" });
          const printed = (await new Response(py.stdout).text()).trim();
          expect(await py.exited).toBe(0);
          const [clientPort, serverPort, total, retransSegs, gaveUpSeen] = printed.split(" ").map(Number);
          expect(total).toBeGreaterThanOrEqual(gaveUp === 0 ? 3 : 1);
          // The attempts given up on: as many timeouts as waited for, while total_retrans stayed 0.
          expect(gaveUpSeen).toBeGreaterThanOrEqual(gaveUp);
          // The namespace's own counter: the client's segments, and whatever else retransmitted there (nothing, mostly).
          expect(retransSegs).toBeGreaterThanOrEqual(total!);
          const events: NetworkEvent[] = [];
          const closed = () => {
            for (const r of out.set.readers) r.reader.consume((v, o, len) => events.push(keeping(r)(v, o, len) as NetworkEvent));
            return events.find((e): e is ConnEvent => e.type === "conn" && e.kind === ConnKind.CLOSED && e.pid === py.pid && e.localPort === clientPort && e.remotePort === serverPort);
          };
          await until(() => closed() !== undefined, "the client's CLOSED record", 10_000);
          expect({ retransmits: closed()!.retransmits, printed }).toEqual({ retransmits: total!, printed });
        } finally {
          const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
          out.set.close();
          await expectReleased(ids);
        }
      });
    }

  test("the exchange budget: requests over it on a keep-alive connection are counted, not captured; captured ones keep their responses", async () => {
    const runtime = await openBpfRuntime(process.env);
    const BUDGET = 3;
    const REQUESTS = 20;
    const spec = networkSetSpec({ selfPid: 1, http: true, httpCapture: "socket", httpExchangesPerSecond: BUDGET, maxConnections: 4096, kernelBtf: true });
    const out = await loadProgramSet(spec, { runtime, probes: new FeatureProbes(runtime), objectBytes: embeddedObject, ringbufSizeBytes: 1 << 20, useRingbuf: true });
    if (!out.ok) throw out.error;
    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(BODY) });
    try {
      const refused = () => out.set.object.map("stats")!.sumPerCpuU64(NetworkStat.HTTP_SAMPLED_OUT);
      const refusedBefore = refused();
      const started = performance.now();
      const urls = Array.from({ length: REQUESTS }, (_, i) => `http://127.0.0.1:${server.port}/budget/${i}`);
      const curl = Bun.spawn(["curl", "-s", "--http1.1", ...urls], { stdout: "pipe" });
      expect(await new Response(curl.stdout).text()).toBe(BODY.repeat(REQUESTS));
      const elapsedS = (performance.now() - started) / 1000;
      const events: NetworkEvent[] = [];
      for (const r of out.set.readers) r.reader.consume((v, o, len) => events.push(keeping(r)(v, o, len) as NetworkEvent));
      const text = (e: HttpEvent) => new TextDecoder().decode(e.data);
      const ours = events.filter((e): e is HttpEvent => e.type === "http" && e.pid === process.pid && e.localPort === server.port);
      const requests = ours.filter((e) => e.io === 0 && text(e).startsWith("GET /budget/"));
      const responses = ours.filter((e) => e.io === 1 && text(e).startsWith("HTTP/1.1 200"));
      // Other processes' HTTP shares the budget: at most BUDGET per window spanned, possibly fewer.
      expect(requests.length).toBeLessThanOrEqual(BUDGET * (Math.ceil(elapsedS) + 1));
      expect(requests.length).toBeLessThan(REQUESTS);
      expect(responses.length).toBe(requests.length);
      // Every request of this server not captured was counted (curl's side and other processes' add to it).
      expect(refused() - refusedBefore).toBeGreaterThanOrEqual(BigInt(REQUESTS - requests.length));
    } finally {
      await server.stop(true);
      const ids = out.set.programs.map((p) => p.id).filter((id) => id > 0);
      out.set.close();
      await expectReleased(ids);
    }
  });
});
