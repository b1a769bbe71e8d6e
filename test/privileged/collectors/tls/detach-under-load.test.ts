/**
 * Privileged e2e: TLS libraries detached while HTTP/2 traffic flows lose nothing. Tearing down a uprobe makes the
 * kernel wait for an RCU grace period (~100 ms a link here, 8 links a libssl): done on the agent's event loop, that
 * wait stops it draining the ring buffers, the kernel stops forwarding the HTTP/2 connections (their HPACK state
 * cannot be kept over a gap) and their requests go uncounted in the RED metrics.
 *
 * dist/svc-agent (network, HTTP, TLS; max_tls_libraries 3; 1 MiB rings) traces h2load's h2c requests to a Node http2 server
 * while, beside them, processes start and exit one after another, each mapping its own copy of libssl (its own
 * inode): each copy attaches, and with the node binary (OpenSSL linked in) and the system libssl (h2load's) held,
 * the next copy can only be attached by detaching the one before, which no process maps any more. The
 * http.server.request.duration and http.client.request.duration counts of the route, as the official receiver
 * decodes them, must equal h2load's.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { missingOfficialTools } from "../../../helpers/official-receiver";
import { NODE_H2_SERVER } from "../network/harness";
import { histogram, libsslCopy, startPortServer, startTlsAgent, until, type LibsslCopy, type TlsAgent } from "./harness";

setDefaultTimeout(120_000);

const isRoot = process.getuid?.() === 0;
const missing = [...missingOfficialTools(), ...["h2load", "node"].filter((b) => !Bun.which(b))];
const REQUESTS = 150_000;
/** Library copies swapped in while h2load runs: at least this many detaches must fall inside its runs. */
const MIN_DETACHES = 3;
/** h2load runs (REQUESTS each) at most, to reach MIN_DETACHES. */
const MAX_RUNS = 6;

describe.skipIf(!isRoot || missing.length > 0)(`TLS libraries detached under HTTP/2 load${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
  let t: TlsAgent | undefined;
  let server: Awaited<ReturnType<typeof startPortServer>> | undefined;
  const made: LibsslCopy[] = [];

  beforeAll(async () => {
    // A 2 MiB ring (the size max_spans_per_second 250 gives): its three quarters take this load about half a second
    // to fill (~30,000 requests/s, 0.4 records of ~370 bytes a request), longer than the agent's usual pauses between
    // drains, shorter than a libssl's detach on the event loop (~0.9 s). A 1 MiB ring lost counts with no detach.
    t = await startTlsAgent("      max_tls_libraries: 3\n      metrics_interval: 1s\n    ringbuf_size: 2MiB\n");
    server = await startPortServer(["node", "-e", NODE_H2_SERVER]);
  });

  afterAll(async () => {
    server?.proc.kill();
    await server?.proc.exited;
    await t?.stop();
    for (const c of made) c.remove();
  });

  /** Starts a process mapping a fresh copy of libssl, waits until the agent attached the copy, and ends the process. */
  async function swapInCopy(): Promise<string> {
    const copy = libsslCopy();
    made.push(copy);
    const p = copy.hold();
    try {
      await until("the copy attached", async () => (await t!.targets()).find((x) => x.path === copy.path && x.state === "attached" && x.pids.includes(p.pid)));
    } finally {
      await p.stop();
    }
    await until("the copy held by no process", async () => (await t!.targets()).find((x) => x.path === copy.path && x.processes === 0));
    return copy.path;
  }

  test("h2load's requests are all counted, server and client side, while libraries are detached to make room", async () => {
    const port = server!.port;
    // Node (static OpenSSL) is one target; the first copy takes the third place (h2load's libssl takes the second).
    // h2load runs again until enough swaps fell inside its runs: how many fit in one run depends on the host's speed.
    const copies: string[] = [];
    let detachedDuringLoad = 0;
    let runs = 0;
    while (detachedDuringLoad < MIN_DETACHES) {
      if (runs === MAX_RUNS) throw new Error(`${detachedDuringLoad} detaches in ${runs} runs of h2load`);
      runs++;
      const h2load = Bun.spawn(["h2load", "-n", String(REQUESTS), "-c", "4", "-m", "10", `http://127.0.0.1:${port}/churn`], { stdout: "pipe", stderr: "inherit" });
      const output = new Response(h2load.stdout).text();
      let running = true;
      void h2load.exited.then(() => (running = false));
      while (running) {
        copies.push(await swapInCopy());
        // Each copy after the first was attached by detaching the one before (max_tls_libraries 3).
        if (copies.length >= 2 && running) detachedDuringLoad++;
      }
      const out = await output;
      expect(await h2load.exited).toBe(0);
      expect(out).toContain(`${REQUESTS} succeeded`);
    }
    const total = runs * REQUESTS;
    const view = await t!.targets();
    expect(view.some((x) => x.path === copies[copies.length - 2])).toBe(false);

    const counted = (metric: string, match: (a: Record<string, unknown>) => boolean) =>
      histogram(t!.rx.requests(), metric)
        .filter((h) => match(h.attributes))
        .reduce((n, h) => n + h.count, 0);
    const serverSide = () => counted("http.server.request.duration", (a) => a["http.route"] === "/churn");
    const clientSide = () => counted("http.client.request.duration", (a) => a["server.port"] === port);
    await until("every request counted on both sides", async () => {
      await fetch(`${t!.agent.url}/admin/flush`, { method: "POST" });
      return serverSide() >= total && clientSide() >= total ? true : undefined;
    }, 20_000).catch(() => undefined);
    expect({ server: serverSide(), client: clientSide() }).toEqual({ server: total, client: total });
  });
});
