/** Docker discovery as a source of the registry (sources.ts): configuration, view part, /status fields, services. */
import { Type } from "@sinclair/typebox";
import { Count } from "../../status/model";
import { defineSource } from "../plugin";
import { dockerServices } from "./services";
import { DockerConfigKeys, validateDocker } from "./config";
import { DockerSource } from "./source";

export const docker = defineSource({
  key: "docker",
  config: DockerConfigKeys,
  validate: validateDocker,
  view: Type.Object({
    enabled: Type.Boolean(),
    connected: Type.Boolean(),
    containers: Count("Containers known."),
  }),
  disabled: () => ({ enabled: false, connected: false, containers: 0 }),
  create: (d, deps) => new DockerSource(d, deps.directory, deps.tasks),
  viewOf: (s) => ({ enabled: s.enabled, connected: s.connected, containers: s.containerCount }),
  summary: {
    active: { ofView: (v) => v.enabled && v.connected, ofSource: (s) => s.enabled && s.connected },
    counts: { containers_discovered: { ofView: (v) => v.containers, ofSource: (s) => s.containerCount } },
  },
  // Running containers grouped by compose service or image (when no source before it has the say).
  services: (s) => ({ stamp: `${s.enabled}:${s.generation}`, list: () => dockerServices(s.snapshot().containers) }),
});
