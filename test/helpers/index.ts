/** Test helpers shared by the layers: e2e process harness, the quiet configuration, ports; fakes live in ./fakes/ (one file per native side or peer they stand in for). */
export * from "./agent-process";
export * from "./ports";
