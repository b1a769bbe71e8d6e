/**
 * RingWaiter (ffi/ring-wait.ts and its TinyCC-compiled thread, ffi/ring-wait.c) on eventfds in place of the rings'
 * fds: the kernel wakes an epoll waiter on an eventfd's write as it does on a ring's wakeup, so what is tested is
 * the real thread, the real epoll instance (edge-triggered) and the real thread-safe callback.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { closeSync, writeSync } from "node:fs";
import { openBpfRuntime } from "../../../ffi";
import { RingWaiter } from "../../../ffi/ring-wait";
import { nativeLib } from "../../../ffi/libbpf";

/* The libc symbols come with the native library (libbpf loads without privileges; nothing here touches the kernel's BPF). */
beforeAll(async () => {
  await openBpfRuntime(process.env);
});

const EFD_CLOEXEC = 0o2000000;
const EFD_NONBLOCK = 0o4000;

function eventfd(): number {
  const fd = nativeLib().libc.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw new Error("eventfd failed");
  return fd;
}

function kick(fd: number): void {
  writeSync(fd, new Uint8Array(new BigUint64Array([1n]).buffer));
}

/** Resolves with what the wait's onReady was called with, or "none" if nothing within `ms`. */
function waitOnce(w: RingWaiter, fds: number[], ms: number, calls: boolean[] = []): Promise<boolean | "none"> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve("none"), ms);
    w.wait(fds, (woken) => {
      calls.push(woken);
      clearTimeout(timer);
      resolve(woken);
    });
  });
}

describe("RingWaiter", () => {
  test("a wait ends woken when a watched fd is written, and at its timeout when none is", async () => {
    const a = eventfd();
    const w = new RingWaiter(150);
    try {
      const calls: boolean[] = [];
      const woken = waitOnce(w, [a], 5_000, calls);
      await Bun.sleep(20);
      kick(a);
      expect(await woken).toBe(true);
      // Nothing written: the thread's timeout ends the wait (at most two timeouts later).
      expect(await waitOnce(w, [a], 5_000, calls)).toBe(false);
      await Bun.sleep(400);
      expect(calls).toEqual([true, false]);
      expect(w.broken).toBeUndefined();
    } finally {
      closeSync(a);
    }
  });

  test("a cancelled wait never calls back, and the next wait is answered for itself", async () => {
    const a = eventfd();
    const w = new RingWaiter(600_000);
    try {
      const stale: boolean[] = [];
      w.wait([a], (woken) => stale.push(woken));
      w.cancel();
      kick(a);
      await Bun.sleep(100);
      expect(stale).toEqual([]);
      // The write while nothing was armed is reported by the next arming, at once.
      expect(await waitOnce(w, [a], 5_000)).toBe(true);
      // Cancelled as the kernel wakes it: whichever ends first, the first wait's callback never runs.
      w.wait([a], (woken) => stale.push(woken));
      kick(a);
      w.cancel();
      const next = waitOnce(w, [a], 5_000);
      await Bun.sleep(20);
      kick(a);
      expect(await next).toBe(true);
      await Bun.sleep(50);
      expect(stale).toEqual([]);
    } finally {
      closeSync(a);
    }
  });

  test("writes while no wait is armed call nothing; a changed set of fds is watched as it is now", async () => {
    const a = eventfd();
    const b = eventfd();
    const w = new RingWaiter(600_000);
    try {
      expect(await waitOnce(w, [a], 50)).toBe("none");
      w.cancel();
      // Busy polling: the kernel wakes the thread, which only notes it.
      for (let i = 0; i < 50; i++) kick(a);
      await Bun.sleep(50);
      // The noted wakeup ends the next wait at once; the one after waits for a new write.
      expect(await waitOnce(w, [a], 5_000)).toBe(true);
      expect(await waitOnce(w, [a], 100)).toBe("none");
      w.cancel();
      // Only b now: a's writes no longer wake a wait, b's do.
      const calls: boolean[] = [];
      const onB = waitOnce(w, [b], 5_000, calls);
      kick(a);
      await Bun.sleep(100);
      expect(calls).toEqual([]);
      kick(b);
      expect(await onB).toBe(true);
      // Both, in one epoll instance.
      const both = waitOnce(w, [a, b], 5_000);
      await Bun.sleep(20);
      kick(a);
      expect(await both).toBe(true);
      expect(w.broken).toBeUndefined();
    } finally {
      closeSync(a);
      closeSync(b);
    }
  });

  test("after reset, an fd number closed and given to a new file is watched as the new file", async () => {
    const w = new RingWaiter(600_000);
    let a = eventfd();
    const n = a;
    expect(await waitOnce(w, [a], 50)).toBe("none");
    w.cancel();
    closeSync(a);
    a = eventfd();
    expect(a).toBe(n);
    try {
      // Without reset the instance would still hold the closed file under this number (the set of fds looks the same).
      w.reset();
      const woken = waitOnce(w, [a], 5_000);
      await Bun.sleep(20);
      kick(a);
      expect(await woken).toBe(true);
    } finally {
      closeSync(a);
    }
  });

  test("an fd that cannot be watched breaks the waiter with the reason, and answers the wait", async () => {
    const w = new RingWaiter(600_000);
    const answered: boolean[] = [];
    // 0x7ffffff0 is no open fd: EBADF.
    w.wait([0x7ffffff0], (woken) => answered.push(woken));
    expect(w.broken).toContain("epoll_ctl(2147483632): EBADF");
    expect(answered).toEqual([false]);
  });
});
