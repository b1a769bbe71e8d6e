/** `svc-agent [run]`: loads the configuration, starts the agent, handles signals. */
import { readlinkSync } from "node:fs";
import { Agent } from "../agent/agent";
import { loadConfig, resolveConfigPath } from "../config/load";
import { ConfigError } from "../config/problems";
import { Logger } from "../log/logger";
import { createHttpServerComponent, HTTP_SERVER_ID } from "../server/component";
import { serverDepsOf } from "../server/deps";
import { EXIT } from "./exit";

export interface RunOptions {
  configPath: string | undefined;
  debug: boolean;
  env: Record<string, string | undefined>;
}

/** Runs until a signal stops the agent; resolves with the exit code. */
export async function runCommand(options: RunOptions): Promise<number> {
  let loaded;
  try {
    loaded = loadConfig(resolveConfigPath(options.configPath, options.env), options.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      return EXIT.CONFIG;
    }
    throw e;
  }
  const logger = new Logger();
  const agent = new Agent(loaded, {
    logger,
    env: options.env,
    forceDebug: options.debug,
    serverFactory: (a) => createHttpServerComponent(serverDepsOf(a)),
  });

  const stopped = Promise.withResolvers<number>();
  let signals = 0;
  const onStop = (signal: string) => {
    signals++;
    if (signals > 1) {
      logger.warn("second signal: exiting at once", { signal });
      stopped.resolve(EXIT.RUNTIME);
      return;
    }
    logger.info("signal received: shutting down", { signal });
    agent.shutdown().then(
      () => stopped.resolve(EXIT.OK),
      (e) => {
        logger.error("shutdown failed", { error: (e as Error).message });
        stopped.resolve(EXIT.RUNTIME);
      },
    );
  };
  const onHup = () => {
    logger.info("signal received: reloading", { signal: "SIGHUP" });
    void agent.reload("SIGHUP");
  };
  process.on("SIGTERM", onStop);
  process.on("SIGINT", onStop);
  process.on("SIGHUP", onHup);

  await agent.start();
  const server = agent.status.component(HTTP_SERVER_ID);
  if (server?.state === "permanent_error" || server?.state === "fatal_error") {
    logger.error("the HTTP interface could not start; stopping", { reason: server.reason });
    await agent.shutdown();
    return EXIT.RUNTIME;
  }
  releaseStartupPagesLater(logger, options.env);
  return stopped.promise;
}

/** Start-up work (module evaluation, eBPF loads, the first discovery and TLS scans) is over well within this. */
const STARTUP_PAGES_RELEASE_DELAY_MS = 10_000;

/** The section of a compiled Bun executable that holds the embedded bundle. */
const BUNDLE_SECTION = ".bun";

/**
 * Once start-up is over, drops the executable's pages it touched from the resident set, the embedded bundle's
 * included (ffi/resident.ts).
 */
function releaseStartupPagesLater(logger: Logger, env: Record<string, string | undefined>): void {
  const timer = setTimeout(async () => {
    const { releaseExecutablePages } = await import("../../ffi/resident");
    const { ElfFile } = await import("../collectors/profiling/elf");
    let bundle: { offset: number; size: number } | undefined;
    try {
      using exe = new ElfFile(readlinkSync("/proc/self/exe"));
      bundle = exe.sectionRange(BUNDLE_SECTION);
    } catch {
      // not an ELF file we can read: the read-only mappings only
    }
    const released = releaseExecutablePages(env, bundle);
    logger.debug("start-up pages of the executable released from the resident set", { resident_bytes: released.readOnly + released.bundle, bundle_bytes: released.bundle });
  }, STARTUP_PAGES_RELEASE_DELAY_MS);
  timer.unref();
}
