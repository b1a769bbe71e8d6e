/**
 * Privileged e2e: which programs tie an SSL call to its socket (ffi/bpf/tls-socket.h). With kernel BTF and
 * http_capture socket (the default) the network set's on_send_length / on_recv_length run that part, and the tls set
 * attaches no program of its own on those tracepoints (one program a socket call); with http_capture syscalls (the
 * network set on classic tracepoints) the tls set attaches tls_send_length / tls_recv_length. Either way, curl's
 * HTTPS requests to Python's http.server in ssl become SERVER and CLIENT spans with the connection's addresses, which
 * only the socket part gives. Reloads that turn tls on, off and on again while the network set runs move the part
 * into the network set and out (its programs are rebuilt with it): the spans have their addresses after each.
 */
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { makeSelfSignedCert } from "../../../helpers/self-signed-cert";
import { ATTEMPT_PORTS, firstAttempt, httpsOf, inRange, spans, startPortServer, startTlsAgent, until, type TlsAgent } from "./harness";

setDefaultTimeout(90_000);

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...(Bun.which("curl") ? [] : ["curl"]), ...(Bun.which("openssl") ? [] : ["openssl"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");

let t: TlsAgent | undefined;
const cleanups: Array<() => Promise<void> | void> = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await t?.stop();
  t = undefined;
});

async function attachedPrograms(): Promise<string[]> {
  const body = (await (await fetch(`${t!.agent.url}/status/ebpf`)).json()) as { programs: Array<{ name: string; attached: boolean }> };
  return body.programs.filter((p) => p.attached).map((p) => p.name);
}

/** A Python HTTPS server of the test's own, attached; curl sends GET /one and GET /two on one connection. The SERVER and CLIENT spans must carry the addresses. */
async function requestsCarryAddresses(): Promise<void> {
  const cert = makeSelfSignedCert();
  cleanups.push(() => rmSync(cert.dir, { recursive: true, force: true }));
  const { proc: server, port } = await startPortServer(["/usr/bin/python3", SERVER, cert.certPath, `${cert.dir}/key.pem`]);
  cleanups.push(async () => {
    server.kill();
    await server.exited;
  });
  await until("libssl attached for the server", async () => ((await t!.targets()).some((x) => x.state === "attached" && x.pids.includes(server.pid)) ? true : undefined));
  const base = `https://127.0.0.1:${port}`;
  const attempt = await firstAttempt(t!, async (_i, lo) => {
    const curl = Bun.spawn(["curl", "-sk", "--http1.1", "--local-port", `${lo}-${lo + ATTEMPT_PORTS - 1}`, "-o", "/dev/null", "-o", "/dev/null", `${base}/one`, `${base}/two`], { stdout: "ignore", stderr: "inherit" });
    expect(await curl.exited).toBe(0);
    const serverSide = (all: ReturnType<typeof spans>) => httpsOf(all, server.pid, "SPAN_KIND_SERVER").filter((s) => inRange(s.attributes["client.port"], lo));
    return { value: { lo, curlPid: curl.pid, serverSide }, arrivedWhen: (all) => serverSide(spans(all)).length >= 2 && httpsOf(spans(all), curl.pid, "SPAN_KIND_CLIENT").length >= 2 };
  });
  expect(attempt).toBeDefined();
  const { curlPid, serverSide } = attempt!.value;
  const all = spans(t!.rx.requests());
  const serverSpans = serverSide(all);
  const clientSpans = httpsOf(all, curlPid, "SPAN_KIND_CLIENT");
  expect(serverSpans.map((s) => s.attributes["url.path"])).toEqual(["/one", "/two"]);
  expect(clientSpans.map((s) => s.attributes["url.path"])).toEqual(["/one", "/two"]);
  for (const s of serverSpans) {
    expect(s.attributes["client.address"]).toBe("127.0.0.1");
    expect(s.attributes["server.port"]).toBe(port);
  }
  for (const s of clientSpans) {
    expect(s.attributes["server.address"]).toBe("127.0.0.1");
    expect(s.attributes["server.port"]).toBe(port);
  }
}

describe.skipIf(!isRoot || missing.length > 0)(`TLS socket calls${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  test("http_capture socket: the network set's programs carry them, the tls set has none there; spans have their addresses", async () => {
    t = await startTlsAgent();
    const names = await attachedPrograms();
    expect(names).toEqual(expect.arrayContaining(["on_send_length", "on_recv_length", "tls_sock_close"]));
    expect(names).not.toContain("tls_send_length");
    expect(names).not.toContain("tls_recv_length");
    await requestsCarryAddresses();
  });

  test("http_capture syscalls: the tls set attaches its own socket programs; spans have their addresses", async () => {
    t = await startTlsAgent("      http_capture: syscalls\n");
    const names = await attachedPrograms();
    expect(names).toEqual(expect.arrayContaining(["on_send_length_tp", "tls_send_length", "tls_recv_length"]));
    await requestsCarryAddresses();
  });

  test("tls turned on by a reload while the network set runs, then off and on again: the spans have their addresses", async () => {
    t = await startTlsAgent("", { tls: false });
    const config = await Bun.file(t.agent.configPath).text();
    expect(config).toContain("      tls: false\n");
    const reload = async (text: string) => {
      writeFileSync(t!.agent.configPath, text);
      const r = await fetch(`${t!.agent.url}/admin/reload`, { method: "POST" });
      expect(r.status).toBe(200);
    };
    const tlsAttached = async (on: boolean) => (await attachedPrograms()).includes("tls_sock_close") === on;
    await until("the network set attached", async () => ((await attachedPrograms()).includes("on_send_length") ? true : undefined));
    expect(await tlsAttached(false)).toBe(true);
    const on = config.replace("      tls: false\n", "      tls: true\n");
    await reload(on);
    await until("the tls set attached", async () => ((await tlsAttached(true)) ? true : undefined));
    await requestsCarryAddresses();
    await reload(config);
    await until("the tls set detached", async () => ((await tlsAttached(false)) ? true : undefined));
    expect(await attachedPrograms()).toContain("on_send_length");
    await reload(on);
    await until("the tls set attached again", async () => ((await tlsAttached(true)) ? true : undefined));
    await requestsCarryAddresses();
  });
});
