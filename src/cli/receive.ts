/**
 * `svc-agent receive --listen ADDR [--output FILE]`: runs an OTLP/gRPC receiver until SIGINT/SIGTERM, prints a
 * summary line per request to standard output and, with --output, appends each request as a JSON line.
 */
import type { ParsedArgs } from "./args";
import { UsageError } from "./args";
import { EXIT } from "./exit";
import type { Signal } from "../export/config";
import type { ReceivedRequest } from "../export/receiver/server";

export const RECEIVE_HELP = `Usage: svc-agent receive --listen ADDR [--output FILE]

Runs a small OTLP/gRPC receiver (traces, metrics, logs, profiles) for testing a pipeline on one machine.
It prints one summary line per request to standard output:
  <time> <signal> <n> <items> resources=<r> scopes=<s> bytes=<b> encoding=<gzip|identity> peer=<addr>
and, with --output, appends every request to FILE as a JSON line:
  {"time", "signal", "items", "bytes", "encoding", "peer", "metadata", "request": <the decoded request>}
(trace and span ids in hex, 64-bit integers as strings). Stops on SIGINT or SIGTERM.

Options:
  --listen ADDR   host:port to listen on, e.g. 127.0.0.1:4317 (port 0 picks a free port; the
                  first line printed says which)
  --output FILE   also write each request as a JSON line to FILE (appended)

Example: svc-agent receive --listen 127.0.0.1:4317 --output /tmp/otlp.jsonl
`;

const NOUNS: Record<Signal, string> = { traces: "spans", metrics: "data_points", logs: "log_records", profiles: "profiles" };
const ADDRESS_RE = /^(\[[0-9a-fA-F:.]+\]|[^:\s/]+):\d{1,5}$/;

export async function receiveCommand(args: ParsedArgs): Promise<number> {
  const listen = args.flags.listen;
  if (typeof listen !== "string") throw new UsageError("receive needs --listen ADDR (host:port)");
  if (!ADDRESS_RE.test(listen)) throw new UsageError(`--listen: expected host:port, got ${JSON.stringify(listen)}`);
  if (args.positionals.length) throw new UsageError(`unexpected argument ${JSON.stringify(args.positionals[0])}`);
  const outputPath = typeof args.flags.output === "string" ? args.flags.output : undefined;
  const output = outputPath ? Bun.file(outputPath).writer() : undefined;
  if (outputPath) await Bun.write(outputPath, "");
  // Loaded here, not at the agent's start: the receiver brings in @grpc/grpc-js (see export/transport-select.ts).
  const { OtlpReceiver, decodeRequest } = require("../export/receiver/server") as typeof import("../export/receiver/server");
  const receiver = new OtlpReceiver({
    listen,
    onRequest: (r) => {
      process.stdout.write(summaryLine(r) + "\n");
      if (output) {
        output.write(JSON.stringify(jsonRecord(r, decodeRequest)) + "\n");
        void output.flush();
      }
    },
  });
  let port: number;
  try {
    port = await receiver.start();
  } catch (e) {
    process.stderr.write(`svc-agent receive: cannot listen on ${listen}: ${(e as Error).message}\n`);
    return EXIT.RUNTIME;
  }
  const host = listen.slice(0, listen.lastIndexOf(":"));
  process.stdout.write(`svc-agent receive: listening on ${host}:${port}${outputPath ? `, writing ${outputPath}` : ""}\n`);
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  await receiver.stop();
  if (output) await output.end();
  return EXIT.OK;
}

export function summaryLine(r: ReceivedRequest): string {
  return `${r.receivedAt.toISOString()} ${r.signal} ${r.items} ${NOUNS[r.signal]} resources=${r.resources} scopes=${r.scopes} bytes=${r.body.length} encoding=${r.encoding} peer=${r.peer}`;
}

function jsonRecord(r: ReceivedRequest, decodeRequest: (signal: ReceivedRequest["signal"], body: Uint8Array) => unknown): Record<string, unknown> {
  const metadata = Object.fromEntries(Object.entries(r.metadata).filter(([k]) => !k.startsWith("grpc-") && k !== "user-agent" && k !== "content-type"));
  return {
    time: r.receivedAt.toISOString(),
    signal: r.signal,
    items: r.items,
    bytes: r.body.length,
    encoding: r.encoding,
    peer: r.peer,
    metadata,
    request: decodeRequest(r.signal, r.body),
  };
}
