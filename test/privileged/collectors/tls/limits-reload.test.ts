/**
 * Privileged e2e: a reload that changes only the kernel's limits (max_spans_per_second, http2_records_per_second)
 * while HTTPS requests run. The tls set keeps running (the same kernel programs, by their ids in /status/ebpf, and
 * the same probe links on libssl) with the limits set in place, and every request h2load (HTTP/1.1 over TLS, on the
 * system libssl) sent against Python's http.server in ssl is counted once on each side, with url.scheme https, in
 * what the official receiver decoded. A new set would have missed what ran while it loaded and attached.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { flushUntil, histogram, probeLinks, startPortServer, startTlsAgent, until, type TlsAgent } from "./harness";

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...(Bun.which("h2load") ? [] : ["h2load"])];
const SERVER = resolve(import.meta.dir, "../../../fixtures/https-server.py");
const REQUESTS = 12_000;

async function tlsProgramIds(t: TlsAgent): Promise<number[]> {
  const view = (await (await fetch(`${t.agent.url}/status/ebpf`)).json()) as { programs: Array<{ name: string; id: number }> };
  return view.programs.filter((p) => p.name.startsWith("ssl_") && p.id > 0).map((p) => p.id).sort((a, b) => a - b);
}

describe.skipIf(!isRoot || missing.length > 0)(`TLS limits changed by a reload under load (${missing.join(", ") || "tools present"})`, () => {
  let t: TlsAgent | undefined;
  let cert: SelfSignedCert | undefined;
  beforeAll(async () => {
    cert = makeSelfSignedCert();
    t = await startTlsAgent("      metrics_interval: 1h\n      http2_records_per_second: 1000\n");
  }, 60_000);
  afterAll(async () => {
    await t?.stop();
    if (cert) rmSync(cert.dir, { recursive: true, force: true });
  });

  test("the tls set keeps running: every HTTPS request counted once on each side", async () => {
    const { proc: server, port } = await startPortServer(["/usr/bin/python3", SERVER, cert!.certPath, `${cert!.dir}/key.pem`]);
    try {
      await until("libssl attached for the server", async () => ((await t!.targets()).some((x) => x.state === "attached" && x.pids.includes(server.pid)) ? true : undefined));
      const ids = await tlsProgramIds(t!);
      expect(ids.length).toBeGreaterThan(0);
      const links = await probeLinks(t!);
      const load = Bun.spawn(["h2load", "--h1", "-m", "1", "-c", "4", "-n", String(REQUESTS), `https://127.0.0.1:${port}/hello`], { stdout: "pipe", stderr: "pipe" });
      await Bun.sleep(300);
      writeFileSync(t!.agent.configPath, readFileSync(t!.agent.configPath, "utf8").replace("max_spans_per_second: 2000", "max_spans_per_second: 50").replace("http2_records_per_second: 1000", "http2_records_per_second: 5000"));
      const reload = await fetch(`${t!.agent.url}/admin/reload`, { method: "POST" });
      expect(reload.status).toBe(200);
      // The reload came while h2load ran: otherwise this test proves nothing.
      expect(load.exitCode).toBeNull();
      const out = await new Response(load.stdout).text();
      expect(await load.exited).toBe(0);
      expect(Number(/requests: \d+ total, \d+ started, (\d+) done/.exec(out)?.[1])).toBe(REQUESTS);
      expect(Number(/status codes: (\d+) 2xx/.exec(out)?.[1])).toBe(REQUESTS);
      expect(await tlsProgramIds(t!)).toEqual(ids);
      expect(await probeLinks(t!)).toEqual(links);

      const count = (metric: string) => histogram(t!.rx.requests(), metric).filter((p) => p.attributes["server.port"] === port && p.attributes["url.scheme"] === "https").reduce((n, p) => n + p.count, 0);
      await flushUntil(t!, () => count("http.server.request.duration") >= REQUESTS && count("http.client.request.duration") >= REQUESTS, 30_000);
      expect(count("http.server.request.duration")).toBe(REQUESTS);
      expect(count("http.client.request.duration")).toBe(REQUESTS);
    } finally {
      server.kill();
      await server.exited;
    }
  }, 120_000);
});
