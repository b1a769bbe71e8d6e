/**
 * What the compiled agent answers to requests Bun's HTTP parser refuses before the interface sees them (the known
 * limitation in README "HTTP interface"; test/integration/server/bun-parser.test.ts shows Bun.serve offers no hook):
 * exact bytes over raw TCP, and the agent keeps serving. Requests that do reach the interface get the error object.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { OtlpReceiver } from "../../src/export/receiver";
import { QUIET_CONFIG, spawnAgent, type AgentProcess } from "../helpers/agent-process";
import { json } from "../helpers/wait";
import { rawRequest } from "../reliability/lib/raw-http";

let backend: OtlpReceiver;
let agent: AgentProcess;

beforeAll(async () => {
  backend = new OtlpReceiver({ listen: "127.0.0.1:0" });
  const OTLP_ENDPOINT = `127.0.0.1:${await backend.start()}`;
  agent = await spawnAgent({ config: QUIET_CONFIG.replace("self_telemetry:\n", "self_telemetry:\n  max_body_bytes: 1000\n"), env: { OTLP_ENDPOINT } });
});

afterAll(async () => {
  expect(await agent?.stop()).toBe(0);
  await backend?.stop();
});

/** Writes `bytes` on a fresh connection; resolves with everything received until the server closes it. */
const raw = async (bytes: string): Promise<string> => (await rawRequest(agent.url, bytes, { timeoutMs: 5000 })).raw;

const bodyOf = (answer: string) => answer.slice(answer.indexOf("\r\n\r\n") + 4);

describe("answered by Bun's parser, before the interface: fixed bytes, no error object", () => {
  test.each([
    ["a request line that is not HTTP", "GARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"],
    ["a header line without a colon", "GET /status HTTP/1.1\r\nHost: x\r\nNo-Colon-Line\r\n\r\n", "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"],
    ["headers over the parser's limit", `GET /status HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(200_000)}\r\n\r\n`, "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n"],
    ["HTTP/9.9", "GET /status HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported\r\nConnection: close\r\n\r\n"],
    ["an unknown method token (FOO)", "FOO /status HTTP/1.1\r\nHost: x\r\n\r\n", ""],
  ])("%s", async (_what, request, answer) => {
    expect(await raw(request)).toBe(answer);
    expect((await fetch(`${agent.url}/healthz`)).status).toBe(200);
  });

  test("a declared body beyond Bun's own backstop (16 x max_body_bytes + 64 KiB): 413 with an empty body", async () => {
    const a = await raw(`POST /admin/flush HTTP/1.1\r\nHost: x\r\nContent-Length: ${16 * 1000 + 65536 + 1}\r\n\r\n`);
    expect(a).toStartWith("HTTP/1.1 413 ");
    expect(bodyOf(a)).toBe("");
  });
});

describe("answered by the interface: the error object", () => {
  test("a declared body over max_body_bytes (below the backstop): 413 with the error object", async () => {
    const a = await raw(`POST /admin/flush HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2000\r\n\r\n${"x".repeat(2000)}`);
    expect(a).toStartWith("HTTP/1.1 413 ");
    expect(JSON.parse(bodyOf(a))).toEqual({ error: "invalid_request", message: "request body larger than 1000 bytes", details: { max_body_bytes: 1000 } });
  });

  test.each(["PATCH", "PROPFIND", "DELETE"])("a method token Bun knows (%s) on a served path: 405 with the error object", async (m) => {
    const r = await fetch(`${agent.url}/status`, { method: m });
    expect(r.status).toBe(405);
    expect(Object.keys(await json(r)).sort()).toEqual(["details", "error", "message"]);
  });
});
