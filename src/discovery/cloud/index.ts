/** Cloud discovery as a source of the registry (sources.ts): configuration and view part. */
import { Type } from "@sinclair/typebox";
import { defineSource } from "../plugin";
import { CloudConfigKeys, validateCloud } from "./config";
import { CloudSource } from "./source";

export const cloud = defineSource({
  key: "cloud",
  config: CloudConfigKeys,
  validate: validateCloud,
  startsFirst: true,
  view: Type.Object({
    provider: Type.String({ description: "aws, gcp, azure or none" }),
    region: Type.String(),
    instance_id: Type.String(),
  }),
  disabled: () => ({ provider: "none", region: "", instance_id: "" }),
  create: (d, deps) => new CloudSource(d, deps.pipeline, deps.tasks),
  viewOf: (s) => s.snapshot(),
});
