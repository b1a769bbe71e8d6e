/**
 * The whole configuration: each section's schema is owned by its component and composed here.
 * Validation order (see load.ts): defaults -> YAML with ${VAR} expansion -> environment overrides -> check.
 */
import { Type, type Static } from "@sinclair/typebox";
import { LogSectionSchema } from "../log/config";
import { SelfTelemetrySchema, validateSelfTelemetry } from "../server/config";
import { BackoffSchema, OtlpSchema, QueuesSchema, StorageSchema, validateExport, validateStorage } from "../export/config";
import { ebpfSchema, validateEbpf } from "../ebpf/config";
import { CollectorKeys, EbpfSetKeys, validateCollectors } from "../collectors/config";
import { DiscoverySchema, validateDiscovery } from "../discovery/config";
import { MemoryLimitSchema, validateMemoryLimit } from "../memory/config";
import { Duration, msOf } from "./units";
import type { ConfigProblem } from "./problems";

export const AgentSectionSchema = Type.Object(
  {
    ebpf: ebpfSchema(EbpfSetKeys),
    ...CollectorKeys,
    discovery: DiscoverySchema,
    memory_limit: MemoryLimitSchema,
  },
  { additionalProperties: false, default: {} },
);

export const ConfigSchema = Type.Object(
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
    agent: AgentSectionSchema,
  },
  { additionalProperties: false },
);

/** The running configuration: every key present, defaults filled in. */
export type Config = Static<typeof ConfigSchema>;

/** Cross-field rules of the whole document; each component's rules live beside its schema. */
export function validateConfig(c: Config): ConfigProblem[] {
  const problems = [
    ...validateSelfTelemetry(c.self_telemetry),
    ...validateExport(c.otlp, c.queues, c.backoff),
    ...validateStorage(c.storage, c.queues),
    ...validateEbpf(c.agent.ebpf),
    ...validateCollectors(c.agent),
    ...validateDiscovery(c.agent.discovery),
    ...validateMemoryLimit(c.agent.memory_limit),
  ];
  if ("service.name" in c.resource_attributes) problems.push({ path: "resource_attributes", message: "service.name is set by service_name (OTEL_SERVICE_NAME), not here" });
  if (msOf(c, "shutdown_timeout") <= 0) problems.push({ path: "shutdown_timeout", message: "must be greater than 0" });
  return problems;
}
