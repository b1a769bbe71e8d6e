/**
 * Raw HTTP/1.1 over node:net sockets, for requests no well-behaved client sends (bad request lines, invalid
 * UTF-8, traversal paths kept verbatim, trickled bytes) and for choosing the source address (localAddress).
 */
import { connect, type Socket } from "node:net";

export interface RawAnswer {
  /** 0 when the server closed without answering. */
  status: number;
  headers: Record<string, string>;
  body: string;
  /** Bytes received in total. */
  raw: string;
}

export function hostPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

/** Parses the first answer in `raw` (Content-Length or chunked bodies). */
export function parseAnswer(raw: string): RawAnswer {
  const end = raw.indexOf("\r\n\r\n");
  if (end === -1) return { status: 0, headers: {}, body: "", raw };
  const lines = raw.slice(0, end).split("\r\n");
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    if (i > 0) headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = raw.slice(end + 4);
  if (headers["transfer-encoding"] === "chunked") {
    let out = "";
    let rest = body;
    for (;;) {
      const nl = rest.indexOf("\r\n");
      if (nl === -1) break;
      const n = parseInt(rest.slice(0, nl), 16);
      if (!n) break;
      out += rest.slice(nl + 2, nl + 2 + n);
      rest = rest.slice(nl + 2 + n + 2);
    }
    body = out;
  } else if (headers["content-length"] !== undefined) body = body.slice(0, Number(headers["content-length"]));
  return { status, headers, body, raw };
}

export interface RawOptions {
  timeoutMs?: number;
  localAddress?: string;
}

/** Sends `data` on a new connection and resolves with what came back when the server closes (or at the timeout). */
export function rawRequest(url: string, data: string | Buffer, o: RawOptions = {}): Promise<RawAnswer> {
  const { host, port } = hostPort(url);
  return new Promise((resolve) => {
    const s = connect({ host, port, ...(o.localAddress ? { localAddress: o.localAddress } : {}) });
    const chunks: Buffer[] = [];
    const done = () => resolve(parseAnswer(Buffer.concat(chunks).toString("latin1")));
    s.on("data", (d: Buffer) => chunks.push(d));
    s.on("error", () => {});
    s.on("close", done);
    s.setTimeout(o.timeoutMs ?? 10_000, () => s.destroy());
    s.write(typeof data === "string" ? Buffer.from(data, "latin1") : data);
  });
}

/** A GET/POST request line with Connection: close. */
export function requestText(method: string, path: string, headers: Record<string, string> = {}, body = ""): string {
  const h: Record<string, string> = { host: "127.0.0.1", connection: "close", ...headers };
  if (body) h["content-length"] = String(Buffer.byteLength(body, "latin1"));
  return `${method} ${path} HTTP/1.1\r\n${Object.entries(h)
    .map(([k, v]) => `${k}: ${v}`)
    .join("\r\n")}\r\n\r\n${body}`;
}

/** Opens a connection and resolves once connected (the caller writes and closes). */
export function openSocket(url: string, localAddress?: string): Promise<Socket> {
  const { host, port } = hostPort(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host, port, ...(localAddress ? { localAddress } : {}) }, () => resolve(s));
    s.once("error", reject);
  });
}

export interface PacedResult {
  codes: Record<string, number>;
  /** Seconds from the first request sent to the last one sent. */
  seconds: number;
  /** Requests per second actually offered. */
  offered: number;
}

/**
 * Sends `total` keep-alive GETs of `path` at `perSecond` on one connection (optionally from `localAddress`),
 * each after the previous answer (and not before its slot), and counts the statuses.
 */
export async function pacedGets(url: string, path: string, total: number, perSecond: number, localAddress?: string): Promise<PacedResult> {
  const s = await openSocket(url, localAddress);
  s.setNoDelay(true);
  let buffer = "";
  let waiting: ((status: number) => void) | undefined;
  s.on("data", (d) => {
    buffer += d.toString("latin1");
    for (;;) {
      const end = buffer.indexOf("\r\n\r\n");
      if (end === -1) return;
      const head = buffer.slice(0, end);
      const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
      if (buffer.length < end + 4 + length) return;
      buffer = buffer.slice(end + 4 + length);
      const status = Number(head.slice(9, 12));
      const w = waiting;
      waiting = undefined;
      w?.(status);
    }
  });
  const codes: Record<string, number> = {};
  const intervalMs = 1000 / perSecond;
  const request = `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
  const start = performance.now();
  let last = start;
  for (let i = 0; i < total; i++) {
    const slot = start + i * intervalMs;
    const now = performance.now();
    if (slot > now + 1) await Bun.sleep(slot - now);
    last = performance.now();
    const status = await new Promise<number>((resolve) => {
      waiting = resolve;
      s.write(request);
    });
    codes[status] = (codes[status] ?? 0) + 1;
  }
  s.destroy();
  const seconds = (last - start) / 1000;
  return { codes, seconds, offered: total / seconds };
}
