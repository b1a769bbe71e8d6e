/**
 * Builds dist/svc-agent, one self-contained executable:
 *   1. generated inputs (BPF objects compiled with clang against the build machine's BTF; see ffi/bpf),
 *   2. `bun build --compile` of src/main.ts with the build identity defined.
 * Files imported `with { type: "file" }` (BPF objects, .proto definitions, the default configuration)
 * are embedded in the binary.
 * Memory: --splitting puts what the code loads on demand (`await import()`, a `require()` inside a function: the
 * Kubernetes client, the diagnostics tar writer, libbpf's bindings ...) in chunks of their own, evaluated only when
 * loaded; bytecode-order.txt lays the bytecode out with the functions a run of the embedded defaults used first, so
 * that the pages the agent touches are few and together. `bun run build.ts --record-bytecode-order [SECONDS]`
 * (root, for eBPF) rewrites it from a run of the built binary with the embedded defaults exporting to
 * `svc-agent receive` on loopback (so that the export path, run every period after start-up, is laid out with the
 * rest); a stale entry is ignored (entries are hashes of function contents), so the file only needs refreshing
 * after large changes.
 */
import { $ } from "bun";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startReceiver } from "./bench/lib/agent";
import pkg from "./package.json" with { type: "json" };

const OUTFILE = "dist/svc-agent";
const BYTECODE_ORDER = "bytecode-order.txt";
/** How long the recording run lasts by default: start-up, then several network metrics periods (15 s) and exports. */
const RECORD_SECONDS = 60;

async function commitId(): Promise<string> {
  const r = await $`git rev-parse --short=12 HEAD`.nothrow().quiet();
  if (r.exitCode !== 0) return "unknown";
  const dirty = (await $`git status --porcelain --untracked-files=no`.nothrow().quiet()).stdout.toString().trim();
  return r.stdout.toString().trim() + (dirty ? "-dirty" : "");
}

/** Steps that generate embedded inputs; each is a module under the folder that owns it. */
const GENERATORS: Array<{ name: string; module: string }> = [{ name: "bpf objects and embedded libbpf", module: "./ffi/bpf/generate.ts" }, { name: "Helm chart values schema", module: "./deploy/helm/values-schema.ts" }];

async function main(): Promise<void> {
  mkdirSync("dist", { recursive: true });
  for (const g of GENERATORS) {
    const started = performance.now();
    const mod = (await import(g.module)) as { generate(): Promise<void> };
    await mod.generate();
    console.log(`build: ${g.name} (${Math.round(performance.now() - started)} ms)`);
  }
  const defines = {
    SVC_BUILD_VERSION: JSON.stringify(pkg.version),
    SVC_BUILD_COMMIT: JSON.stringify(await commitId()),
    SVC_BUILD_TIME: JSON.stringify(new Date().toISOString()),
  };
  const defineArgs = Object.entries(defines).flatMap(([k, v]) => ["--define", `${k}=${v}`]);
  await compile(defineArgs);
  const record = process.argv.indexOf("--record-bytecode-order");
  if (record >= 0) {
    await recordBytecodeOrder(Number(process.argv[record + 1] ?? RECORD_SECONDS));
    await compile(defineArgs);
  }
}

async function compile(defineArgs: string[]): Promise<void> {
  const started = performance.now();
  // The source maps bun build writes beside the binary (one per chunk, named by its hash; the binary carries its own
  // inline): those of earlier builds would pile up in dist/.
  for (const name of readdirSync("dist")) if (name.endsWith(".map")) rmSync(join("dist", name));
  const order = existsSync(BYTECODE_ORDER) ? [`--bytecode-order=${BYTECODE_ORDER}`] : [];
  // --bytecode: JavaScriptCore bytecode precompiled at build time; measured start to /healthz ~500 ms -> ~170 ms.
  const r = await $`${process.execPath} build --compile --bytecode --splitting ${order} --format=esm --minify-syntax --sourcemap=inline src/main.ts --outfile ${OUTFILE} ${defineArgs}`.nothrow();
  if (r.exitCode !== 0) {
    console.error("build: bun build --compile failed");
    process.exit(r.exitCode);
  }
  console.log(`build: ${OUTFILE} (${Math.round(performance.now() - started)} ms)`);
}

/** Runs the built binary with the embedded defaults (loopback listen, exports to a receiver of its own on loopback)
 * for `seconds`, recording the functions it runs in order (BUN_BYTECODE_ORDER_OUT, written at exit) into
 * BYTECODE_ORDER. */
async function recordBytecodeOrder(seconds: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "svc-build-order-"));
  const receiver = await startReceiver();
  try {
    const endpoint = receiver.address;
    const config = join(dir, "config.yaml");
    const defaults = readFileSync("src/config/default.yaml", "utf8").replace(/listen: "?:19090"?/, "listen: 127.0.0.1:0").replace(/endpoint: 127\.0\.0\.1:4317/, `endpoint: ${endpoint}`);
    if (!defaults.includes("127.0.0.1:0")) throw new Error("src/config/default.yaml: self_telemetry.listen not found");
    if (!defaults.includes(endpoint)) throw new Error("src/config/default.yaml: otlp.endpoint not found");
    writeFileSync(config, defaults);
    const out = join(dir, "order.txt");
    const proc = Bun.spawn([OUTFILE, "--config", config], { stdout: "ignore", stderr: "ignore", env: { ...process.env, BUN_BYTECODE_ORDER_OUT: out } });
    await Bun.sleep(seconds * 1000);
    proc.kill("SIGTERM");
    await proc.exited;
    if (!existsSync(out)) throw new Error(`no bytecode order written by ${OUTFILE}`);
    writeFileSync(BYTECODE_ORDER, readFileSync(out));
    console.log(`build: ${BYTECODE_ORDER} recorded from ${seconds} s of ${OUTFILE} with the embedded defaults, exporting to ${endpoint}`);
  } finally {
    await receiver.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
