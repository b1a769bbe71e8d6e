/**
 * Start to the first GET /healthz 200 of compiled agents on the embedded defaults, the binaries alternating: a tool
 * (in bench/lib, not run by bench/run.ts) to weigh a start-up change against the build before it, which separate
 * runs of bench/footprint.ts cannot resolve (the host moves a start by tens of ms between minutes). Each start:
 * src/config/default.yaml with the listen address on a free loopback port and the OTLP endpoint on a loopback port
 * that refuses (start-up does not wait for a backend), spawned, /healthz polled every 1 ms from spawn, then SIGTERM.
 * Prints each round's starts per binary and the medians over all rounds.
 *
 * Usage: bun bench/lib/first-answer.ts BINARY [BINARY ...] [--rounds R] [--starts S]   (root, for eBPF)
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { closedLoopbackPort as freePort } from "../../test/helpers/ports";
import { argNumber } from "./args";
import { median } from "./stats";

const ROUNDS = argNumber("rounds", 6);
const STARTS = argNumber("starts", 3);
const POLL_MS = 1;
const TIMEOUT_MS = 10_000;

const binaries = process.argv.slice(2).filter((a, i, all) => !a.startsWith("--") && !all[i - 1]?.startsWith("--"));
if (binaries.length === 0) throw new Error("usage: bun bench/lib/first-answer.ts BINARY [BINARY ...] [--rounds R] [--starts S]");

async function firstAnswerMs(binary: string, config: string, port: number): Promise<number> {
  const t0 = performance.now();
  const proc = Bun.spawn([binary, "--config", config], { stdout: "ignore", stderr: "ignore", env: { PATH: process.env.PATH ?? "" } });
  try {
    for (;;) {
      const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
        async (r) => (await r.body?.cancel(), r.status === 200),
        () => false,
      );
      if (ok) return performance.now() - t0;
      if (performance.now() - t0 > TIMEOUT_MS) throw new Error(`${binary}: no /healthz 200 within ${TIMEOUT_MS} ms`);
      await Bun.sleep(POLL_MS);
    }
  } finally {
    proc.kill("SIGTERM");
    await proc.exited;
  }
}

const dir = mkdtempSync(join(tmpdir(), "svc-first-answer-"));
const all = new Map<string, number[]>(binaries.map((b) => [b, []]));
try {
  const defaults = readFileSync(resolve(import.meta.dir, "../../src/config/default.yaml"), "utf8");
  console.log(`load average at start: ${loadavg().map((x) => x.toFixed(2)).join(", ")}`);
  for (let round = 0; round < ROUNDS; round++) {
    for (const binary of binaries) {
      const ms: number[] = [];
      for (let i = 0; i < STARTS; i++) {
        const port = freePort();
        const config = join(dir, "config.yaml");
        const text = defaults.replace(/listen: "?:19090"?/, `listen: 127.0.0.1:${port}`).replace(/endpoint: 127\.0\.0\.1:4317/, `endpoint: 127.0.0.1:${freePort()}`);
        if (!text.includes(`127.0.0.1:${port}`)) throw new Error("src/config/default.yaml: listen address not found");
        writeFileSync(config, text);
        ms.push(await firstAnswerMs(binary, config, port));
        await Bun.sleep(200);
      }
      all.get(binary)!.push(...ms);
      console.log(`round ${round + 1} ${binary}: ${ms.map((x) => x.toFixed(0)).join(", ")} ms`);
    }
  }
  for (const [binary, ms] of all) console.log(`${binary}: median ${median(ms).toFixed(1)} ms over ${ms.length} starts (${Math.min(...ms).toFixed(0)}-${Math.max(...ms).toFixed(0)})`);
  console.log(`load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(", ")}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
