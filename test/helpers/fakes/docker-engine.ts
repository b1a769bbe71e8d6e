/**
 * A fake Docker Engine API on a unix socket (Bun.serve `unix`) for discovery tests that need control the
 * real dockerd does not give: a list answer held back while events arrive, streams closed on demand,
 * published ports. Paths and shapes follow the Engine API v1.41 (/containers/json, /containers/{id}/json,
 * /events). Requests are counted per path.
 */
import type { Server } from "bun";

export interface FakeContainer {
  id: string;
  name: string;
  image: string;
  labels?: Record<string, string>;
  pid?: number;
  /** host port -> container port */
  published?: Record<number, number>;
}

export class FakeDockerEngine {
  readonly server: Server<undefined>;
  readonly containers = new Map<string, FakeContainer>();
  readonly requests = new Map<string, number>();
  #streams = new Set<ReadableStreamDefaultController<Uint8Array>>();
  /** GET /containers/json answers 500 this many more times. */
  failLists = 0;
  /** When set, GET /containers/json waits for this promise before answering. */
  holdList: Promise<void> | undefined;

  constructor(readonly socket: string) {
    this.server = Bun.serve({ unix: socket, fetch: (req) => this.#handle(req) });
  }

  get openStreams(): number {
    return this.#streams.size;
  }

  /** Adds a running container and emits `start`. */
  start(c: FakeContainer): void {
    this.containers.set(c.id, c);
    this.emit("start", c);
  }

  /** Emits an event for a container (removing it on die/destroy). */
  emit(action: "start" | "die" | "destroy" | "rename", c: FakeContainer, extra: Record<string, string> = {}): void {
    if (action === "die" || action === "destroy") this.containers.delete(c.id);
    const ev = { Type: "container", Action: action, Actor: { ID: c.id, Attributes: { name: c.name, image: c.image, ...extra } }, time: Math.floor(Date.now() / 1000) };
    const line = new TextEncoder().encode(JSON.stringify(ev) + "\n");
    for (const s of this.#streams) s.enqueue(line);
  }

  /** Ends every event stream (as a daemon restart would). */
  closeStreams(): void {
    for (const s of [...this.#streams]) {
      this.#streams.delete(s);
      try {
        s.close();
      } catch {
        // already closed by the client
      }
    }
  }

  stop(): void {
    this.closeStreams();
    this.server.stop(true);
  }

  async #handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname.replace(/^\/v[\d.]+/, "");
    const key = path.startsWith("/containers/") && path !== "/containers/json" ? "/containers/{id}/json" : path;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
    if (path === "/containers/json") {
      if (this.failLists > 0) {
        this.failLists--;
        return Response.json({ message: "injected list failure" }, { status: 500 });
      }
      const snapshot = [...this.containers.values()];
      if (this.holdList) await this.holdList;
      return Response.json(
        snapshot.map((c) => ({
          Id: c.id,
          Names: [`/${c.name}`],
          Image: c.image,
          ImageID: "sha256:0",
          Labels: c.labels ?? {},
          State: "running",
          Ports: Object.entries(c.published ?? {}).map(([host, port]) => ({ PrivatePort: port, PublicPort: Number(host), Type: "tcp", IP: "0.0.0.0" })),
        })),
      );
    }
    const m = /^\/containers\/([^/]+)\/json$/.exec(path);
    if (m) {
      const c = this.containers.get(m[1]!);
      if (!c) return Response.json({ message: `No such container: ${m[1]}` }, { status: 404 });
      const ports: Record<string, Array<{ HostIp: string; HostPort: string }>> = {};
      for (const [host, port] of Object.entries(c.published ?? {})) ports[`${port}/tcp`] = [{ HostIp: "0.0.0.0", HostPort: host }];
      return Response.json({ Id: c.id, Name: `/${c.name}`, Image: "sha256:0", State: { Running: true, Pid: c.pid ?? 0 }, Config: { Image: c.image, Labels: c.labels ?? {} }, NetworkSettings: { Ports: ports } });
    }
    if (path === "/events") {
      let ctl!: ReadableStreamDefaultController<Uint8Array>;
      const body = new ReadableStream<Uint8Array>({
        start: (c) => {
          ctl = c;
          this.#streams.add(c);
          // Bun.serve sends the headers of a streamed answer with its first chunk; dockerd flushes them at once.
          c.enqueue(new TextEncoder().encode("\n"));
        },
        cancel: () => {
          this.#streams.delete(ctl);
        },
      });
      return new Response(body, { headers: { "content-type": "application/json", "transfer-encoding": "chunked" } });
    }
    return Response.json({ message: "page not found" }, { status: 404 });
  }
}
