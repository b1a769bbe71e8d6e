/**
 * Which set runs the tls set's socket call part (ffi/bpf/tls-socket.h): the network set's socket storage programs
 * (kernel BTF, http_capture socket, tls on), or the tls set's own tls_send_length / tls_recv_length. Exactly one of
 * the two does for every configuration, and where the network set does, both share that part's maps.
 */
import { describe, expect, test } from "bun:test";
import { networkSetSpec, tlsSocketCallsInNetworkSet } from "../../../../src/collectors/network/spec";
import { tlsSetSpec } from "../../../../src/collectors/tls/spec";
import { TLS_SOCKET_SHARED_MAPS } from "../../../../src/ebpf/spec";

const network = (o: { httpCapture: "socket" | "syscalls"; tls: boolean; kernelBtf: boolean }) =>
  networkSetSpec({ selfPid: 1, http: true, httpCapture: o.httpCapture, httpExchangesPerSecond: 250, maxConnections: 1024, tls: o.tls, kernelBtf: o.kernelBtf });
const tls = (socketCallsInNetworkSet: boolean, kernelBtf: boolean) => tlsSetSpec({ selfPid: 1, exchangesPerSecond: 250, h2RecordsPerSecond: 50_000, kernelBtf, socketCallsInNetworkSet });
const socketPrograms = (names: string[]) => names.filter((n) => n === "tls_send_length" || n === "tls_recv_length");

describe("the tls set's socket call part", () => {
  test("kernel BTF, http_capture socket, tls on: in the network set, which shares the part's maps; the tls set leaves its programs out and empties what it fills", () => {
    const n = network({ httpCapture: "socket", tls: true, kernelBtf: true });
    expect(n.constants?.tls_follow).toBe(1);
    expect(n.sharedMaps).toEqual(expect.arrayContaining(TLS_SOCKET_SHARED_MAPS));
    expect(n.mapsLeftOut ?? []).not.toContain("active");
    const t = tls(true, true);
    expect(socketPrograms(t.programs.map((p) => p.name))).toEqual([]);
    expect(t.programs.map((p) => p.name)).toContain("tls_sock_close");
    expect(t.sharedMaps).toEqual(expect.arrayContaining(TLS_SOCKET_SHARED_MAPS));
    expect(t.emptiedMaps).toEqual(["tls_conns", "tls_socks", "tls_tgids"]);
  });

  test("elsewhere the network set leaves the part's maps out and the tls set keeps its own programs and maps", () => {
    for (const o of [
      { httpCapture: "syscalls", tls: true, kernelBtf: true },
      { httpCapture: "socket", tls: false, kernelBtf: true },
      { httpCapture: "socket", tls: true, kernelBtf: false },
    ] as const) {
      const n = network(o);
      expect(n.constants?.tls_follow).toBe(0);
      expect(n.mapsLeftOut).toEqual(expect.arrayContaining(TLS_SOCKET_SHARED_MAPS));
      expect(n.sharedMaps).not.toContain("active");
    }
    const t = tls(false, true);
    expect(socketPrograms(t.programs.map((p) => p.name))).toEqual(["tls_send_length", "tls_recv_length"]);
    expect(t.sharedMaps).not.toContain("active");
    expect(t.emptiedMaps).toBeUndefined();
    // Without kernel BTF neither has socket programs for it (tp_btf), whatever the network set says.
    expect(tls(true, false).sharedMaps).not.toContain("active");
  });

  test("the two sets agree: exactly one runs the part wherever the kernel has BTF and tls is on", () => {
    for (const httpCapture of ["socket", "syscalls"] as const) {
      const inNetwork = tlsSocketCallsInNetworkSet({ http: true, httpCapture, tls: true, kernelBtf: true });
      const n = network({ httpCapture, tls: true, kernelBtf: true });
      const t = tls(inNetwork, true);
      const networkRuns = n.constants?.tls_follow === 1;
      const tlsRuns = socketPrograms(t.programs.map((p) => p.name)).length === 2;
      expect([httpCapture, networkRuns !== tlsRuns]).toEqual([httpCapture, true]);
    }
  });
});
