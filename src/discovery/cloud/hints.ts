/**
 * Local hints of the cloud a host runs in, read from files only (no network): DMI identity in
 * /sys/class/dmi/id and the Xen hypervisor uuid. A provider's metadata address is contacted in `auto`
 * mode only when these name it.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

export type CloudProvider = "aws" | "gcp" | "azure";

/** The files read, relative to the hints root. */
export const HINT_FILES = [
  "sys/class/dmi/id/sys_vendor",
  "sys/class/dmi/id/product_name",
  "sys/class/dmi/id/board_vendor",
  "sys/class/dmi/id/bios_vendor",
  "sys/class/dmi/id/chassis_asset_tag",
  "sys/hypervisor/uuid",
] as const;

/** Azure sets this chassis asset tag on every VM. */
const AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77";

export type Hints = Partial<Record<(typeof HINT_FILES)[number], string>>;

export function readHints(root: string): Hints {
  const hints: Hints = {};
  for (const f of HINT_FILES) {
    try {
      hints[f] = readFileSync(join(root, f), "utf8").trim();
    } catch {
      // absent on this host: no hint
    }
  }
  return hints;
}

/** The provider the hints name, or undefined when they name none. */
export function providerFromHints(h: Hints): CloudProvider | undefined {
  const vendor = `${h["sys/class/dmi/id/sys_vendor"] ?? ""} ${h["sys/class/dmi/id/board_vendor"] ?? ""} ${h["sys/class/dmi/id/bios_vendor"] ?? ""}`.toLowerCase();
  const product = (h["sys/class/dmi/id/product_name"] ?? "").toLowerCase();
  const uuid = (h["sys/hypervisor/uuid"] ?? "").toLowerCase();
  if (vendor.includes("amazon") || uuid.startsWith("ec2")) return "aws";
  if (vendor.includes("google") || product.includes("google compute engine")) return "gcp";
  if (h["sys/class/dmi/id/chassis_asset_tag"] === AZURE_ASSET_TAG) return "azure";
  if (vendor.includes("microsoft corporation") && product.includes("virtual machine")) return "azure";
  return undefined;
}
