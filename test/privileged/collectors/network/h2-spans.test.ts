/**
 * Privileged: HTTP/2 and gRPC on the real kernel. A Node `http2` server answers nghttp (three GETs multiplexed
 * on one h2c connection) and curl --http2-prior-knowledge (a POST); an @grpc/grpc-js server and client (under node) make unary calls,
 * a call that ends NOT_FOUND, a server-streaming and a client-streaming call, and a unary call the server never answers
 * and the client cancels (RST_STREAM CANCEL, no response: CANCELLED on both sides, an error for the client only);
 * then a call with a 300 ms deadline to a bare Node http2 server that never answers nor enforces deadlines: the client
 * resets it with CANCEL at its deadline, and both sides read DEADLINE_EXCEEDED, as the client reports it; and a plain
 * HTTP/2 GET to that server that the client resets: no span, one RED count per side with error.type stream_reset. The spans exported must match
 * what the clients did (method, path, status, gRPC status, count), decoded by protoc from the bodies that reached
 * the receiver; the HTTP RED metrics count the HTTP/2 exchanges and the RPC duration metrics the gRPC calls.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GRPC_ECHO_COMMON, GRPC_ECHO_SERVER, decodeSpansWithProtoc, startTracingAgent, until, type DecodedSpan, type TracingAgent } from "./harness";

setDefaultTimeout(60_000);

const REPO = new URL("../../../../", import.meta.url).pathname;

const H2_SERVER = `
const http2 = require("node:http2");
const s = http2.createServer();
s.on("stream", (stream, headers) => {
  const p = headers[":path"];
  const m = headers[":method"];
  let body = "";
  stream.on("data", (d) => (body += d));
  stream.on("end", () => {
    if (p === "/missing") { stream.respond({ ":status": 404 }); stream.end("no"); return; }
    if (m === "POST") { stream.respond({ ":status": 201, "x-echo": body }); stream.end("made " + body); return; }
    stream.respond({ ":status": 200, "content-type": "text/plain", "x-long": "v".repeat(300) });
    stream.end("hello " + p);
  });
});
s.listen(0, "127.0.0.1", () => console.log(s.address().port));
`;

/** An h2c server that takes any stream and never answers (no gRPC library: it enforces no deadline). */
const SILENT_H2_SERVER = `
const http2 = require("node:http2");
const s = http2.createServer();
s.on("stream", (stream) => stream.on("data", () => {}));
s.listen(0, "127.0.0.1", () => console.log(s.address().port));
`;

const GRPC_CLIENT = `${GRPC_ECHO_COMMON}
const Client = grpc.makeGenericClientConstructor(service, "Echo");
const c = new Client("127.0.0.1:" + process.argv[1], grpc.credentials.createInsecure());
const unary = (m, arg) => new Promise((res) => c[m](arg, (err, v) => res(err ? err.code : 0)));
(async () => {
  const codes = [];
  for (let i = 0; i < 3; i++) codes.push(await unary("Echo", Buffer.from("hi" + i)));
  codes.push(await unary("Fail", Buffer.from("x")));
  codes.push(await new Promise((res) => { const s = c.Stream(Buffer.from("go")); let n = 0; s.on("data", () => n++); s.on("status", (st) => res(n === 3 ? st.code : -1)); }));
  codes.push(await new Promise((res) => { const s = c.Collect((err, v) => res(err ? err.code : Number(String(v)) === 4 ? 0 : -1)); for (let i = 0; i < 4; i++) s.write(Buffer.from("m" + i)); s.end(); }));
  // A call the server has begun (its request seen) and the client cancels before any answer.
  codes.push(await new Promise((res) => { const call = c.Hang(Buffer.from("wait"), (err) => res(err ? err.code : -1)); setTimeout(() => call.cancel(), 300); }));
  // A call past its deadline, to a server that never answers.
  const silent = new (grpc.makeGenericClientConstructor({ Hang: { ...service.Hang, path: "/test.v1.Silent/Hang" } }, "Silent"))("127.0.0.1:" + process.argv[2], grpc.credentials.createInsecure());
  codes.push(await new Promise((res) => silent.Hang(Buffer.from("wait"), { deadline: Date.now() + 300 }, (err) => res(err ? err.code : -1))));
  silent.close();
  // A plain HTTP/2 GET to the same server, reset (CANCEL) before any answer.
  const h2 = require("node:http2");
  const session = h2.connect("http://127.0.0.1:" + process.argv[2]);
  const req = session.request({ ":path": "/wait" });
  req.on("error", () => {});
  req.end();
  await new Promise((res) => setTimeout(res, 200));
  req.close(h2.constants.NGHTTP2_CANCEL);
  await new Promise((res) => setTimeout(res, 100));
  session.close();
  console.log(JSON.stringify(codes));
  c.close();
})();
`;

async function firstLine(p: Bun.Subprocess<"ignore", "pipe", "inherit">): Promise<string> {
  const reader = p.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return text.trim();
}

function spawnNode(script: string, ...args: string[]): Bun.Subprocess<"ignore", "pipe", "inherit"> {
  return Bun.spawn(["node", "-e", script, ...args], { cwd: REPO, stdin: "ignore", stdout: "pipe", stderr: "inherit" });
}

describe("HTTP/2 and gRPC tracing on the real kernel", () => {
  let t: TracingAgent;
  const children: Array<Bun.Subprocess<"ignore", "pipe", "inherit">> = [];
  let h2Server: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let grpcServer: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let h2Port = 0;
  let grpcPort = 0;
  let curlPid = 0;
  let nghttpPid = 0;
  let grpcClientPid = 0;
  let silentServer: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let silentPort = 0;
  let spans: DecodedSpan[] = [];

  beforeAll(async () => {
    /* Every process on the host is traced: a span budget above what other work on the machine can spend. */
    t = await startTracingAgent(`    network:
      enabled: true
      max_spans_per_second: 1000000
      metrics_interval: 1s`);
    await until(() => t.agent.agent.status.component("ebpf/network")?.state === "ok", "ebpf/network ok", 30_000);
    h2Server = spawnNode(H2_SERVER);
    grpcServer = spawnNode(GRPC_ECHO_SERVER);
    children.push(h2Server, grpcServer);
    h2Port = Number(await firstLine(h2Server));
    grpcPort = Number(await firstLine(grpcServer));
    silentServer = spawnNode(SILENT_H2_SERVER);
    children.push(silentServer);
    silentPort = Number(await firstLine(silentServer));
    const base = `http://127.0.0.1:${h2Port}`;
    const nghttp = Bun.spawn(["nghttp", "-n", `${base}/hello?x=1`, `${base}/missing`, `${base}/a/b/c`], { stdout: "ignore", stderr: "inherit" });
    nghttpPid = nghttp.pid;
    expect(await nghttp.exited).toBe(0);
    const curl = Bun.spawn(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null", "-d", "k=v", `${base}/submit`], { stdout: "ignore", stderr: "inherit" });
    curlPid = curl.pid;
    expect(await curl.exited).toBe(0);
    const client = spawnNode(GRPC_CLIENT, String(grpcPort), String(silentPort));
    grpcClientPid = client.pid;
    expect(await firstLine(client)).toBe(JSON.stringify([0, 0, 0, 5, 0, 0, 1, 4]));
    await client.exited;
  }, 90_000);

  afterAll(async () => {
    for (const c of children) c.kill();
    await Promise.all(children.map((c) => c.exited));
    await t?.stop();
  });

  const rows = (list: DecodedSpan[]) => list.map((s) => `${s.attributes["http.request.method"]} ${s.attributes["url.path"]} ${s.attributes["http.response.status_code"]}`).sort();
  const protocSpans = () => (spans = decodeSpansWithProtoc(t.collected.traceBodies));
  /* Waiting looks at the receiver's own decoding (cheap: the host's other traffic is traced too); assertions at protoc's. */
  const received = () => (spans = t.collected.spans);
  const of = (pid: number, kind: string) => spans.filter((s) => s.attributes["process.pid"] === pid && s.kind === kind && !s.name.startsWith("CONNECT"));

  test("h2c: nghttp's three multiplexed requests and curl's POST are server spans of the Node server and client spans of each client", async () => {
    await until(() => (received(), of(h2Server.pid, "SPAN_KIND_SERVER").length >= 4 && of(nghttpPid, "SPAN_KIND_CLIENT").length >= 3 && of(curlPid, "SPAN_KIND_CLIENT").length >= 1), "4 server and 4 client HTTP/2 spans").catch(async (e: Error) => {
      const drops = (await (await t.agent.request("/metrics")).text()).split("\n").filter((l) => /dropped_total\{reason="(http|rate)|ringbuf_lost_total\{ringbuf="network/.test(l));
      throw new Error(`${e.message}; seen: server ${rows(of(h2Server.pid, "SPAN_KIND_SERVER"))}, nghttp ${rows(of(nghttpPid, "SPAN_KIND_CLIENT"))}, curl ${rows(of(curlPid, "SPAN_KIND_CLIENT"))}; ${drops.join(", ")}`);
    });
    await Bun.sleep(300);
    protocSpans();
    const server = of(h2Server.pid, "SPAN_KIND_SERVER");
    const client = [...of(nghttpPid, "SPAN_KIND_CLIENT"), ...of(curlPid, "SPAN_KIND_CLIENT")];
    expect(rows(server)).toEqual(["GET /a/b/c 200", "GET /hello 200", "GET /missing 404", "POST /submit 201"]);
    expect(rows(client)).toEqual(["GET /a/b/c 200", "GET /hello 200", "GET /missing 404", "POST /submit 201"]);
    expect(rows(of(curlPid, "SPAN_KIND_CLIENT"))).toEqual(["POST /submit 201"]);
    for (const s of [...server, ...client]) {
      expect(s.attributes["network.protocol.version"]).toBe("2");
      expect(s.attributes["server.port"]).toBe(h2Port);
      expect(s.endNs).toBeGreaterThan(s.startNs);
    }
    expect(server.find((s) => s.attributes["url.path"] === "/hello")!.attributes["url.query"]).toBe("x=REDACTED");
    /* nghttp's three streams shared one connection, curl's POST had its own. */
    expect(new Set(server.map((s) => s.attributes["client.port"])).size).toBe(2);
    expect(client.find((s) => s.attributes["http.response.status_code"] === 404)!.status).toMatchObject({ code: ["STATUS_CODE_ERROR"] });
  });

  test("gRPC: unary, failing, streaming and cancelled calls are RPC spans with the trailers' status (a cancel's CANCELLED), on both sides", async () => {
    await until(() => (received(), of(grpcServer.pid, "SPAN_KIND_SERVER").length >= 7 && of(grpcClientPid, "SPAN_KIND_CLIENT").length >= 8 && of(silentServer.pid, "SPAN_KIND_SERVER").length >= 1), "7 gRPC server and 8 client spans, 1 of the silent server");
    await Bun.sleep(300);
    protocSpans();
    // The deadline: the client's CANCEL at 300 ms, DEADLINE_EXCEEDED on both sides (an error for both).
    const late = [...of(silentServer.pid, "SPAN_KIND_SERVER"), ...of(grpcClientPid, "SPAN_KIND_CLIENT").filter((s) => s.attributes["rpc.service"] === "test.v1.Silent")];
    expect(late.map((s) => `${s.kind} ${s.name} ${s.attributes["rpc.grpc.status_code"]} ${s.attributes["server.port"] === silentPort}`)).toEqual(["SPAN_KIND_SERVER test.v1.Silent/Hang 4 true", "SPAN_KIND_CLIENT test.v1.Silent/Hang 4 true"]);
    for (const s of late) expect(s.status).toMatchObject({ code: ["STATUS_CODE_ERROR"] });
    for (const [pid, kind] of [[grpcServer.pid, "SPAN_KIND_SERVER"], [grpcClientPid, "SPAN_KIND_CLIENT"]] as const) {
      const list = of(pid, kind).filter((s) => s.attributes["rpc.service"] === "test.v1.Echo");
      expect(list.map((s) => `${s.name} ${s.attributes["rpc.grpc.status_code"]}`).sort()).toEqual([
        "test.v1.Echo/Collect 0",
        "test.v1.Echo/Echo 0",
        "test.v1.Echo/Echo 0",
        "test.v1.Echo/Echo 0",
        "test.v1.Echo/Fail 5",
        "test.v1.Echo/Hang 1",
        "test.v1.Echo/Stream 0",
      ]);
      for (const s of list) {
        expect(s.attributes["rpc.system"]).toBe("grpc");
        expect(s.attributes["rpc.service"]).toBe("test.v1.Echo");
        expect(s.attributes["server.port"]).toBe(grpcPort);
        expect(s.endNs).toBeGreaterThan(s.startNs);
      }
      const fail = list.find((s) => s.attributes["rpc.method"] === "Fail")!;
      /* NOT_FOUND is an error for the client, not for the server (RPC semantic conventions). */
      if (kind === "SPAN_KIND_CLIENT") expect(fail.status).toMatchObject({ code: ["STATUS_CODE_ERROR"] });
      else expect(fail.status?.code).toBeUndefined();
      /* CANCELLED likewise: the client's error, not the server's. */
      const cancelled = list.find((s) => s.attributes["rpc.grpc.status_code"] === 1)!;
      if (kind === "SPAN_KIND_CLIENT") expect(cancelled.status).toMatchObject({ code: ["STATUS_CODE_ERROR"] });
      else expect(cancelled.status?.code).toBeUndefined();
      expect(list.filter((s) => s.attributes["rpc.method"] !== "Fail" && s !== cancelled).every((s) => s.status?.code === undefined)).toBe(true);
    }
  });

  test("RPC duration metrics count the calls per method and status", async () => {
    const calls = (metric: string, method: string, code: number) => t.collected.total(metric, (a) => a["rpc.method"] === method && a["rpc.grpc.status_code"] === code && a["rpc.service"] === "test.v1.Echo");
    // Every call's point before the counts are read: a call whose exchange ended after the Echo calls' points were
    // exported comes in a later interval (seen once in a whole-suite run: Stream's server point missing at the check).
    const all = () =>
      calls("rpc.server.duration", "Echo", 0) >= 3 && calls("rpc.client.duration", "Echo", 0) >= 3 && calls("rpc.server.duration", "Fail", 5) >= 1 && calls("rpc.client.duration", "Fail", 5) >= 1 && calls("rpc.server.duration", "Stream", 0) >= 1 && calls("rpc.server.duration", "Collect", 0) >= 1;
    await until(all, "rpc duration points", 20_000);
    expect(calls("rpc.server.duration", "Echo", 0)).toBe(3);
    expect(calls("rpc.client.duration", "Echo", 0)).toBe(3);
    expect(calls("rpc.server.duration", "Fail", 5)).toBe(1);
    expect(calls("rpc.client.duration", "Fail", 5)).toBe(1);
    expect(calls("rpc.server.duration", "Stream", 0)).toBe(1);
    expect(calls("rpc.server.duration", "Collect", 0)).toBe(1);
    await until(() => calls("rpc.server.duration", "Hang", 1) >= 1 && calls("rpc.client.duration", "Hang", 1) >= 1, "the cancelled call's points", 20_000);
    expect(calls("rpc.server.duration", "Hang", 1)).toBe(1);
    expect(calls("rpc.client.duration", "Hang", 1)).toBe(1);
  });

  test("HTTP/2 exchanges count in the HTTP RED metrics like HTTP/1.x ones (gRPC calls in the RPC metrics only)", async () => {
    const server = (method: string, status: number) =>
      t.collected.total("http.server.request.duration", (a) => a["http.request.method"] === method && a["http.response.status_code"] === status && a["server.port"] === h2Port);
    const client = (method: string, status: number) =>
      t.collected.total("http.client.request.duration", (a) => a["http.request.method"] === method && a["http.response.status_code"] === status && a["server.port"] === h2Port);
    await until(() => server("GET", 200) >= 2 && client("POST", 201) >= 1, "HTTP/2 RED points", 20_000);
    expect([server("GET", 200), server("GET", 404), server("POST", 201)]).toEqual([2, 1, 1]);
    expect([client("GET", 200), client("GET", 404), client("POST", 201)]).toEqual([2, 1, 1]);
    expect(t.collected.total("http.server.request.duration", (a) => a["server.port"] === grpcPort)).toBe(0);
    // The reset GET: counted on both sides, without a status, as stream_reset.
    const reset = (metric: string) => t.collected.total(metric, (a) => a["server.port"] === silentPort && a["error.type"] === "stream_reset" && a["http.request.method"] === "GET" && a["http.response.status_code"] === undefined);
    await until(() => reset("http.server.request.duration") >= 1 && reset("http.client.request.duration") >= 1, "the reset GET's RED points", 20_000);
    expect([reset("http.server.request.duration"), reset("http.client.request.duration")]).toEqual([1, 1]);
    expect(t.collected.total("http.server.request.duration", (a) => a["server.port"] === silentPort)).toBe(1);
  });
});
