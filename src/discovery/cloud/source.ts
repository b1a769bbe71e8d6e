/**
 * `discovery/cloud`: finds the cloud instance the host runs on and publishes cloud.* / host.* resource
 * attributes (source "discovery/cloud"). `auto` reads local hints first and contacts only the provider
 * they name, so a laptop or a test host never sends a packet to a metadata address; a configured
 * provider is contacted directly. Nothing found is provider "none", which is not an error.
 */
import { msOf } from "../../config/units";
import type { TelemetryPipeline } from "../../export/types";
import type { ComponentHost } from "../../lifecycle/host";
import { DiscoverySource, type SourceRun } from "../source";
import type { TaskRegistry } from "../../telemetry/tasks";
import { Backoff, errorText, sleep } from "../backoff";
import type { CloudConfig, CloudProviderSetting } from "./config";
import { providerFromHints, readHints, type CloudProvider } from "./hints";
import { QUERIES, type CloudIdentity } from "./metadata";

export const CLOUD_COMPONENT_ID = "discovery/cloud";
export const CLOUD_INITIAL_BACKOFF_MS = 1_000;
export const CLOUD_MAX_BACKOFF_MS = 300_000;

/** The `cloud` part of the discovery view. */
export interface CloudSnapshot {
  /** aws, gcp, azure, or none when nothing was found (or not looked for). */
  provider: string;
  /** Empty with provider none. */
  region: string;
  /** Empty with provider none. */
  instance_id: string;
}

interface Settings {
  enabled: boolean;
  provider: CloudProviderSetting;
  endpoints: Record<CloudProvider, string>;
  timeoutMs: number;
  hintsRoot: string;
}

function settingsOf(c: CloudConfig): Settings {
  const d = c.cloud;
  return { enabled: d.enabled, provider: d.provider, endpoints: { ...d.endpoints }, timeoutMs: msOf(d, "timeout"), hintsRoot: d.hints_root };
}


export class CloudSource extends DiscoverySource<Settings, CloudConfig> {
  readonly id = CLOUD_COMPONENT_ID;
  #identity: CloudIdentity | undefined;
  /** The last failure of a metadata query (undefined after a success). */
  lastError: string | undefined;

  constructor(
    config: CloudConfig,
    readonly pipeline: TelemetryPipeline,
    readonly tasks: TaskRegistry,
  ) {
    super(settingsOf(config));
  }

  snapshot(): CloudSnapshot {
    const i = this.#identity;
    return i ? { provider: i.provider, region: i.region, instance_id: i.instanceId } : { provider: "none", region: "", instance_id: "" };
  }

  protected readSettings(next: CloudConfig): Settings {
    return settingsOf(next);
  }

  /** Resolves when the current detection attempt loop has produced its first outcome (tests, bench). */
  settled: Promise<void> = Promise.resolve();

  protected begin(host: ComponentHost): SourceRun | undefined {
    const s = this.settings;
    if (!s.enabled) {
      host.report("disabled");
      return undefined;
    }
    let target: CloudProvider | undefined;
    let explicit = false;
    if (s.provider === "auto") {
      target = providerFromHints(readHints(s.hintsRoot));
      host.logger.debug("cloud hints read", { root: s.hintsRoot, provider: target ?? "none" });
    } else if (s.provider !== "none") {
      target = s.provider;
      explicit = true;
    }
    if (!target) {
      host.report("ok");
      return undefined;
    }
    host.report("starting");
    const abort = new AbortController();
    let firstOutcome!: () => void;
    this.settled = new Promise((r) => (firstOutcome = r));
    const endTask = this.tasks.begin(`${CLOUD_COMPONENT_ID} ${target} metadata`);
    const done = this.#loop(host, target, explicit, abort.signal, firstOutcome).finally(() => {
      endTask();
      firstOutcome();
    });
    return { abort, done };
  }

  async #loop(host: ComponentHost, provider: CloudProvider, explicit: boolean, signal: AbortSignal, firstOutcome: () => void): Promise<void> {
    const s = this.settings;
    const backoff = new Backoff(CLOUD_INITIAL_BACKOFF_MS, CLOUD_MAX_BACKOFF_MS);
    while (!signal.aborted) {
      try {
        const identity = await this.tasks.track(`${CLOUD_COMPONENT_ID} ${provider} metadata query`, () => QUERIES[provider](s.endpoints[provider], s.timeoutMs, signal));
        if (signal.aborted) return;
        this.#identity = identity;
        this.lastError = undefined;
        this.pipeline.setResourceAttributes(CLOUD_COMPONENT_ID, identity.attributes);
        host.logger.info("cloud instance found", { provider, region: identity.region, instance_id: identity.instanceId });
        host.report("ok");
        firstOutcome();
        return;
      } catch (e) {
        if (signal.aborted) return;
        this.lastError = errorText(e);
        if (explicit) host.report("recoverable_error", this.lastError);
        else {
          host.logger.warn("cloud metadata not available; provider none", { hinted: provider, reason: this.lastError });
          host.report("ok");
        }
        firstOutcome();
      }
      await sleep(backoff.nextDelayMs(), signal);
    }
  }

  protected forget(): void {
    if (this.#identity) this.pipeline.setResourceAttributes(CLOUD_COMPONENT_ID, {});
    this.#identity = undefined;
    this.lastError = undefined;
  }
}
