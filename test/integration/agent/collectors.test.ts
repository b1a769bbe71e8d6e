/**
 * The registered collectors in a real agent: those the configuration leaves off are stand-ins that report
 * `disabled` (feeding the readiness check their components would) and are never loaded; a reload that turns one on
 * loads it, and the component made runs under the new configuration.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COLLECTORS } from "../../../src/collectors/registry";
import type { LazyComponent } from "../../../src/lifecycle/lazy";
import { inProcessAgent, type InProcessAgent } from "../../helpers/in-process";
import { quietConfig } from "../../helpers/quiet-config";

const dir = mkdtempSync(join(tmpdir(), "svc-collectors-int-"));
const logFile = join(dir, "app.log");
const LOGS = `  logs:\n    enabled: true\n    include: [${logFile}]\n    checkpoint_file: ${join(dir, "checkpoint.json")}\n`;
let t: InProcessAgent;

const standIn = (id: string) => t.agent.supervisor.components.find((c) => c.id === id) as LazyComponent;

beforeAll(async () => {
  writeFileSync(logFile, "");
  t = await inProcessAgent(quietConfig(), { backend: false });
});

afterAll(async () => {
  await t?.stop();
});

describe("registered collectors", () => {
  test("off: every registered id reports disabled with its readiness check, and nothing was loaded", () => {
    for (const entry of COLLECTORS)
      for (const id of entry.ids) {
        expect({ id, state: t.agent.status.component(id)?.state, readiness: t.agent.status.component(id)?.readiness }).toEqual({ id, state: "disabled", readiness: entry.readiness });
        expect({ id, loaded: standIn(id).loaded }).toEqual({ id, loaded: undefined });
      }
  });

  test("a reload that turns logs on loads that collector alone; its component runs", async () => {
    t.writeConfig(quietConfig({ agent: LOGS }));
    const outcome = await t.agent.reload("test");
    expect(outcome).toEqual(expect.objectContaining({ ok: true }));
    expect(standIn("collector/logs").loaded?.id).toBe("collector/logs");
    expect(t.agent.status.component("collector/logs")?.state).toBe("ok");
    for (const id of COLLECTORS.flatMap((e) => e.ids).filter((i) => i !== "collector/logs")) expect({ id, loaded: standIn(id).loaded }).toEqual({ id, loaded: undefined });
  });
});
