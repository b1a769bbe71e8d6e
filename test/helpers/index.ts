/** Test helpers shared by the layers: e2e process harness, and (added by subsystems) fakes and peers. */
export * from "./agent-process";
export * from "./ports";
