/** Build identity, injected by build.ts with --define; "dev" values when run from source. */
declare const SVC_BUILD_VERSION: string | undefined;
declare const SVC_BUILD_COMMIT: string | undefined;
declare const SVC_BUILD_TIME: string | undefined;

import pkg from "../package.json" with { type: "json" };

export interface BuildInfo {
  version: string;
  commit: string;
  built: string;
  bun: string;
}

export const BUILD_INFO: BuildInfo = {
  version: typeof SVC_BUILD_VERSION === "string" ? SVC_BUILD_VERSION : pkg.version,
  commit: typeof SVC_BUILD_COMMIT === "string" ? SVC_BUILD_COMMIT : "dev",
  built: typeof SVC_BUILD_TIME === "string" ? SVC_BUILD_TIME : "dev",
  bun: Bun.version,
};

export function versionText(): string {
  return `svc-agent ${BUILD_INFO.version}\ncommit: ${BUILD_INFO.commit}\nbuilt: ${BUILD_INFO.built}\nbun: ${BUILD_INFO.bun}\n`;
}
