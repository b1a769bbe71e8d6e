/**
 * Privileged: gRPC over TLS on the real kernel through the TLS uprobes, with two implementations: Debian's
 * python3-grpcio (gRPC core, linked to the system's libssl.so.3) and @grpc/grpc-js under node (node's OpenSSL, linked
 * statically with its symbols). Each serves test.v1.Echo over TLS and a client of the same makes 3 Echo calls, one
 * that ends NOT_FOUND, a server-streaming and a client-streaming call on one connection. Both run TLS over memory BIOs
 * (the ciphertext moves through the socket outside the SSL calls): the socket is found from the thread's socket calls
 * around them, so the spans carry the connection's addresses. The spans (decoded by protoc) must be exactly those
 * calls on both sides, RPC spans with the trailers' gRPC status and url.scheme https; rpc.server.duration and
 * rpc.client.duration count each call once per method and status. (grpc-js under Bun cannot be traced: Bun carries
 * BoringSSL without symbols, listed as not_traceable with that reason, see https-spans.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { realpathSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { makeSelfSignedCert, type SelfSignedCert } from "../../../helpers/self-signed-cert";
import { firstLine } from "../../../helpers/wait";
import { decodeSpansWithProtoc, until, type DecodedSpan, type TracingAgent } from "../network/harness";
import { attachedTarget, startTlsTracingAgent } from "./library-case";

setDefaultTimeout(90_000);

const PYTHON = "/usr/bin/python3";
const NODE = Bun.which("node");
const isRoot = process.getuid?.() === 0;
const missingTools = ["openssl", "protoc"].filter((b) => !Bun.which(b));

interface Implementation {
  name: string;
  /** What is missing for it to run here (empty: nothing). */
  missing: string[];
  /** argv of its server (then CERT KEY) and client (then CERT PORT). */
  argv: string[];
  /** Whether a probed file (its path) is the one its processes use. */
  target: (path: string) => boolean;
}

const IMPLEMENTATIONS: Implementation[] = [
  {
    name: "python3-grpcio (gRPC core, libssl.so.3)",
    missing: Bun.spawnSync([PYTHON, "-c", "import grpc"]).exitCode === 0 ? [] : ["python3-grpcio"],
    argv: [PYTHON, resolve(import.meta.dir, "../../../fixtures/grpc-tls.py")],
    target: (path) => /\/libssl\.so\.3$/.test(path),
  },
  {
    name: "@grpc/grpc-js under node (static OpenSSL)",
    missing: NODE && !Bun.spawnSync(["ldd", NODE]).stdout.toString().includes("libssl") ? [] : ["a node with OpenSSL linked in"],
    argv: [NODE ?? "node", resolve(import.meta.dir, "../../../fixtures/grpc-js-tls.cjs")],
    target: (path) => NODE !== null && path === realpathSync(NODE),
  },
];

const EXPECTED = ["test.v1.Echo/Collect 0", "test.v1.Echo/Echo 0", "test.v1.Echo/Echo 0", "test.v1.Echo/Echo 0", "test.v1.Echo/Fail 5", "test.v1.Echo/Stream 0"];

for (const impl of IMPLEMENTATIONS) {
  const missing = [...impl.missing, ...missingTools];
  describe.skipIf(!isRoot || missing.length > 0)(`gRPC over TLS: ${impl.name}${isRoot ? "" : " (needs root)"}${missing.length ? ` (missing ${missing.join(", ")})` : ""}`, () => {
    let t: TracingAgent;
    let cert: SelfSignedCert;
    let server: Bun.Subprocess<"ignore", "pipe", "inherit">;
    let port = 0;
    let clientPid = 0;
    let clientPort = 0;
    let spans: DecodedSpan[] = [];

    beforeAll(async () => {
      cert = makeSelfSignedCert();
      t = await startTlsTracingAgent();
      server = Bun.spawn([...impl.argv, "server", cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
      port = Number(await firstLine(server.stdout));
      const client = Bun.spawn([...impl.argv, "client", cert.certPath, String(port)], { stdin: "pipe", stdout: "pipe", stderr: "ignore" });
      clientPid = client.pid;
      expect(await firstLine(client.stdout)).toBe("ready");
      /* Both processes' TLS library is probed before the first call: every byte of the connection is seen. */
      for (const pid of [server.pid, clientPid]) await attachedTarget(t, pid, impl.target);
      client.stdin.write("go\n");
      await client.stdin.flush();
      expect(await firstLine(client.stdout)).toBe(JSON.stringify([0, 0, 0, 5, 0, 0]));
      await client.exited;
    }, 90_000);

    afterAll(async () => {
      server?.kill();
      await server?.exited;
      await t?.stop();
      if (cert) rmSync(cert.dir, { recursive: true, force: true });
    });

    const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && s.attributes["rpc.system"] === "grpc");

    test("each call is one RPC span on each side, with the gRPC status, url.scheme https and the connection's addresses", async () => {
      await until(() => ((spans = t.collected.spans), of(server.pid, "SPAN_KIND_SERVER").length >= 6 && of(clientPid, "SPAN_KIND_CLIENT").length >= 6), "6 gRPC server and 6 client spans", 30_000);
      await Bun.sleep(300);
      spans = decodeSpansWithProtoc(t.collected.traceBodies);
      for (const [pid, kind] of [[server.pid, "SPAN_KIND_SERVER"], [clientPid, "SPAN_KIND_CLIENT"]] as const) {
        const list = of(pid, kind);
        expect(list.map((s) => `${s.name} ${s.attributes["rpc.grpc.status_code"]}`).sort()).toEqual(EXPECTED);
        for (const s of list) {
          expect(s.attributes).toMatchObject({ "rpc.system": "grpc", "rpc.service": "test.v1.Echo", "url.scheme": "https", "network.protocol.version": "2", "server.address": "127.0.0.1", "server.port": port });
          expect(s.endNs).toBeGreaterThan(s.startNs);
        }
        const fail = list.find((s) => s.attributes["rpc.method"] === "Fail")!;
        /* NOT_FOUND is an error for the client, not for the server (RPC semantic conventions). */
        if (kind === "SPAN_KIND_CLIENT") {
          expect(fail.status).toMatchObject({ code: ["STATUS_CODE_ERROR"] });
          expect(fail.attributes["error.type"]).toBe("5");
        } else expect(fail.status?.code).toBeUndefined();
        expect(list.filter((s) => s.attributes["rpc.method"] !== "Fail").every((s) => s.status?.code === undefined)).toBe(true);
      }
      /* The socket under the memory BIOs: one connection, the same ports seen from both ends. */
      const serverSide = of(server.pid, "SPAN_KIND_SERVER");
      const clientSide = of(clientPid, "SPAN_KIND_CLIENT");
      clientPort = Number(serverSide[0]!.attributes["client.port"]);
      expect(clientPort).toBeGreaterThan(0);
      for (const s of serverSide) expect(s.attributes).toMatchObject({ "client.address": "127.0.0.1", "client.port": clientPort, "network.local.port": port, "network.peer.port": clientPort });
      for (const s of clientSide) expect(s.attributes).toMatchObject({ "network.peer.address": "127.0.0.1", "network.peer.port": port, "network.local.port": clientPort });
      /* The ciphertext on the socket makes no span of its own. */
      expect(spans.filter((s) => s.attributes["server.port"] === port && s.attributes["url.scheme"] === "http")).toEqual([]);
    });

    test("rpc.server.duration and rpc.client.duration count each call once per method and status, with url.scheme https", async () => {
      const calls = (metric: string, method: string, code: number) =>
        t.collected.total(metric, (a) => a["rpc.method"] === method && a["rpc.grpc.status_code"] === code && a["rpc.service"] === "test.v1.Echo" && a["server.port"] === port && a["url.scheme"] === "https");
      await until(() => calls("rpc.server.duration", "Echo", 0) >= 3 && calls("rpc.client.duration", "Echo", 0) >= 3 && calls("rpc.client.duration", "Collect", 0) >= 1, "rpc duration points", 20_000);
      await Bun.sleep(1500);
      for (const metric of ["rpc.server.duration", "rpc.client.duration"]) {
        expect([calls(metric, "Echo", 0), calls(metric, "Fail", 5), calls(metric, "Stream", 0), calls(metric, "Collect", 0)]).toEqual([3, 1, 1, 1]);
        expect(t.collected.total(metric, (a) => a["server.port"] === port)).toBe(6);
      }
      expect(t.collected.total("rpc.client.duration", (a) => a["server.port"] === port && a["server.address"] !== "127.0.0.1")).toBe(0);
      /* gRPC calls count in the RPC metrics only. */
      expect(t.collected.total("http.server.request.duration", (a) => a["server.port"] === port)).toBe(0);
    });
  });
}
