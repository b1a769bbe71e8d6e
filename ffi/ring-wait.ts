/**
 * Waits for ring buffers to have records without a timer: a native thread (ffi/ring-wait.c, compiled at run
 * time by bun:ffi's TinyCC from a memfd, as the executable's own filesystem is not one TinyCC can read) blocks in
 * epoll_wait on the ring buffers' map fds, and wakes the JavaScript thread through a thread-safe JSCallback when
 * the kernel wakes it or after the wait's timeout. The agent's programs ask the kernel to wake the reader only
 * once a ring holds a sixteenth of its size (ffi/bpf/common.h svc_wakeup_flags), so the pumps (src/ebpf/pump.ts)
 * poll on their timer while records come fast and wait here while they trickle or stop: a quiet ring then costs
 * one wakeup per timeout instead of one per poll interval (each costs Bun 20-110 µs of CPU here; polling 1 MiB
 * rings every 2 ms was ~15 ms of CPU per second).
 *
 * One epoll instance and one thread for the process's life: the rings' fds are added to it (edge-triggered) when
 * the set waited on changes, and a wait is armed and cancelled by a call into the compiled code that stores the
 * wait's number, without a system call. Under a steady load the ticker starts and ends a wait every few
 * milliseconds (~190 a second under h2load here); a fresh epoll instance per wait, handed to the thread through an
 * eventfd, took ~8% of the agent's main-thread samples there. A wait's end names its number, so one that ends as it
 * is cancelled is recognised and ignored.
 */
import { JSCallback, cc, ptr } from "bun:ffi";
import { closeSync, writeSync } from "node:fs";
import { lastErrno, nativeLib } from "./libbpf";
import { errnoName } from "./errors";
import source from "./ring-wait.c" with { type: "text" };

const EPOLL_CLOEXEC = 0o2000000;
const EPOLL_CTL_ADD = 1;
const EPOLL_CTL_DEL = 2;
const EPOLLIN = 1;
const EPOLLET = 1 << 31;
const MFD_CLOEXEC = 1;
/** ready(0): epoll_wait failed and the thread ended. */
const THREAD_ENDED = 0;
/** Wait numbers run 1..MAX_WAIT_NUMBER (positive 32-bit, negated for a timeout). */
const MAX_WAIT_NUMBER = 0x3fffffff;

/** What the poll ticker needs of a waiter (tests give fakes). */
export interface ReadinessWait {
  /**
   * Calls `onReady` once (on the JavaScript thread) when the kernel wakes the wait on one of `fds`, or when the
   * waiter's timeout passes first (`woken` false); replaces a wait not yet armed.
   */
  wait(fds: readonly number[], onReady: (woken: boolean) => void): void;
  /** Drops the wanted wait; an armed one ends early without calling its onReady. */
  cancel(): void;
  /**
   * The fds may have been closed and their numbers given to other files (a set reloaded): the next wait watches its
   * fds afresh rather than trusting that an fd number it watches still names the same file.
   */
  reset?(): void;
  /** Why waits are no longer possible (the thread ended), or undefined. */
  readonly broken: string | undefined;
}

interface Native {
  arm(wait: number): number;
  disarm(): void;
}

export class RingWaiter implements ReadinessWait {
  readonly #epoll: number;
  readonly #native: Native;
  readonly #callback: JSCallback;
  /** The fds in the epoll instance now. */
  #fds: readonly number[] = [];
  /** The wanted wait's number and callback (the number of the last wait armed while none is wanted). */
  #wait = 0;
  #onReady: ((woken: boolean) => void) | undefined;
  broken: string | undefined;

  /**
   * Compiles and starts the waiting thread, whose waits end after `timeoutMs` at the latest; throws when that is
   * not possible here (no TinyCC, no memfd, not x86-64).
   */
  constructor(timeoutMs: number) {
    const libc = nativeLib().libc;
    const epoll = libc.epoll_create1(EPOLL_CLOEXEC);
    if (epoll < 0) throw new Error(`epoll_create1: ${errnoName(lastErrno())}`);
    const memfd = libc.memfd_create(ptr(Buffer.from("ring-wait.c\0")), MFD_CLOEXEC);
    if (memfd < 0) {
      closeSync(epoll);
      throw new Error(`memfd_create: ${errnoName(lastErrno())}`);
    }
    let symbols;
    try {
      writeSync(memfd, source);
      symbols = cc({
        source: `/proc/self/fd/${memfd}`,
        symbols: {
          ring_wait_start: { args: ["i32", "function", "i32"], returns: "i32" },
          ring_wait_arm: { args: ["i32"], returns: "i32" },
          ring_wait_disarm: { args: [], returns: "void" },
        },
      }).symbols;
    } catch (e) {
      closeSync(epoll);
      throw e;
    } finally {
      closeSync(memfd);
    }
    this.#epoll = epoll;
    this.#native = { arm: symbols.ring_wait_arm as never, disarm: symbols.ring_wait_disarm as never };
    this.#callback = new JSCallback((n: number) => this.#ready(n), { args: ["i32"], returns: "void", threadsafe: true });
    const err = (symbols.ring_wait_start as (epoll: number, ready: unknown, timeoutMs: number) => number)(epoll, this.#callback.ptr, timeoutMs);
    if (err !== 0) {
      this.#callback.close();
      closeSync(epoll);
      throw new Error(`pthread_create: ${errnoName(err)}`);
    }
  }

  wait(fds: readonly number[], onReady: (woken: boolean) => void): void {
    if (this.broken) return;
    this.#wait = this.#wait >= MAX_WAIT_NUMBER ? 1 : this.#wait + 1;
    this.#onReady = onReady;
    if (!sameFds(fds, this.#fds) && !this.#watch(fds)) return;
    /* An event came while no wait was armed: this one is woken at once (on the next turn of the event loop, as a
     * woken wait would be). */
    if (this.#native.arm(this.#wait) === 1) {
      const wait = this.#wait;
      setImmediate(() => this.#ready(wait));
    }
  }

  cancel(): void {
    this.#onReady = undefined;
    this.#native.disarm();
  }

  reset(): void {
    this.#unwatch(this.#fds);
    this.#fds = [];
  }

  /**
   * Takes `fds` out of the epoll instance. An fd closed already left it with its file, or names another file now
   * (ENOENT, EBADF): either is fine.
   */
  #unwatch(fds: readonly number[]): void {
    const libc = nativeLib().libc;
    const event = new Uint8Array(12);
    for (const fd of fds) libc.epoll_ctl(this.#epoll, EPOLL_CTL_DEL, fd, ptr(event));
  }

  /** Makes the epoll instance watch exactly `fds`; false (and broken) when an fd cannot be added. */
  #watch(fds: readonly number[]): boolean {
    const libc = nativeLib().libc;
    const event = new Uint8Array(12);
    const view = new DataView(event.buffer);
    view.setUint32(0, (EPOLLIN | EPOLLET) >>> 0, true);
    this.#unwatch(this.#fds.filter((fd) => !fds.includes(fd)));
    const kept = this.#fds.filter((fd) => fds.includes(fd));
    for (const fd of fds) {
      if (kept.includes(fd)) continue;
      view.setBigUint64(4, BigInt(fd), true);
      if (libc.epoll_ctl(this.#epoll, EPOLL_CTL_ADD, fd, ptr(event)) < 0) {
        const reason = `epoll_ctl(${fd}): ${errnoName(lastErrno())}`;
        this.#fds = kept;
        this.#fail(reason);
        return false;
      }
      kept.push(fd);
    }
    this.#fds = kept;
    return true;
  }

  /** On the JavaScript thread: wait `n` ended, woken (n > 0) or at its timeout (-n); THREAD_ENDED: the thread ended. */
  #ready(n: number): void {
    if (n === THREAD_ENDED) {
      this.#fail("the waiting thread ended (epoll_wait failed)");
      return;
    }
    const onReady = this.#onReady;
    if (!onReady || Math.abs(n) !== this.#wait) return;
    this.#onReady = undefined;
    onReady(n > 0);
  }

  /** Waits are over: the caller polls on its timer alone, and a wait it wanted is answered at once. */
  #fail(reason: string): void {
    this.broken = reason;
    const onReady = this.#onReady;
    this.#onReady = undefined;
    this.#native.disarm();
    onReady?.(false);
  }
}

function sameFds(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
