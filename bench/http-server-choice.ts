/**
 * Why the HTTP interface stays on Bun.serve although its parser answers malformed requests itself (README, "HTTP
 * interface": 400/431/505 with no error object, `FOO /status` closed without an answer).
 *
 * The same Elysia app (one JSON route, like /healthz) is served two ways, each in its own Bun process:
 *   - Bun.serve (`app.listen`, what the agent does);
 *   - Bun's node:http, bridging each request to `app.handle` — the one server in Bun whose `clientError` event sees
 *     the requests its parser refuses, so it could answer them with the error object.
 * For each: which malformed requests reach JavaScript (raw bytes over TCP; a hook fired or not), requests/s with
 * wrk on loopback (one thread, 32 connections; the two servers alternate, short rounds) and the server's CPU per
 * request. The interface's own target (bench/http.ts) is >= 0.8 of a raw Bun.serve.
 *
 * Usage: bun bench/http-server-choice.ts [--seconds 2] [--rounds 6]
 */
import { connect } from "node:net";
import { loadavg } from "node:os";
import { argNumber } from "./lib/args";
import { cpuSeconds } from "./lib/proc";
import { report } from "./lib/report";
import { median } from "./lib/stats";
import { wrkRps } from "./lib/wrk";

const SECONDS = argNumber("seconds", 2);
const ROUNDS = argNumber("rounds", 6);

const SERVER = (kind: "bun-serve" | "node-http") => `
import { Elysia } from "elysia";
const app = new Elysia().get("/healthz", () => ({ status: "ok" }));
let hooked = 0;
if (${JSON.stringify(kind)} === "bun-serve") {
  app.listen({ hostname: "127.0.0.1", port: 0 });
  console.log(app.server.port);
} else {
  const { createServer } = await import("node:http");
  const server = createServer(async (req, res) => {
    const r = await app.handle(new Request("http://127.0.0.1" + req.url, { method: req.method, headers: req.headers }));
    res.writeHead(r.status, Object.fromEntries(r.headers));
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  server.on("clientError", (_e, socket) => {
    hooked++;
    const body = JSON.stringify({ error: "invalid_request", message: "malformed request", details: {} });
    socket.end("HTTP/1.1 400 Bad Request\\r\\ncontent-type: application/json\\r\\ncontent-length: " + body.length + "\\r\\nconnection: close\\r\\n\\r\\n" + body);
  });
  server.listen(0, "127.0.0.1", () => console.log(server.address().port));
}
`;

/** Malformed requests of README's list, as raw bytes. */
const MALFORMED: Array<[string, string]> = [
  ["bad request line", "GET\r\n\r\n"],
  ["header line that is not HTTP", "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"],
  ["HTTP/2.0 request line", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n"],
  ["headers over 64 KiB", `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(70_000)}\r\n\r\n`],
  ["unknown method FOO", "FOO /healthz HTTP/1.1\r\nHost: x\r\n\r\n"],
];

/** Sends raw bytes, returns the first line of the answer and whether it carried a JSON body ("" when closed). */
function raw(port: number, bytes: string): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    const s = connect(port, "127.0.0.1", () => s.write(bytes));
    s.on("data", (d) => (got += d.toString("latin1")));
    s.on("error", () => resolve(got));
    s.on("close", () => resolve(got));
    setTimeout(() => s.destroy(), 2000);
  });
}

async function start(kind: "bun-serve" | "node-http") {
  const p = Bun.spawn([process.execPath, "-e", SERVER(kind)], { stdout: "pipe", stderr: "inherit", cwd: import.meta.dir });
  const reader = p.stdout.getReader();
  const { value } = await reader.read();
  const port = Number(new TextDecoder().decode(value).trim());
  if (!port) throw new Error(`${kind}: no port`);
  return { kind, p, port };
}

const servers = [await start("bun-serve"), await start("node-http")];
try {
  console.log("load average at start:", loadavg().map((l) => l.toFixed(2)).join(" / "));
  console.log("\nmalformed requests: the answer's status line, and whether it carried the error object");
  const withObject: Record<string, number> = { "bun-serve": 0, "node-http": 0 };
  for (const [name, bytes] of MALFORMED) {
    const cells = [];
    for (const s of servers) {
      const a = await raw(s.port, bytes);
      if (a.includes('"error"')) withObject[s.kind]!++;
      cells.push(`${s.kind}: ${a.split("\r\n")[0] || "(closed, no answer)"}${a.includes('"error"') ? " + error object" : ""}`);
    }
    console.log(`  ${name.padEnd(30)} ${cells.join(" | ")}`);
  }
  for (const s of servers) await wrkRps(`http://127.0.0.1:${s.port}/healthz`, { seconds: 1 }); // warm-up
  const rps: Record<string, number[]> = { "bun-serve": [], "node-http": [] };
  const cpu: Record<string, number[]> = { "bun-serve": [], "node-http": [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of r % 2 === 0 ? servers : [...servers].reverse()) {
      const c0 = cpuSeconds(s.p.pid);
      const v = await wrkRps(`http://127.0.0.1:${s.port}/healthz`, { seconds: SECONDS });
      rps[s.kind]!.push(v);
      cpu[s.kind]!.push(((cpuSeconds(s.p.pid) - c0) * 1e6) / (v * SECONDS));
    }
  }
  console.log("\nGET /healthz, same Elysia app, wrk -t1 -c32, medians of", ROUNDS, "alternating rounds of", SECONDS, "s");
  for (const s of servers) console.log(`  ${s.kind.padEnd(10)} ${median(rps[s.kind]!).toFixed(0).padStart(7)} requests/s  ${median(cpu[s.kind]!).toFixed(1).padStart(6)} µs CPU per request`);
  console.log(`  node-http / bun-serve requests/s: ${(median(rps["node-http"]!) / median(rps["bun-serve"]!)).toFixed(2)} (the interface's target against a raw Bun.serve: >= 0.8)`);
  console.log("load average at end:", loadavg().map((l) => l.toFixed(2)).join(" / "));
  report({
    bench: "http-server-choice",
    rows: [
      { name: "GET /healthz, Elysia on Bun's node:http against Elysia on Bun.serve", agent: median(rps["node-http"]!), reference: median(rps["bun-serve"]!), referenceName: "Bun.serve", unit: "requests/s" },
      { name: "GET /healthz, server CPU per request, node:http against Bun.serve", agent: median(cpu["node-http"]!), reference: median(cpu["bun-serve"]!), referenceName: "Bun.serve", unit: "us" },
      { name: `malformed requests answered with the error object, node:http against Bun.serve (of ${MALFORMED.length})`, agent: withObject["node-http"]!, reference: withObject["bun-serve"]!, referenceName: "Bun.serve", unit: "requests" },
    ],
  });
} finally {
  for (const s of servers) s.p.kill();
}
