/**
 * Workload identity: which service every signal about a process belongs to. The registry resolves, once per
 * process image, `service.name` (OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES of the process, the pod's
 * app.kubernetes.io/name label, the owning workload, the container name, the executable name), service.namespace,
 * service.instance.id, process.*, container.* and k8s.*, and hands collectors one resource object per workload
 * (`ctx.workloads.forPid`). The host and cloud attributes are added by the export pipeline's host layer.
 */
export { WorkloadRegistry, type WorkloadRegistryOptions } from "./registry";
export { identityAttributes, containerIdentityAttributes, serviceNameOf, UNKNOWN_SERVICE, UNKNOWN_WORKLOAD, APP_NAME_LABEL, APP_NAME_ATTRIBUTE, OWNER_ATTRIBUTES, type IdentityInput, type ServiceNameSource } from "./identity";
export { EnvironReader, otelEnvironmentOf, parseResourceAttributes, ENVIRON_READ_BYTES, type OtelEnvironment } from "./environ";
