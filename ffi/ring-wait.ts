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
 * One wait at a time: each gets a fresh epoll instance with the rings' fds and the waiter's own eventfd
 * (cancel() writes it), handed to the thread through a second eventfd (the gate). A wait asked for while the
 * previous one has not come back yet is armed when it does.
 */
import { JSCallback, cc, ptr } from "bun:ffi";
import { closeSync, readSync, writeSync } from "node:fs";
import { lastErrno, nativeLib } from "./libbpf";
import { errnoName } from "./errors";
import source from "./ring-wait.c" with { type: "text" };

const EPOLL_CLOEXEC = 0o2000000;
const EPOLL_CTL_ADD = 1;
const EPOLLIN = 1;
const EFD_CLOEXEC = 0o2000000;
const EFD_NONBLOCK = 0o4000;
const MFD_CLOEXEC = 1;
/** ready(-2): the thread could not read its gate and ended. */
const THREAD_ENDED = -2;

/** What the poll ticker needs of a waiter (tests give fakes). */
export interface ReadinessWait {
  /**
   * Calls `onReady` once (on the JavaScript thread) when the kernel wakes the wait on one of `fds`, or when the
   * waiter's timeout passes first (`woken` false); replaces a wait not yet armed.
   */
  wait(fds: readonly number[], onReady: (woken: boolean) => void): void;
  /** Drops the wanted wait; an armed one ends early without calling its onReady. */
  cancel(): void;
  /** Why waits are no longer possible (the thread ended), or undefined. */
  readonly broken: string | undefined;
}

interface Wanted {
  fds: readonly number[];
  onReady: (woken: boolean) => void;
}

function u64(n: number): Uint8Array {
  return new Uint8Array(new BigUint64Array([BigInt(n)]).buffer);
}

export class RingWaiter implements ReadinessWait {
  readonly #gate: number;
  readonly #cancelFd: number;
  readonly #callback: JSCallback;
  /** The wait the caller wants now. */
  #wanted: Wanted | undefined;
  /** The wait handed to the thread and not come back yet, with its epoll fd. */
  #armed: { wanted: Wanted; epoll: number } | undefined;
  broken: string | undefined;

  /**
   * Compiles and starts the waiting thread, whose waits end after `timeoutMs` at the latest; throws when that is
   * not possible here (no TinyCC, no memfd).
   */
  constructor(timeoutMs: number) {
    const libc = nativeLib().libc;
    const gate = libc.eventfd(0, EFD_CLOEXEC);
    if (gate < 0) throw new Error(`eventfd: ${errnoName(lastErrno())}`);
    const cancelFd = libc.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cancelFd < 0) {
      closeSync(gate);
      throw new Error(`eventfd: ${errnoName(lastErrno())}`);
    }
    const memfd = libc.memfd_create(ptr(Buffer.from("ring-wait.c\0")), MFD_CLOEXEC);
    if (memfd < 0) {
      closeSync(gate);
      closeSync(cancelFd);
      throw new Error(`memfd_create: ${errnoName(lastErrno())}`);
    }
    let start: (gate: number, ready: unknown, timeoutMs: number) => number;
    try {
      writeSync(memfd, source);
      start = cc({ source: `/proc/self/fd/${memfd}`, symbols: { ring_wait_start: { args: ["i32", "function", "i32"], returns: "i32" } } }).symbols.ring_wait_start as never;
    } catch (e) {
      closeSync(gate);
      closeSync(cancelFd);
      throw e;
    } finally {
      closeSync(memfd);
    }
    this.#gate = gate;
    this.#cancelFd = cancelFd;
    this.#callback = new JSCallback((n: number) => this.#ready(n), { args: ["i32"], returns: "void", threadsafe: true });
    const err = start(gate, this.#callback.ptr, timeoutMs);
    if (err !== 0) {
      this.#callback.close();
      closeSync(gate);
      closeSync(cancelFd);
      throw new Error(`pthread_create: ${errnoName(err)}`);
    }
  }

  wait(fds: readonly number[], onReady: (woken: boolean) => void): void {
    if (this.broken) return;
    this.#wanted = { fds, onReady };
    if (!this.#armed) this.#arm();
  }

  cancel(): void {
    this.#wanted = undefined;
    if (this.#armed) writeSync(this.#cancelFd, u64(1));
  }

  #arm(): void {
    const wanted = this.#wanted!;
    const libc = nativeLib().libc;
    const epoll = libc.epoll_create1(EPOLL_CLOEXEC);
    if (epoll < 0) {
      this.#fail(`epoll_create1: ${errnoName(lastErrno())}`);
      return;
    }
    const event = new Uint8Array(12);
    new DataView(event.buffer).setUint32(0, EPOLLIN, true);
    for (const fd of [this.#cancelFd, ...wanted.fds]) {
      if (libc.epoll_ctl(epoll, EPOLL_CTL_ADD, fd, ptr(event)) < 0) {
        const reason = `epoll_ctl(${fd}): ${errnoName(lastErrno())}`;
        closeSync(epoll);
        this.#fail(reason);
        return;
      }
    }
    this.#armed = { wanted, epoll };
    writeSync(this.#gate, u64(epoll + 1));
  }

  /** On the JavaScript thread: the armed wait came back (`n`: epoll_wait's result, 0 on its timeout, or THREAD_ENDED). */
  #ready(n: number): void {
    const armed = this.#armed;
    this.#armed = undefined;
    if (armed) closeSync(armed.epoll);
    if (n === THREAD_ENDED) {
      this.#fail("the waiting thread ended (its gate could not be read)");
      return;
    }
    try {
      readSync(this.#cancelFd, new Uint8Array(8));
    } catch {
      // EAGAIN: the wait was not cancelled
    }
    const wanted = this.#wanted;
    if (!wanted) return;
    if (armed && wanted === armed.wanted) {
      this.#wanted = undefined;
      wanted.onReady(n > 0);
    } else {
      this.#arm();
    }
  }

  /** Waits are over: the caller polls on its timer alone, and a wait it wanted is answered at once. */
  #fail(reason: string): void {
    this.broken = reason;
    const wanted = this.#wanted;
    this.#wanted = undefined;
    wanted?.onReady(false);
  }
}
