/**
 * Backend faults against an OTLP receiver, through the whole agent in-process (pipeline + exporter component +
 * HTTP interface), for each otlp.protocol: OTLP/gRPC against the project's gRPC receiver, OTLP/HTTP against a
 * Bun.serve backend decoding with protobufjs from the official protos. Backend down, flapping, slow (answers
 * after otlp.timeout), each retryable and permanent gRPC code or HTTP status (503 with Retry-After, 400, ...),
 * partial success, connections cut mid-call, wrong TLS certificate. During and after each fault:
 *   - collected = exported + dropped + queued + in flight, exactly, at every sample (pipeline accounting and
 *     the Prometheus counters agree);
 *   - nothing within capacity is lost: every accepted span reaches the backend (unique span ids), except
 *     the designed drops (permanent codes), which are counted to the item;
 *   - /ready and /status/export tell the truth (503 + connected:false while the backend cannot be used,
 *     200 + connected:true after);
 *   - export resumes within backoff.max (+ one otlp.timeout and a scheduling margin) of the backend's return.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test";
import * as grpc from "@grpc/grpc-js";
import { OtlpReceiver, type ReceivedRequest, type ReceiverReply } from "../../src/export/receiver";
import { decodeRequest } from "../../src/export/receiver/server";
import { inProcessAgent, stopAllAgents, type InProcessAgent } from "../helpers/in-process";
import { makeSelfSignedCert } from "../helpers/self-signed-cert";
import { json, waitUntil } from "../helpers/wait";
import { spans } from "../integration/export/harness";
import { OtlpHttpBackend, type HttpReply } from "../helpers/fakes/otlp-http-backend";
import { quietConfig } from "../helpers/quiet-config";

const PROTOCOLS = ["grpc", "http/protobuf"] as const;
type Protocol = (typeof PROTOCOLS)[number];
type Reply = ReceiverReply | HttpReply;

const BACKOFF_MAX_MS = 400;
const OTLP_TIMEOUT_MS = 300;
/** Scheduling margin on top of backoff.max + one timeout for "resumes within backoff.max" (2 shared cores in CI). */
const RESUME_MARGIN_MS = 1500;
const CAPACITY = 2000;

const config = (protocol: Protocol, otlpExtra = "") =>
  quietConfig({
    endpoint: "${OTLP_ENDPOINT}",
    otlp: `  protocol: ${protocol}\n  timeout: ${OTLP_TIMEOUT_MS}ms\n  compression: none${otlpExtra}`,
    extra: `backoff:\n  initial: 50ms\n  max: ${BACKOFF_MAX_MS}ms\nqueues:\n  traces:\n    capacity: ${CAPACITY}\n    batch_size: 100\n    batch_timeout: 10ms`,
  });

/** A receiver of `protocol` on a fixed port that can be killed and brought back, recording span ids. */
class Backend {
  receiver: OtlpReceiver | OtlpHttpBackend | undefined;
  port = 0;
  readonly requests: ReceivedRequest[] = [];
  readonly spanIds: string[] = [];
  respond: (r: ReceivedRequest) => Reply | Promise<Reply> = () => ({ ok: true });
  firstAfterUp = 0;
  upAt = 0;
  constructor(
    private readonly protocol: Protocol,
    private readonly tls?: { cert: Buffer; key: Buffer },
  ) {}

  async up(): Promise<void> {
    const options = {
      listen: `127.0.0.1:${this.port}`,
      ...(this.tls ? { tls: this.tls } : {}),
      onRequest: (r: ReceivedRequest) => {
        if (r.items === 0) return;
        this.requests.push(r);
        if (!this.firstAfterUp) this.firstAfterUp = performance.now();
      },
      respond: async (r: ReceivedRequest): Promise<Reply> => {
        if (r.items === 0) return { ok: true };
        const reply = await this.respond(r);
        if (reply.ok) this.record(r, reply.rejected ?? 0);
        return reply;
      },
    };
    this.receiver =
      this.protocol === "grpc"
        ? new OtlpReceiver(options as ConstructorParameters<typeof OtlpReceiver>[0])
        : new OtlpHttpBackend(options as ConstructorParameters<typeof OtlpHttpBackend>[0]);
    // The port may still be held for a moment by the previous server's sockets: retry the bind, bounded.
    const deadline = Date.now() + 5000;
    for (;;) {
      try {
        this.port = await this.receiver.start();
        break;
      } catch (e) {
        if (Date.now() > deadline) throw e;
        await Bun.sleep(20);
      }
    }
    this.upAt = performance.now();
    this.firstAfterUp = 0;
  }

  record(r: ReceivedRequest, rejected: number): void {
    const body = decodeRequest("traces", r.body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ spanId: string }> }> }> };
    const ids = body.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans.map((s) => s.spanId)));
    this.spanIds.push(...ids.slice(0, ids.length - rejected));
  }

  kill(): void {
    this.receiver?.kill();
    this.receiver = undefined;
  }

  unique(): number {
    return new Set(this.spanIds).size;
  }

  async stop(): Promise<void> {
    await this.receiver?.stop();
    this.receiver = undefined;
  }
}

interface Probe {
  ready: number;
  connected: boolean;
}

/** Checks the accounting identity at this instant (synchronous: no transition can interleave); returns traces. */
function identity(a: InProcessAgent) {
  const acc = a.agent.ctx.pipeline.accounting!();
  for (const [signal, s] of Object.entries(acc)) {
    if (s.collected !== s.exported + s.droppedTotal + s.queued + s.inFlight) throw new Error(`accounting broken for ${signal}: ${JSON.stringify(s)}`);
  }
  return acc.traces;
}

/**
 * The identity, and that the metrics and /status/export agree with the pipeline's counts. Only meaningful when
 * nothing moves (queue empty, nothing in flight, no submit pending): reading the metrics takes event-loop turns.
 */
async function checkAccounting(a: InProcessAgent) {
  const acc = { traces: identity(a) };
  const text = await (await a.request("/metrics")).text();
  const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? 0);
  const t = acc.traces;
  expect(value(/^svc_spans_collected_total (\S+)$/m)).toBe(t.collected);
  expect(value(/^svc_spans_exported_total (\S+)$/m)).toBe(t.exported);
  let dropped = 0;
  for (const m of text.matchAll(/^svc_spans_dropped_total\{reason="\w+"\} (\S+)$/gm)) dropped += Number(m[1]);
  expect(dropped).toBe(t.droppedTotal);
  const view = await json(a.request("/status/export"));
  expect(view.queues.traces.exported).toBe(t.exported);
  expect(view.queues.traces.dropped).toBe(t.droppedTotal);
  return t;
}

async function probe(a: InProcessAgent): Promise<Probe> {
  const ready = (await a.request("/ready")).status;
  const view = await json(a.request("/status/export"));
  return { ready, connected: view.connected as boolean };
}

/** Samples the accounting identity every few ms while `during` runs (a break at any instant fails the test). */
async function sampled<T>(a: InProcessAgent, during: () => Promise<T>): Promise<T> {
  let stop = false;
  let failure: unknown;
  const loop = (async () => {
    while (!stop) {
      try {
        identity(a);
      } catch (e) {
        failure ??= e;
      }
      await Bun.sleep(5);
    }
  })();
  try {
    return await during();
  } finally {
    stop = true;
    await loop;
    if (failure) throw failure;
  }
}

let agent: InProcessAgent | undefined;
let backend: Backend | undefined;

async function setup(protocol: Protocol, otlpExtra = "", tls?: { cert: Buffer; key: Buffer }, start = true) {
  backend = new Backend(protocol, tls);
  await backend.up();
  if (!start) backend.kill();
  agent = await inProcessAgent(config(protocol, otlpExtra), {
    backend: false,
    waitReady: start,
    env: { OTLP_ENDPOINT: `127.0.0.1:${backend.port}` },
  });
  return { a: agent, b: backend };
}

afterEach(async () => {
  await agent?.stop();
  await backend?.stop();
  agent = undefined;
  backend = undefined;
});
afterAll(stopAllAgents);

const submit = (a: InProcessAgent, n: number) => a.agent.ctx.pipeline.submit("traces", spans(n));

async function allExported(a: InProcessAgent, b: Backend, expected: number, timeoutMs = 15_000) {
  await waitUntil(
    async () => {
      const t = identity(a);
      return t.queued === 0 && t.inFlight === 0 && b.unique() >= expected;
    },
    { timeoutMs, what: `${expected} spans at the backend` },
  );
}

for (const protocol of PROTOCOLS) {
  describe(`otlp.protocol ${protocol}`, () => {

    describe("backend down for a while", () => {
      test("queued while down (503, connected:false), all exported once it returns, within backoff.max", async () => {
        const { a, b } = await setup(protocol);
        b.kill();
        const accepted = await sampled(a, async () => {
          const n = submit(a, 1500);
          await waitUntil(async () => (await probe(a)).ready === 503, { what: "/ready 503 while the backend is down" });
          const p = await probe(a);
          expect(p.connected).toBe(false);
          const ready = await json(a.request("/ready"));
          expect(ready.status).toBe("not_ready");
          expect(String(ready.checks.otlp)).toStartWith("failed: ");
          // Several retries happen while it is down.
          await waitUntil(async () => Number(/^svc_export_errors_total\{signal="traces",code="UNAVAILABLE"\} (\S+)$/m.exec(await (await a.request("/metrics")).text())?.[1] ?? 0) >= 3, {
            what: "retries against the absent backend",
          });
          expect(b.spanIds.length).toBe(0);
          await b.up();
          await allExported(a, b, n);
          return n;
        });
        expect(accepted).toBe(1500);
        const t = await checkAccounting(a);
        expect(t.exported).toBe(1500);
        expect(t.droppedTotal).toBe(0);
        expect(b.unique()).toBe(1500);
        expect(b.firstAfterUp - b.upAt).toBeLessThan(BACKOFF_MAX_MS + OTLP_TIMEOUT_MS + RESUME_MARGIN_MS);
        await waitUntil(async () => {
          const p = await probe(a);
          return p.ready === 200 && p.connected;
        }, { what: "/ready 200 and connected after the backend returned" });
      });

      test("beyond capacity while down: the excess is dropped as queue_full, counted to the item; the rest arrives", async () => {
        const { a, b } = await setup(protocol);
        // gRPC: killed while exports are idle, the lost connection is noticed without any export (regression: up to
        // 15 s). OTLP/HTTP has no channel to watch: it is noticed by the next export (or the idle check).
        b.kill();
        if (protocol === "grpc") await waitUntil(async () => (await probe(a)).ready === 503, { what: "/ready 503 after an idle backend went away", timeoutMs: 5000 });
        let accepted = 0;
        await sampled(a, async () => {
          for (let i = 0; i < 6; i++) {
            accepted += submit(a, 1000);
            await Bun.sleep(1);
          }
          const t = identity(a);
          expect(t.dropped.queue_full).toBe(6000 - accepted);
          expect(t.queued).toBeLessThanOrEqual(CAPACITY);
          await b.up();
          await allExported(a, b, accepted);
        });
        const t = await checkAccounting(a);
        expect(t.exported).toBe(accepted);
        expect(t.exported + t.dropped.queue_full).toBe(6000);
        expect(b.unique()).toBe(accepted);
      });
    });

    test("flapping backend: up and down five times during a steady stream; nothing accepted is lost", async () => {
      const { a, b } = await setup(protocol);
      let accepted = 0;
      await sampled(a, async () => {
        for (let i = 0; i < 5; i++) {
          accepted += submit(a, 100);
          b.kill();
          accepted += submit(a, 100);
          await waitUntil(async () => (await probe(a)).ready === 503, { what: `/ready 503 (flap ${i})` });
          await b.up();
          accepted += submit(a, 100);
          await waitUntil(async () => (await probe(a)).ready === 200, { what: `/ready 200 (flap ${i})` });
        }
        await allExported(a, b, accepted);
      });
      expect(accepted).toBe(1500); // within capacity (2000) even if nothing drained between flaps
      const t = await checkAccounting(a);
      expect(t.exported).toBe(1500);
      expect(t.droppedTotal).toBe(0);
      expect(b.unique()).toBe(1500);
    });

    test("slow backend (answers after otlp.timeout): retried as DEADLINE_EXCEEDED, all exported once it is fast again", async () => {
      const { a, b } = await setup(protocol);
      let slow = true;
      b.respond = async () => {
        if (slow) await Bun.sleep(OTLP_TIMEOUT_MS * 2);
        return { ok: true };
      };
      await sampled(a, async () => {
        submit(a, 500);
        await waitUntil(
          async () => /^svc_export_errors_total\{signal="traces",code="DEADLINE_EXCEEDED"\} [1-9]/m.test(await (await a.request("/metrics")).text()),
          { what: "a DEADLINE_EXCEEDED attempt" },
        );
        const p = await probe(a);
        expect(p.connected).toBe(false);
        expect(String((await json(a.request("/status/export"))).last_error)).toContain("DEADLINE_EXCEEDED");
        slow = false;
        await allExported(a, b, 500);
      });
      const t = await checkAccounting(a);
      expect(t.exported).toBe(500);
      expect(t.droppedTotal).toBe(0);
      // A batch the backend took after the client gave up is sent again: at-least-once, the duplicates are these.
      expect(b.unique()).toBe(500);
      await waitUntil(async () => (await probe(a)).connected, { what: "connected once fast again" });
    });

    const RETRYABLE: Array<[string, Reply]> =
      protocol === "grpc"
        ? [
            ["CANCELLED", { ok: false, code: grpc.status.CANCELLED }],
            ["DEADLINE_EXCEEDED", { ok: false, code: grpc.status.DEADLINE_EXCEEDED }],
            ["ABORTED", { ok: false, code: grpc.status.ABORTED }],
            ["OUT_OF_RANGE", { ok: false, code: grpc.status.OUT_OF_RANGE }],
            ["UNAVAILABLE", { ok: false, code: grpc.status.UNAVAILABLE }],
            ["DATA_LOSS", { ok: false, code: grpc.status.DATA_LOSS }],
            ["RESOURCE_EXHAUSTED with RetryInfo", { ok: false, code: grpc.status.RESOURCE_EXHAUSTED, retryDelayMs: 30 }],
          ]
        : [
            ["429", { ok: false, status: 429 }],
            ["429 with Retry-After", { ok: false, status: 429, retryAfter: "0" }],
            ["502", { ok: false, status: 502 }],
            ["503", { ok: false, status: 503 }],
            ["503 with Retry-After", { ok: false, status: 503, retryAfter: "0" }],
            ["504", { ok: false, status: 504 }],
          ];

    describe("retryable codes: retried until accepted, nothing lost", () => {
      for (const [name, reply] of RETRYABLE) {
        test(name, async () => {
          const { a, b } = await setup(protocol);
          let failures = 3;
          b.respond = () => (failures-- > 0 ? reply : { ok: true });
          await sampled(a, async () => {
            submit(a, 300);
            await allExported(a, b, 300);
          });
          const t = await checkAccounting(a);
          expect(failures).toBeLessThan(0);
          expect(t.exported).toBe(300);
          expect(t.droppedTotal).toBe(0);
          expect(b.unique()).toBe(300);
          expect(b.spanIds.length).toBe(300);
          // What arrived came over the protocol configured, from this agent.
          const ua = b.requests[0]!.metadata["user-agent"]!;
          expect(ua).toMatch(protocol === "grpc" ? /^svc-agent\/\S+ grpc-node-js\// : /^svc-agent\/\S+ Bun\//);
          if (protocol === "http/protobuf") expect(b.requests[0]!.metadata["content-type"]).toBe("application/x-protobuf");
          expect((await json(a.request("/status/export"))).protocol).toBe(protocol);
          // Each of the 3 failed attempts was retried once.
          expect(await (await a.request("/metrics")).text()).toContain('svc_export_retries_total{signal="traces"} 3');
        });
      }

      if (protocol === "http/protobuf")
        test("503 with Retry-After: 1 waits the server's second, longer than backoff.max", async () => {
          const { a, b } = await setup(protocol);
          let failures = 1;
          b.respond = () => (failures-- > 0 ? { ok: false, status: 503, retryAfter: "1" } : { ok: true });
          await sampled(a, async () => {
            submit(a, 100);
            await allExported(a, b, 100);
          });
          expect(b.requests).toHaveLength(2);
          const gap = b.requests[1]!.receivedAt.getTime() - b.requests[0]!.receivedAt.getTime();
          expect(gap).toBeGreaterThanOrEqual(990);
          const t = await checkAccounting(a);
          expect(t.exported).toBe(100);
          expect(t.droppedTotal).toBe(0);
        });
    });

    /** Name, reply, and the text the drop's log record carries. */
    const PERMANENT: Array<[string, Reply, string]> =
      protocol === "grpc"
        ? (
            [
              ["UNKNOWN", grpc.status.UNKNOWN],
              ["INVALID_ARGUMENT", grpc.status.INVALID_ARGUMENT],
              ["NOT_FOUND", grpc.status.NOT_FOUND],
              ["ALREADY_EXISTS", grpc.status.ALREADY_EXISTS],
              ["PERMISSION_DENIED", grpc.status.PERMISSION_DENIED],
              ["RESOURCE_EXHAUSTED without RetryInfo", grpc.status.RESOURCE_EXHAUSTED],
              ["FAILED_PRECONDITION", grpc.status.FAILED_PRECONDITION],
              ["UNIMPLEMENTED", grpc.status.UNIMPLEMENTED],
              ["INTERNAL", grpc.status.INTERNAL],
              ["UNAUTHENTICATED", grpc.status.UNAUTHENTICATED],
            ] as Array<[string, grpc.status]>
          ).map(([name, code]) => [name, { ok: false, code }, name.split(" ")[0]!])
        : [400, 401, 403, 404, 408, 413, 500, 501].map((status) => [`HTTP ${status}`, { ok: false, status }, `HTTP ${status}`]);

    describe("permanent codes: the batch is dropped as permanent_error, counted to the item; later batches go through", () => {
      for (const [name, reply, logText] of PERMANENT) {
        test(name, async () => {
          const { a, b } = await setup(protocol);
          let failures = 1;
          b.respond = () => (failures-- > 0 ? reply : { ok: true });
          await sampled(a, async () => {
            submit(a, 100); // exactly one batch (batch_size 100)
            await waitUntil(() => identity(a).dropped.permanent_error === 100, { what: "the batch dropped" });
            submit(a, 200);
            await allExported(a, b, 200);
          });
          const t = await checkAccounting(a);
          expect(t.dropped.permanent_error).toBe(100);
          expect(t.exported).toBe(200);
          expect(t.collected).toBe(300);
          expect(b.unique()).toBe(200);
          expect(a.logs.some((l) => l.msg === "export batch dropped: permanent error" && String(l.error).includes(logText))).toBe(true);
        });
      }

      test("partial success: the rejected count is dropped as partial_success, the rest exported", async () => {
        const { a, b } = await setup(protocol);
        let once = true;
        b.respond = () => (once ? ((once = false), { ok: true, rejected: 7, message: "7 spans rejected" }) : { ok: true });
        await sampled(a, async () => {
          submit(a, 100);
          await waitUntil(() => identity(a).exported === 93, { what: "93 exported" });
        });
        const t = await checkAccounting(a);
        expect(t.dropped.partial_success).toBe(7);
        expect(t.exported).toBe(93);
      });
    });

    test("connections cut mid-call (receiver killed while a request is open): retried after the backend returns", async () => {
      const { a, b } = await setup(protocol);
      let cuts = 2;
      b.respond = async () => {
        if (cuts-- > 0) {
          setTimeout(() => b.kill(), 0);
          await Bun.sleep(OTLP_TIMEOUT_MS * 3); // never answered: the connection goes first
        }
        return { ok: true };
      };
      await sampled(a, async () => {
        submit(a, 400);
        await waitUntil(() => b.receiver === undefined, { what: "the first cut" });
        await waitUntil(async () => (await probe(a)).ready === 503, { what: "/ready 503 after the cut" });
        await b.up();
        await waitUntil(() => cuts < 0 || b.receiver === undefined, { what: "the second cut or no second request" });
        if (!b.receiver) await b.up();
        await allExported(a, b, 400);
      });
      const t = await checkAccounting(a);
      expect(t.exported).toBe(400);
      expect(t.droppedTotal).toBe(0);
      expect(b.unique()).toBe(400);
      await waitUntil(async () => (await probe(a)).ready === 200, { what: "/ready 200 after the cuts" });
    });

    test("TLS certificate wrong (not signed by the configured CA): not ready with the reason, items kept; right CA by reload: exported", async () => {
      const server = makeSelfSignedCert();
      const other = makeSelfSignedCert();
      const tls = { cert: Buffer.from(server.cert), key: Buffer.from(server.key) };
      const { a, b } = await setup(protocol, `\n  insecure: false\n  tls:\n    ca_file: ${other.certPath}`, tls, false);
      await b.up();
      await sampled(a, async () => {
        submit(a, 300);
        // The backend came up after the agent started: an earlier "connection refused" may stand in last_error
        // until the first attempt against the wrong certificate has failed.
        await waitUntil(async () => /certificate|verify/i.test(String((await json(a.request("/status/export"))).last_error)), { what: "an export error with the wrong certificate" });
        expect((await a.request("/ready")).status).toBe(503);
        const ready = await json(a.request("/ready"));
        expect(String(ready.checks.otlp)).toStartWith("failed: ");
        expect(String(ready.checks.otlp)).not.toContain("connecting to the backend");
        const view = await json(a.request("/status/export"));
        expect(view.connected).toBe(false);
        expect(view.tls).toBe(true);
        expect(String(view.last_error)).toMatch(/certificate|verify/i);
        expect(b.spanIds.length).toBe(0);
        const t = identity(a);
        expect(t.queued + t.inFlight).toBe(300);
        // The operator fixes the CA: the queued items go out.
        a.writeConfig(config(protocol, `\n  insecure: false\n  tls:\n    ca_file: ${server.certPath}`));
        const r = await a.request("/admin/reload", { method: "POST" });
        expect(r.status).toBe(200);
        await allExported(a, b, 300).catch(async (e) => {
          throw new Error(`${(e as Error).message}: ${JSON.stringify(await json(a.request("/status/export")))} ${JSON.stringify(identity(a))}`);
        });
      });
      expect((await checkAccounting(a)).exported).toBe(300);
      await waitUntil(async () => (await probe(a)).ready === 200, { what: "/ready 200 with the right CA" });
    });
  });
}
