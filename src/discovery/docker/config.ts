/** The key `agent.discovery.docker`, owned by Docker discovery. */
import { Type, type Static, type TObject } from "@sinclair/typebox";
import type { ConfigProblem } from "../../config/problems";
import { Duration, msOf } from "../../config/units";

export const DockerConfigKeys = {
  docker: Type.Object(
    {
      enabled: Type.Union([Type.Boolean(), Type.Literal("auto")], {
        default: "auto",
        description:
          "Docker Engine discovery: true requires the Engine (readiness fails while its socket cannot be reached); auto follows it when the socket exists and waits for it otherwise, readiness unaffected; false turns it off.",
      }),
      socket: Type.String({ default: "/var/run/docker.sock", description: "Docker Engine API unix socket." }),
      reconnect_backoff_max: Duration("10s", "Longest wait between reconnection attempts to the Engine API (exponential backoff from 250ms)."),
    },
    { additionalProperties: false, default: {} },
  ),
};
export type DockerConfig = Static<TObject<typeof DockerConfigKeys>>;

export function validateDocker(d: DockerConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (msOf(d.docker, "reconnect_backoff_max") <= 0) problems.push({ path: "agent.discovery.docker.reconnect_backoff_max", message: "must be greater than 0" });
  if (d.docker.enabled !== false && d.docker.socket.trim() === "") problems.push({ path: "agent.discovery.docker.socket", message: "must not be empty unless docker.enabled is false" });
  return problems;
}
