/**
 * Privileged: a gRPC connection opened before the agent (a grpc-js channel across an agent restart). An
 * @grpc/grpc-js client makes a round of calls to an h2c gRPC server (three unary Echo, a Fail that ends NOT_FOUND,
 * a server-streaming Stream) over one connection; only then does the agent load its programs, and the same
 * connection carries a second round. By then the client's HPACK encoder names content-type by an entry of its
 * dynamic table from the first round, and the server's names grpc-status likewise: decoded from the middle, neither
 * field is known. The calls are still gRPC calls by their shape (a POST to /service/method answered 200 and ended
 * on a header block): the receiver gets one RPC span per call on each side with its service and method, no
 * rpc.grpc.status_code (not known, so no error either), and rpc.server.duration / rpc.client.duration count exactly
 * the second round's five calls; nothing of the connection counts as HTTP. Both capture modes.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GRPC_ECHO_COMMON, GRPC_ECHO_SERVER, decodePointsWithProtoc, decodeSpansWithProtoc, startAgentThenGo, totalOf, until, type DecodedPoint, type DecodedSpan, type TracingAgent } from "./harness";
import { firstLine } from "../../../helpers/wait";

setDefaultTimeout(60_000);

const REPO = new URL("../../../../", import.meta.url).pathname;

/** One channel for its whole life: a round of calls, then "open"; on each line of its stdin, another round and its codes (JSON). */
const CLIENT = `${GRPC_ECHO_COMMON}
const Client = grpc.makeGenericClientConstructor(service, "Echo");
const c = new Client("127.0.0.1:" + process.argv[1], grpc.credentials.createInsecure());
const unary = (m, arg) => new Promise((res) => c[m](arg, (err) => res(err ? err.code : 0)));
const round = async () => {
  const codes = [];
  for (let i = 0; i < 3; i++) codes.push(await unary("Echo", Buffer.from("hi" + i)));
  codes.push(await unary("Fail", Buffer.from("x")));
  codes.push(await new Promise((res) => { const s = c.Stream(Buffer.from("go")); let n = 0; s.on("data", () => n++); s.on("status", (st) => res(n === 3 ? st.code : -1)); }));
  return codes;
};
(async () => {
  await round();
  console.log("open");
  require("node:readline").createInterface({ input: process.stdin }).on("line", async () => console.log(JSON.stringify(await round())));
})();
`;

describe.each(["socket", "syscalls"] as const)("a gRPC connection opened before the agent (http_capture: %s)", (mode) => {
  let t: TracingAgent | undefined;
  let server: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let client: Bun.Subprocess<"pipe", "pipe", "inherit">;
  let port = 0;

  beforeAll(async () => {
    server = Bun.spawn(["node", "-e", GRPC_ECHO_SERVER], { cwd: REPO, stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    port = Number(await firstLine(server.stdout));
    client = Bun.spawn(["node", "-e", CLIENT, String(port)], { cwd: REPO, stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    expect(await firstLine(client.stdout)).toBe("open");
    /* The connection and its first round are behind it: now the agent starts. */
    const started = await startAgentThenGo(mode, client);
    t = started.t;
    expect(started.line).toBe(JSON.stringify([0, 0, 0, 5, 0]));
  }, 90_000);

  afterAll(async () => {
    client?.kill();
    server?.kill();
    await Promise.all([client?.exited, server?.exited]);
    await t?.stop();
  });

  const rpcSpans = (pid: number, kind: string, spans: DecodedSpan[] = t!.collected.spans): DecodedSpan[] =>
    spans.filter((s) => s.kind === kind && s.attributes["process.pid"] === pid && s.attributes["rpc.system"] === "grpc");
  const rpcCalls = (metric: string, points: DecodedPoint[] = t!.collected.points) => totalOf(points, metric, (a) => a["rpc.service"] === "test.v1.Echo" && a["server.port"] === port);

  test("each call of the second round is an RPC span on both sides and counted once in the RPC metrics; none as HTTP", async () => {
    const pids = [
      [server.pid, "SPAN_KIND_SERVER", "rpc.server.duration"],
      [client.pid, "SPAN_KIND_CLIENT", "rpc.client.duration"],
    ] as const;
    /* Waiting reads the receiver's own decoding; the assertions read protoc's, from the official protos. */
    await until(() => pids.every(([pid, kind, metric]) => rpcSpans(pid, kind).length >= 5 && rpcCalls(metric) >= 5), "5 RPC spans and counts on each side", 20_000);
    /* A second later: nothing more arrived (each call once). */
    await Bun.sleep(1500);
    const decoded = decodeSpansWithProtoc(t!.collected.traceBodies);
    const points = decodePointsWithProtoc(t!.collected.metricBodies);
    for (const [pid, kind, metric] of pids) {
      const spans = rpcSpans(pid, kind, decoded);
      expect(spans.map((s) => s.name).sort()).toEqual(["test.v1.Echo/Echo", "test.v1.Echo/Echo", "test.v1.Echo/Echo", "test.v1.Echo/Fail", "test.v1.Echo/Stream"]);
      for (const s of spans) {
        expect([s.attributes["rpc.service"], s.attributes["rpc.grpc.status_code"], s.attributes["error.type"], (s.status as { code?: unknown } | undefined)?.code]).toEqual(["test.v1.Echo", undefined, undefined, undefined]);
      }
      expect(rpcCalls(metric, points)).toBe(5);
    }
    const http = decoded.filter((s) => s.attributes["http.request.method"] !== undefined && (s.attributes["server.port"] === port || s.attributes["network.peer.port"] === port));
    expect(http.map((s) => s.name)).toEqual([]);
    expect(totalOf(points, "http.server.request.duration", (a) => a["server.port"] === port)).toBe(0);
    expect(totalOf(points, "http.client.request.duration", (a) => a["server.port"] === port)).toBe(0);
  });
});
