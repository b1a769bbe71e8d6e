/**
 * Privileged: the BPF verifier gives up with EAGAIN when a signal is pending, and libbpf retries only a few times.
 * A process signalled without pause (here SIGUSR2, caught, sent in a tight loop; in the field a sampling profiler
 * such as `--cpu-prof`, or a supervisor resending SIGHUP) must still load and attach the network set: the loader
 * blocks signals around bpf_object__load. Without that, this child fails with "EAGAIN" on every run.
 */
import { expect, test } from "bun:test";
import { join } from "node:path";

const CHILD = join(import.meta.dir, "fixtures/load-under-signals.ts");

test("the network set loads while the process receives a steady stream of signals", async () => {
  const child = Bun.spawn([process.execPath, CHILD], { stdout: "pipe", stderr: "pipe" });
  const reader = child.stdout.getReader();
  const decoder = new TextDecoder();
  let out = "";
  while (!out.includes("\n")) {
    const r = await reader.read();
    if (r.done) break;
    out += decoder.decode(r.value);
  }
  expect(out).toStartWith(`ready ${child.pid}`);
  let exited = false;
  void child.exited.then(() => (exited = true));
  let sent = 0;
  const end = Date.now() + 20_000;
  while (!exited && Date.now() < end) {
    for (let i = 0; i < 200; i++) {
      try {
        process.kill(child.pid, "SIGUSR2");
        sent++;
      } catch {
        break;
      }
    }
    await Bun.sleep(0);
  }
  for (;;) {
    const r = await reader.read();
    if (r.done) break;
    out += decoder.decode(r.value);
  }
  await child.exited;
  const result = out.split("\n")[1] ?? "";
  expect(result, await new Response(child.stderr).text()).toMatch(/^loaded .*on_send_length.*on_recv_length.* after \d+ signals/);
  // The storm really ran through the load: the child waits 300 ms after "ready" before loading.
  expect(sent).toBeGreaterThan(10_000);
}, 30_000);
