/**
 * Cloud discovery against loopback metadata servers for AWS (IMDSv2), GCP and Azure: identity and resource
 * attributes, required headers, IMDSv2 token refusal (no IMDSv1 fallback), timeouts, hints injected through
 * `cloud.hints_root`, and `auto` without hints contacting nobody. No request leaves loopback.
 */
import { afterAll, afterEach, describe, expect, test, setDefaultTimeout } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { discoveryHarness, removeTempDirs, tempDir, until, type DiscoveryHarness } from "../../helpers/discovery-harness";
import { providerFromHints, readHints } from "../../../src/discovery/cloud/hints";

/** Generous under CI load; every wait inside is a bounded poll. */
setDefaultTimeout(30_000);

interface Seen {
  method: string;
  path: string;
  headers: Record<string, string>;
}

type Mode = "ok" | "refuse-token" | "hang";

function metadataServer(handler: (req: Request, url: URL) => Response | Promise<Response>) {
  const seen: Seen[] = [];
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    fetch: (req) => {
      const url = new URL(req.url);
      seen.push({ method: req.method, path: url.pathname + url.search, headers: Object.fromEntries(req.headers) });
      return handler(req, url);
    },
  });
  return { seen, url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) };
}

const never = () => new Promise<Response>(() => undefined);

let awsMode: Mode = "ok";
const aws = metadataServer((req, url) => {
  if (awsMode === "hang") return never();
  if (url.pathname === "/latest/api/token" && req.method === "PUT") {
    if (awsMode === "refuse-token") return new Response("", { status: 403 });
    if (req.headers.get("x-aws-ec2-metadata-token-ttl-seconds") !== "21600") return new Response("", { status: 400 });
    return new Response("AQAEAtoken==");
  }
  if (url.pathname === "/latest/dynamic/instance-identity/document") {
    if (req.headers.get("x-aws-ec2-metadata-token") !== "AQAEAtoken==") return new Response("", { status: 401 });
    return Response.json({ accountId: "123456789012", availabilityZone: "eu-west-1b", region: "eu-west-1", instanceId: "i-0abc123", instanceType: "m6i.large", imageId: "ami-0def" });
  }
  return new Response("", { status: 404 });
});

const gcp = metadataServer((req, url) => {
  if (req.headers.get("metadata-flavor") !== "Google") return new Response("", { status: 403 });
  const h = { "Metadata-Flavor": "Google" };
  if (url.pathname === "/computeMetadata/v1/instance/" && url.searchParams.get("recursive") === "true")
    return new Response('{"id":4520031799277581759,"zone":"projects/8123/zones/us-central1-a","machineType":"projects/8123/machineTypes/e2-medium","name":"vm-1"}', { headers: { ...h, "content-type": "application/json" } });
  if (url.pathname === "/computeMetadata/v1/instance/id") return new Response("4520031799277581759", { headers: h });
  if (url.pathname === "/computeMetadata/v1/project/project-id") return new Response("my-project", { headers: h });
  return new Response("", { status: 404 });
});

const azure = metadataServer((req, url) => {
  if (req.headers.get("metadata") !== "true" || !url.searchParams.get("api-version")) return new Response("", { status: 400 });
  if (url.pathname === "/metadata/instance/compute")
    return Response.json({ location: "westeurope", vmId: "02aab8a4-74ef-476e-8182-f6d2ba4166a6", subscriptionId: "8d10da13-8125-4ba9-a717-bf7490507b3d", vmSize: "Standard_D2s_v3", name: "vm-az", zone: "1" });
  return new Response("", { status: 404 });
});

const ENDPOINTS = `
      endpoints:
        aws: ${aws.url}
        gcp: ${gcp.url}
        azure: ${azure.url}`;

function hintsDir(files: Record<string, string>): string {
  const root = tempDir("svc-hints-");
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(root, rel, ".."), { recursive: true });
    writeFileSync(join(root, rel), text + "\n");
  }
  return root;
}

function config(provider: string, hintsRoot: string, timeout = "1s"): string {
  return `
agent:
  discovery:
    detect_kubernetes: false
    docker:
      enabled: false
    cloud:
      enabled: true
      provider: ${provider}
      timeout: ${timeout}
      hints_root: ${hintsRoot}${ENDPOINTS}
`;
}

const totalRequests = () => aws.seen.length + gcp.seen.length + azure.seen.length;
const EMPTY_HINTS = hintsDir({});

describe("cloud discovery", () => {
  let h: DiscoveryHarness | undefined;
  afterEach(async () => {
    await h?.stop();
    h = undefined;
    awsMode = "ok";
  });
  afterAll(() => {
    aws.stop();
    gcp.stop();
    azure.stop();
    removeTempDirs();
  });

  test("this machine's own hints name no cloud (so a default run contacts no metadata address)", () => {
    const hints = readHints("/");
    console.log("local cloud hints:", JSON.stringify(hints));
    expect(providerFromHints(hints)).toBeUndefined();
  });

  test("auto without hints: provider none, ok, and no request to any provider", async () => {
    h = discoveryHarness(config("auto", EMPTY_HINTS));
    const before = totalRequests();
    await h.start();
    await h.parts.cloud.settled;
    expect(h.view().cloud).toEqual({ provider: "none", region: "", instance_id: "" });
    expect(h.status.component("discovery/cloud")?.state).toBe("ok");
    expect(totalRequests()).toBe(before);
    expect(h.resources.has("discovery/cloud")).toBe(false);
  });

  test("AWS via DMI hints: IMDSv2 token, then the identity document with it", async () => {
    aws.seen.length = 0;
    h = discoveryHarness(config("auto", hintsDir({ "sys/class/dmi/id/sys_vendor": "Amazon EC2", "sys/class/dmi/id/product_name": "m6i.large" })));
    await h.start();
    await until("aws found", () => h!.view().cloud.provider === "aws");
    expect(h.view().cloud).toEqual({ provider: "aws", region: "eu-west-1", instance_id: "i-0abc123" });
    expect(h.resources.get("discovery/cloud")).toEqual({
      "cloud.provider": "aws",
      "cloud.platform": "aws_ec2",
      "cloud.region": "eu-west-1",
      "cloud.availability_zone": "eu-west-1b",
      "cloud.account.id": "123456789012",
      "host.id": "i-0abc123",
      "host.type": "m6i.large",
      "host.image.id": "ami-0def",
    });
    expect(aws.seen.map((s) => `${s.method} ${s.path}`)).toEqual(["PUT /latest/api/token", "GET /latest/dynamic/instance-identity/document"]);
    expect(gcp.seen.length + azure.seen.length).toBe(0);
  });

  test("AWS via /sys/hypervisor/uuid (Xen instances)", async () => {
    h = discoveryHarness(config("auto", hintsDir({ "sys/hypervisor/uuid": "ec2e1916-9099-7caf-fd21-012345abcdef" })));
    await h.start();
    await until("aws found", () => h!.view().cloud.provider === "aws");
  });

  test("AWS IMDSv2 token refused: a clear error, no IMDSv1 request, not ready while configured explicitly", async () => {
    awsMode = "refuse-token";
    aws.seen.length = 0;
    h = discoveryHarness(config("aws", EMPTY_HINTS));
    await h.start();
    await h.parts.cloud.settled;
    expect(h.status.component("discovery/cloud")).toMatchObject({ state: "recoverable_error", reason: "aws: IMDSv2 token: HTTP 403" });
    expect(h.status.readiness().checks.discovery).toBe("failed: aws: IMDSv2 token: HTTP 403");
    expect(h.view().cloud.provider).toBe("none");
    expect(aws.seen.every((s) => s.method === "PUT")).toBe(true);
  });

  test("AWS metadata that never answers: the configured timeout, then recovery when it answers", async () => {
    awsMode = "hang";
    h = discoveryHarness(config("aws", EMPTY_HINTS, "150ms"));
    await h.start();
    await h.parts.cloud.settled;
    expect(h.status.component("discovery/cloud")?.reason).toBe("aws: IMDSv2 token: timed out after 150ms");
    awsMode = "ok";
    await until("recovered by retry", () => h!.view().cloud.provider === "aws", 10_000);
    expect(h.status.component("discovery/cloud")?.state).toBe("ok");
  });

  test("hinted provider that does not answer in auto mode: provider none, still ok (a warning says why)", async () => {
    awsMode = "hang";
    h = discoveryHarness(config("auto", hintsDir({ "sys/class/dmi/id/board_vendor": "Amazon EC2" }), "100ms"));
    await h.start();
    await h.parts.cloud.settled;
    expect(h.status.component("discovery/cloud")?.state).toBe("ok");
    expect(h.view().cloud.provider).toBe("none");
    expect(h.logs.some((r) => r.msg === "cloud metadata not available; provider none")).toBe(true);
  });

  test("GCP via DMI hints, with Metadata-Flavor: Google", async () => {
    gcp.seen.length = 0;
    h = discoveryHarness(config("auto", hintsDir({ "sys/class/dmi/id/product_name": "Google Compute Engine", "sys/class/dmi/id/sys_vendor": "Google" })));
    await h.start();
    await until("gcp found", () => h!.view().cloud.provider === "gcp");
    expect(h.view().cloud).toEqual({ provider: "gcp", region: "us-central1", instance_id: "4520031799277581759" });
    expect(h.resources.get("discovery/cloud")).toMatchObject({ "cloud.provider": "gcp", "cloud.availability_zone": "us-central1-a", "cloud.account.id": "my-project", "host.type": "e2-medium", "host.name": "vm-1" });
    expect(gcp.seen.every((s) => s.headers["metadata-flavor"] === "Google")).toBe(true);
  });

  test("Azure via the chassis asset tag, with Metadata: true and api-version", async () => {
    h = discoveryHarness(config("auto", hintsDir({ "sys/class/dmi/id/chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77", "sys/class/dmi/id/sys_vendor": "Microsoft Corporation" })));
    await h.start();
    await until("azure found", () => h!.view().cloud.provider === "azure");
    expect(h.view().cloud).toEqual({ provider: "azure", region: "westeurope", instance_id: "02aab8a4-74ef-476e-8182-f6d2ba4166a6" });
    expect(h.resources.get("discovery/cloud")).toMatchObject({ "cloud.account.id": "8d10da13-8125-4ba9-a717-bf7490507b3d", "cloud.availability_zone": "1", "host.type": "Standard_D2s_v3" });
    expect(azure.seen.at(-1)?.path).toStartWith("/metadata/instance/compute?api-version=");
  });

  test("reload: none -> gcp contacts it; -> disabled clears the resource attributes; shutdown twice is safe", async () => {
    h = discoveryHarness(config("none", EMPTY_HINTS));
    await h.start();
    expect(h.view().cloud.provider).toBe("none");
    await h.reload(config("gcp", EMPTY_HINTS));
    await until("gcp after reload", () => h!.view().cloud.provider === "gcp");
    await h.reload(config("none", EMPTY_HINTS).replace("enabled: true\n      provider: none", "enabled: false\n      provider: none"));
    expect(h.status.component("discovery/cloud")?.state).toBe("disabled");
    expect(h.resources.get("discovery/cloud")).toEqual({});
    await h.parts.cloud.shutdown();
    await h.parts.cloud.shutdown();
  });
});
