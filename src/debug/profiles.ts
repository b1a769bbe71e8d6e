/** The pprof-style profiles served under /debug/pprof/. */
import type { ServerDeps } from "../server/deps";
import { ApiError } from "../server/errors";

export const PROFILES = ["profile", "heap", "allocs", "goroutine", "threadcreate", "block", "mutex", "trace"] as const;
export type ProfileName = (typeof PROFILES)[number];

/** Answers one profile request. Profiles not built yet answer 503 service_unavailable saying so. */
export async function profileResponse(_deps: ServerDeps, name: ProfileName | "index", _url: URL): Promise<Response> {
  throw new ApiError(503, "service_unavailable", `the ${name} profile is not available in this build yet`, { profile: name });
}
