/** What one wrk run reports: requests/s, requests done, and the CPU time wrk itself used. */
export interface WrkRun {
  rps: number;
  requests: number;
  wrkCpuSeconds: number;
}

/**
 * Runs `command` (wrk and its arguments, maybe behind a prefix such as `nice -n N`) to its end and reads wrk's
 * figures. No figure is an error, and so is any non-2xx answer unless `non2xx` allows them.
 */
export async function runWrk(command: string[], options: { non2xx?: boolean } = {}): Promise<WrkRun> {
  const p = Bun.spawn(command, { stdout: "pipe", stderr: "pipe" });
  const out = await new Response(p.stdout).text();
  await p.exited;
  const usage = p.resourceUsage();
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  const total = /(\d+) requests in/.exec(out);
  if (!rps || !total) throw new Error(`wrk gave no figure:\n${out}`);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  if (non2xx && !options.non2xx) throw new Error(`wrk saw ${non2xx[1]} non-2xx answers:\n${out}`);
  return { rps: Number(rps[1]), requests: Number(total[1]), wrkCpuSeconds: usage ? Number(usage.cpuTime.user + usage.cpuTime.system) / 1e6 : 0 };
}

/** Runs wrk against a URL and returns requests per second (loopback only). */
export async function wrkRps(url: string, options: { seconds?: number; connections?: number; headers?: Record<string, string>; cpu?: number } = {}): Promise<number> {
  const args = [...(options.cpu === undefined ? [] : ["taskset", "-c", String(options.cpu)]), "wrk", "-t1", `-c${options.connections ?? 32}`, `-d${options.seconds ?? 3}s`];
  for (const [k, v] of Object.entries(options.headers ?? {})) args.push("-H", `${k}: ${v}`);
  args.push(url);
  return (await runWrk(args)).rps;
}

/** Pins every thread of process `pid` to `cpu` (taskset -a), so a server under test and the load generator do not
 * trade places between the cores from one measurement to the next. */
export function pinProcess(pid: number, cpu: number): void {
  const r = Bun.spawnSync(["taskset", "-a", "-p", "-c", String(cpu), String(pid)], { stdout: "ignore", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`taskset -a -p -c ${cpu} ${pid}: ${r.stderr.toString().trim()}`);
}
