/** `svc-agent diagnostics [--config PATH] [--output FILE]`: writes the bundle as tar.gz to stdout or FILE. */
import { writeFileSync } from "node:fs";
import type { ParsedArgs } from "./args";
import { EXIT } from "./exit";
import { collectBundle } from "../diagnostics/collect";
import { tarGz, type TarEntry } from "../diagnostics/tar";

export const DIAGNOSTICS_HELP = `Usage: svc-agent diagnostics [--config PATH] [--output FILE]

Writes a diagnostics bundle (tar.gz) to standard output, or to FILE (created with mode 0600):
  manifest.json     what is inside, and what could not be collected and why
  config.json       the configuration (--config, else SVC_CONFIG, else /etc/svc-agent/config.yaml, else
                    the embedded defaults), secrets replaced by [REDACTED]
  agent/*.json      /healthz, /ready, /status, /status/ebpf (eBPF programs and maps), /status/export,
                    /status/discovery, /config and /admin/logs (recent log records, logs.json) of the agent
                    running at self_telemetry.listen (with the configured bearer token when auth is on);
                    /debug/vars when that agent runs in debug mode
  metrics.txt       a metrics snapshot from the running agent
  ebpf/*.json       when no agent answers: the kernel's eBPF programs and maps (bpftool prog/map list -j)
  kernel.json       uname, /proc/version, BTF, bpffs and tracefs mounts, capabilities, memlock, sysctls
No secret value of the configuration is written. Exit 0 when the bundle was written (even with parts missing).

Example: svc-agent diagnostics --config /etc/svc-agent/config.yaml --output /tmp/diag.tar.gz && tar -tzf /tmp/diag.tar.gz
`;

export async function diagnosticsCommand(args: ParsedArgs, env: Record<string, string | undefined>): Promise<number> {
  if (args.positionals.length > 0) {
    process.stderr.write(`svc-agent diagnostics: unexpected argument ${JSON.stringify(args.positionals[0])}\n`);
    return EXIT.CONFIG;
  }
  const configPath = typeof args.flags.config === "string" ? args.flags.config : undefined;
  const output = typeof args.flags.output === "string" ? args.flags.output : undefined;
  const bundle = await collectBundle({ configPath, env });
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  const root = `svc-agent-diagnostics-${stamp}/`;
  const manifest = JSON.stringify(bundle.manifest, null, 2) + "\n";
  const dirs = new Set<string>([root]);
  for (const f of bundle.files) {
    const slash = f.name.lastIndexOf("/");
    if (slash > 0) dirs.add(root + f.name.slice(0, slash + 1));
  }
  const entries: TarEntry[] = [
    ...[...dirs].map((name) => ({ name })),
    { name: `${root}manifest.json`, data: manifest },
    ...bundle.files.map((f) => ({ name: root + f.name, data: f.data })),
  ];
  const archive = await tarGz(entries);
  if (output) {
    writeFileSync(output, archive, { mode: 0o600 });
  } else {
    await new Promise<void>((resolve, reject) => process.stdout.write(archive, (e) => (e ? reject(e) : resolve())));
  }
  process.stderr.write(
    `svc-agent diagnostics: ${bundle.files.length + 1} files (${archive.length} bytes) written to ${output ?? "standard output"}; ${bundle.missing.length} items not collected${bundle.missing.length ? " (see manifest.json)" : ""}\n`,
  );
  return EXIT.OK;
}
