import { describe, expect, test } from "bun:test";
import { checkEnvironment, effectiveCapabilities } from "../../../src/ebpf/environment";
import { fakeEnvironment, UNPRIVILEGED_STATUS } from "../../helpers/fakes/ebpf";

const check = (r: ReturnType<typeof checkEnvironment>, name: string) => r.checks.find((c) => c.name === name)!;

describe("checkEnvironment", () => {
  test("a privileged 6.x host passes every check and uses ring buffers", () => {
    const r = checkEnvironment(fakeEnvironment());
    expect(r.blocked).toBeUndefined();
    expect(r.ringbuf).toBe(true);
    expect(r.checks.map((c) => c.name)).toEqual(["kernel", "btf", "privileges", "bpffs", "tracefs", "memlock"]);
    expect(r.checks.every((c) => c.ok)).toBe(true);
  });

  test("without capabilities eBPF is blocked with the reason, and nothing is mounted", () => {
    const env = fakeEnvironment({ procStatus: () => UNPRIVILEGED_STATUS, mounts: () => "" });
    const r = checkEnvironment(env);
    expect(r.blocked).toContain("missing privileges: need CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN");
    expect(env.mounted).toEqual([]);
    expect(check(r, "bpffs").ok).toBe(false);
  });

  test("CAP_BPF + CAP_PERFMON without CAP_SYS_ADMIN is enough", () => {
    const caps = (1n << 39n) | (1n << 38n);
    const r = checkEnvironment(fakeEnvironment({ procStatus: () => `CapEff:\t${caps.toString(16).padStart(16, "0")}\n` }));
    expect(check(r, "privileges").ok).toBe(true);
    expect(effectiveCapabilities(`CapEff:\t${caps.toString(16)}`)).toBe(caps);
  });

  test("bpffs and tracefs are mounted when absent; a failed mount is a warning, not a block", () => {
    const env = fakeEnvironment({ mounts: () => "", exists: (p) => p !== "/sys/kernel/debug/tracing/events" });
    const r = checkEnvironment(env);
    expect(env.mounted).toEqual(["bpf:/sys/fs/bpf", "tracefs:/sys/kernel/tracing"]);
    expect(check(r, "bpffs").detail).toContain("mounted it");

    const failing = fakeEnvironment({
      mounts: () => "",
      exists: (p) => p !== "/sys/kernel/debug/tracing/events",
      mount: () => {
        throw new Error("mount failed: EPERM");
      },
    });
    const r2 = checkEnvironment(failing);
    expect(check(r2, "tracefs").ok).toBe(false);
    expect(check(r2, "tracefs").detail).toContain("EPERM");
    expect(r2.blocked).toBeUndefined();
  });

  test("kernel older than 4.18 blocks; 5.4 falls back to perf buffers and raises memlock", () => {
    expect(checkEnvironment(fakeEnvironment({ kernelRelease: () => "4.9.0" })).blocked).toContain("older than the minimum 4.18");
    const env = fakeEnvironment({ kernelRelease: () => "5.4.0-100-generic" });
    const r = checkEnvironment(env);
    expect(r.blocked).toBeUndefined();
    expect(r.ringbuf).toBe(false);
    expect(env.raised).toBe(1);
    expect(check(r, "memlock").detail).toContain("raised from 8388608 bytes");
  });

  test("missing BTF blocks", () => {
    const r = checkEnvironment(fakeEnvironment({ exists: (p) => p !== "/sys/kernel/btf/vmlinux" }));
    expect(r.blocked).toContain("/sys/kernel/btf/vmlinux missing");
  });
});

test("shared libraries are opened by absolute path (Bun's dlopen of a bare name tries the current directory first)", async () => {
  const { findLibrary } = await import("../../../ffi/library-path");
  const libc = findLibrary("libc.so.6", {});
  expect(libc).toMatch(/^\/.*\/libc\.so\.6$/);
  expect(findLibrary("libc.so.6", { LD_LIBRARY_PATH: "relative/dir" })).toBe(libc!);
  expect(findLibrary("no-such-library.so.9", {})).toBeUndefined();
  expect(findLibrary("/opt/x/libfoo.so", {})).toBe("/opt/x/libfoo.so");
});
