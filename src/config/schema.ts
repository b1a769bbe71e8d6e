/**
 * The configuration document: each section's schema is owned by its component and composed here. The
 * collectors' keys (`agent.<collector>`, `agent.ebpf.<set>`) are owned by their folders and registered in
 * src/collectors/registry.ts; ./document.ts composes the whole document from both. `Config` is the document as
 * the agent's core reads it: every section but the collectors' keys, which only their own collector reads
 * (`keysIn`, ./compose.ts).
 * Validation order (see load.ts): defaults -> YAML with ${VAR} expansion -> environment overrides -> check.
 */
import { Type, type Static, type TProperties } from "@sinclair/typebox";
import { LogSectionSchema } from "../log/config";
import { SelfTelemetrySchema, validateSelfTelemetry } from "../server/config";
import { BackoffSchema, OtlpSchema, QueuesSchema, StorageSchema, validateExport, validateStorage } from "../export/config";
import { ebpfSchema, validateEbpf } from "../ebpf/config";
import { DiscoverySchema, validateDiscovery } from "../discovery/config";
import { MemoryLimitSchema, validateMemoryLimit } from "../memory/config";
import { Duration, msOf } from "./units";
import type { ConfigProblem } from "./problems";

/** The document with `collectors`' keys in `agent` and the program sets' (`sets`) in `agent.ebpf`. */
export function configSchema<C extends TProperties, S extends TProperties>(collectors: C, sets: S) {
  return Type.Object(
    {
      mode: Type.Literal("agent", { default: "agent", description: "Operating mode; only agent exists." }),
      service_name: Type.String({ default: "svc-agent", minLength: 1, description: "service.name of the agent's own resource (self-tracing, anything about the agent itself; it also carries telemetry.sdk.*). Env: OTEL_SERVICE_NAME. Telemetry about other processes is exported under each workload's resource, its service.name the first of: OTEL_SERVICE_NAME, then service.name in OTEL_RESOURCE_ATTRIBUTES, of the process's own environment; the pod's app.kubernetes.io/name label; the owning Deployment, StatefulSet, DaemonSet, CronJob or Job; the container name; the executable name." }),
      resource_attributes: Type.Record(Type.String(), Type.String(), {
        default: {},
        description: "Further attributes of the agent's own resource (never of a workload's). Env: OTEL_RESOURCE_ATTRIBUTES (key=value,... merged over these; its service.name sets service_name).",
      }),
      shutdown_timeout: Duration("10s", "How long SIGTERM waits for queues to drain before exiting."),
      svc: LogSectionSchema,
      self_telemetry: SelfTelemetrySchema,
      otlp: OtlpSchema,
      queues: QueuesSchema,
      backoff: BackoffSchema,
      storage: StorageSchema,
      agent: Type.Object(
        {
          ebpf: ebpfSchema(sets),
          ...collectors,
          discovery: DiscoverySchema,
          memory_limit: MemoryLimitSchema,
        },
        { additionalProperties: false, default: {} },
      ),
    },
    { additionalProperties: false },
  );
}

/** The running configuration as the core reads it: every key present, defaults filled in; not the collectors' keys. */
export type Config = Static<ReturnType<typeof configSchema<{}, {}>>>;

/** Cross-field rules of the whole document; each component's rules live beside its schema, the collectors' are `collectors`. */
export function validateConfig(c: Config, collectors: (agent: Config["agent"]) => ConfigProblem[]): ConfigProblem[] {
  const problems = [
    ...validateSelfTelemetry(c.self_telemetry),
    ...validateExport(c.otlp, c.queues, c.backoff),
    ...validateStorage(c.storage, c.queues),
    ...validateEbpf(c.agent.ebpf),
    ...collectors(c.agent),
    ...validateDiscovery(c.agent.discovery),
    ...validateMemoryLimit(c.agent.memory_limit),
  ];
  if ("service.name" in c.resource_attributes) problems.push({ path: "resource_attributes", message: "service.name is set by service_name (OTEL_SERVICE_NAME), not here" });
  if (msOf(c, "shutdown_timeout") <= 0) problems.push({ path: "shutdown_timeout", message: "must be greater than 0" });
  return problems;
}
