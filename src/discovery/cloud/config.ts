/** The key `agent.discovery.cloud`, owned by cloud discovery. */
import { Type, type Static, type TObject } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { Duration, msOf } from "../../config/units";

export const CloudConfigKeys = {
  cloud: Type.Object(
    {
      enabled: Type.Boolean({ default: true, description: "Cloud instance metadata discovery." }),
      provider: Type.Union(
        [Type.Literal("auto"), Type.Literal("aws"), Type.Literal("gcp"), Type.Literal("azure"), Type.Literal("none")],
        { default: "auto", description: "auto contacts a provider only when local hints (DMI, /sys/hypervisor/uuid) say the host runs there." },
      ),
      endpoints: Type.Object(
        {
          aws: Type.String({ default: "http://169.254.169.254", description: "AWS metadata base address." }),
          gcp: Type.String({ default: "http://metadata.google.internal", description: "GCP metadata base address." }),
          azure: Type.String({ default: "http://169.254.169.254", description: "Azure metadata base address." }),
        },
        { additionalProperties: false, default: {} },
      ),
      timeout: Duration("2s", "Timeout of each metadata request."),
      hints_root: Type.String({
        default: "/",
        description: "Root under which the local hints are read (sys/class/dmi/id/*, sys/hypervisor/uuid); e.g. /host when the host's /sys is mounted at /host/sys.",
      }),
    },
    { additionalProperties: false, default: {} },
  ),
};
export type CloudConfig = Static<TObject<typeof CloudConfigKeys>>;
export type CloudProviderSetting = CloudConfig["cloud"]["provider"];

/** Metadata addresses are http(s) base URLs; the timeout is positive. */
export function validateCloud(d: CloudConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const [name, url] of Object.entries(d.cloud.endpoints)) {
    let ok = false;
    try {
      const u = new URL(url);
      ok = (u.protocol === "http:" || u.protocol === "https:") && u.search === "" && u.hash === "";
    } catch {
      ok = false;
    }
    if (!ok) problems.push({ path: `agent.discovery.cloud.endpoints.${name}`, message: `must be an http:// or https:// base address without query, got ${JSON.stringify(url)}` });
  }
  if (msOf(d.cloud, "timeout") <= 0) problems.push({ path: "agent.discovery.cloud.timeout", message: "must be greater than 0" });
  return problems;
}
