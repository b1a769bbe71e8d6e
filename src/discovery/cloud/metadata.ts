/**
 * Instance metadata clients: AWS IMDSv2 (token PUT, then GETs carrying the token), GCP
 * (`Metadata-Flavor: Google`) and Azure IMDS (`Metadata: true`, api-version). Each request is bounded by
 * the configured timeout; the answers become cloud.* and host.* resource attributes.
 */
import type { Attributes } from "../../export/types";
import type { CloudProvider } from "./hints";

export const AWS_TOKEN_TTL_S = 21_600;
export const AZURE_API_VERSION = "2021-02-01";

export interface CloudIdentity {
  provider: CloudProvider;
  region: string;
  instanceId: string;
  attributes: Attributes;
}

/** A metadata service did not answer as expected; `message` says which step and why. */
export class MetadataError extends Error {
  constructor(
    readonly provider: CloudProvider,
    message: string,
  ) {
    super(`${provider}: ${message}`);
    this.name = "MetadataError";
  }
}

async function request(provider: CloudProvider, step: string, url: string, init: RequestInit, timeoutMs: number, signal: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { ...init, redirect: "error", signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) });
  } catch (e) {
    if (signal.aborted) throw e;
    const err = e as { name?: string; code?: string; message?: string };
    const why = err.name === "TimeoutError" ? `timed out after ${timeoutMs}ms` : (err.code ?? err.message ?? String(e));
    throw new MetadataError(provider, `${step}: ${why}`);
  }
  if (!res.ok) {
    await res.body?.cancel().catch(() => undefined);
    throw new MetadataError(provider, `${step}: HTTP ${res.status}`);
  }
  return res;
}

async function json<T>(provider: CloudProvider, step: string, res: Response): Promise<T> {
  try {
    return (await res.json()) as T;
  } catch {
    throw new MetadataError(provider, `${step}: answer is not JSON`);
  }
}

const trimBase = (base: string) => base.replace(/\/+$/, "");

/** AWS: PUT /latest/api/token, then GET /latest/dynamic/instance-identity/document with the token. No IMDSv1 fallback. */
export async function queryAws(base: string, timeoutMs: number, signal: AbortSignal): Promise<CloudIdentity> {
  const b = trimBase(base);
  const tokenRes = await request("aws", "IMDSv2 token", `${b}/latest/api/token`, { method: "PUT", headers: { "X-aws-ec2-metadata-token-ttl-seconds": String(AWS_TOKEN_TTL_S) } }, timeoutMs, signal);
  const token = (await tokenRes.text()).trim();
  if (!token) throw new MetadataError("aws", "IMDSv2 token: empty token");
  const docRes = await request("aws", "identity document", `${b}/latest/dynamic/instance-identity/document`, { headers: { "X-aws-ec2-metadata-token": token } }, timeoutMs, signal);
  const doc = await json<{ region?: string; availabilityZone?: string; accountId?: string; instanceId?: string; instanceType?: string; imageId?: string }>("aws", "identity document", docRes);
  if (!doc.instanceId || !doc.region) throw new MetadataError("aws", "identity document: no instanceId or region");
  const attributes: Attributes = { "cloud.provider": "aws", "cloud.platform": "aws_ec2", "cloud.region": doc.region, "host.id": doc.instanceId };
  if (doc.availabilityZone) attributes["cloud.availability_zone"] = doc.availabilityZone;
  if (doc.accountId) attributes["cloud.account.id"] = doc.accountId;
  if (doc.instanceType) attributes["host.type"] = doc.instanceType;
  if (doc.imageId) attributes["host.image.id"] = doc.imageId;
  return { provider: "aws", region: doc.region, instanceId: doc.instanceId, attributes };
}

/** GCP: GET /computeMetadata/v1/instance/?recursive=true, /instance/id and /project/project-id with Metadata-Flavor: Google. */
export async function queryGcp(base: string, timeoutMs: number, signal: AbortSignal): Promise<CloudIdentity> {
  const b = trimBase(base);
  const headers = { "Metadata-Flavor": "Google" };
  const res = await request("gcp", "instance", `${b}/computeMetadata/v1/instance/?recursive=true`, { headers }, timeoutMs, signal);
  if (res.headers.get("metadata-flavor") !== "Google") {
    await res.body?.cancel().catch(() => undefined);
    throw new MetadataError("gcp", "instance: answer lacks Metadata-Flavor: Google");
  }
  const inst = await json<{ zone?: string; machineType?: string; name?: string }>("gcp", "instance", res);
  // The instance id is a uint64 that JSON numbers cannot hold exactly: read it as text.
  const idRes = await request("gcp", "instance id", `${b}/computeMetadata/v1/instance/id`, { headers }, timeoutMs, signal);
  const id = (await idRes.text()).trim();
  const projectRes = await request("gcp", "project-id", `${b}/computeMetadata/v1/project/project-id`, { headers }, timeoutMs, signal);
  const project = (await projectRes.text()).trim();
  const zone = (inst.zone ?? "").split("/").pop() ?? "";
  if (!/^\d+$/.test(id) || !zone) throw new MetadataError("gcp", "instance: no id or zone");
  const region = zone.replace(/-[a-z]$/, "");
  const instanceId = id;
  const attributes: Attributes = {
    "cloud.provider": "gcp",
    "cloud.platform": "gcp_compute_engine",
    "cloud.region": region,
    "cloud.availability_zone": zone,
    "host.id": instanceId,
  };
  if (project) attributes["cloud.account.id"] = project;
  if (inst.name) attributes["host.name"] = inst.name;
  if (inst.machineType) attributes["host.type"] = inst.machineType.split("/").pop()!;
  return { provider: "gcp", region, instanceId, attributes };
}

/** Azure: GET /metadata/instance/compute?api-version=... with Metadata: true. */
export async function queryAzure(base: string, timeoutMs: number, signal: AbortSignal): Promise<CloudIdentity> {
  const b = trimBase(base);
  const res = await request("azure", "instance", `${b}/metadata/instance/compute?api-version=${AZURE_API_VERSION}&format=json`, { headers: { Metadata: "true" } }, timeoutMs, signal);
  const c = await json<{ location?: string; vmId?: string; subscriptionId?: string; vmSize?: string; name?: string; zone?: string; resourceId?: string }>("azure", "instance", res);
  if (!c.vmId || !c.location) throw new MetadataError("azure", "instance: no vmId or location");
  const attributes: Attributes = { "cloud.provider": "azure", "cloud.platform": "azure_vm", "cloud.region": c.location, "host.id": c.vmId };
  if (c.subscriptionId) attributes["cloud.account.id"] = c.subscriptionId;
  if (c.zone) attributes["cloud.availability_zone"] = c.zone;
  if (c.vmSize) attributes["host.type"] = c.vmSize;
  if (c.name) attributes["host.name"] = c.name;
  if (c.resourceId) attributes["cloud.resource_id"] = c.resourceId;
  return { provider: "azure", region: c.location, instanceId: c.vmId, attributes };
}

export const QUERIES: Record<CloudProvider, typeof queryAws> = { aws: queryAws, gcp: queryGcp, azure: queryAzure };
