/**
 * Turns stack addresses into frames. Kernel addresses through /proc/kallsyms; user addresses through the
 * process's executable mappings (/proc/<pid>/maps): file-backed ones through the ELF symbols of the mapped
 * binary or library (read through /proc/<pid>/map_files or the process's root, so containers work, and
 * cached by GNU build id), anonymous ones through the runtime's perf map or jitdump.
 */
import { readFileSync, statSync } from "node:fs";
import type { ProfileFrame } from "../../export/model";
import { ElfFile, fileOffsetToVaddr, type LoadSegment } from "./elf";
import { JitDumpFile, PerfMapFile } from "./jit-maps";
import { KernelSymbols } from "./kallsyms";
import type { SymbolTable } from "./symbol-table";

/** Binary name of kernel frames (as perf and pprof tools name it). */
export const KERNEL_BINARY = "[kernel.kallsyms]";
const JITDUMP_PATH = /\/jit-\d+(?:-\d+)?\.dump$/;
/** Symbol tables kept by build id (or file identity when there is none). */
const MAX_CACHED_BINARIES = 512;
/** Frames remembered by address (kernel, and per process); a cache is cleared when it reaches this size. */
const MAX_CACHED_FRAMES = 200_000;
/**
 * A process's maps are read again only when one of its addresses misses the frame cache, or when they were last
 * read this many periods ago (a library replaced at the same addresses would otherwise keep its old names).
 */
const MAPS_RECHECK_PERIODS = 6;

interface Mapping {
  start: number;
  end: number;
  offset: number;
  path: string;
  /** The binary's symbols, once looked up for this mapping (null: none could be read). */
  symbols?: BinarySymbols | null;
}

interface ProcessMaps {
  exec: Mapping[];
  jitdumps: string[];
}

interface BinarySymbols {
  segments: LoadSegment[];
  table: SymbolTable;
  buildId: string;
  /**
   * Resolved frames by virtual address * 2 + back, shared by every process mapping this binary: a library's frame
   * is one object whichever process it is seen in (new processes cost no lookups; the exporter interns by object).
   */
  frames: Map<number, ProfileFrame>;
}

/** Counters of what symbolization found (tests and logs). */
export interface SymbolizerStats {
  framesResolved: number;
  framesUnresolved: number;
  binariesLoaded: number;
  binaryErrors: number;
}

export class Symbolizer {
  readonly #proc: string;
  readonly #kallsymsPath: string;
  #kernel: KernelSymbols | undefined;
  /** file identity (dev:ino:size:mtime) -> symbols; and build id -> the same symbols. */
  readonly #byIdentity = new Map<string, BinarySymbols | null>();
  readonly #byBuildId = new Map<string, BinarySymbols>();
  /** Per period: maps of each pid. */
  #maps = new Map<number, ProcessMaps | null>();
  /** Kernel frames by address. */
  readonly #kernelFrames = new Map<bigint, ProfileFrame>();
  /**
   * Per process: the maps text the cached frames were resolved against (and the key of its code mappings), and
   * frames by address * 2 + back. Frames of file-backed code stay valid while the code mappings do not change (data
   * mappings come and go without dropping them); JIT frames are kept for one period
   * (the runtime may name more code later).
   */
  readonly #frames = new Map<
    number,
    { mapsText: string; codeKey: string; maps: ProcessMaps | null; readAt: number; stable: Map<number, ProfileFrame>; period: Map<number, ProfileFrame>; previous: Map<number, ProfileFrame> }
  >();
  #periods = 0;
  /** JIT sources already refreshed this period. */
  #jitChecked = new Set<string>();
  readonly #perfMaps = new Map<number, PerfMapFile>();
  readonly #jitdumps = new Map<string, JitDumpFile>();
  readonly stats: SymbolizerStats = { framesResolved: 0, framesUnresolved: 0, binariesLoaded: 0, binaryErrors: 0 };

  constructor(options: { procRoot?: string; kallsyms?: string } = {}) {
    this.#proc = options.procRoot ?? "/proc";
    this.#kallsymsPath = options.kallsyms ?? `${this.#proc}/kallsyms`;
  }

  /** Starts a period: process maps are read again (a process may have loaded libraries since). */
  beginPeriod(): void {
    this.#periods++;
    this.#maps = new Map();
    this.#jitChecked = new Set();
    for (const f of this.#frames.values()) {
      f.previous = f.period;
      f.period = new Map();
    }
  }

  /** Forgets a process that ended (its JIT maps). */
  forgetPid(pid: number): void {
    this.#perfMaps.delete(pid);
    this.#maps.delete(pid);
    this.#frames.delete(pid);
    for (const path of this.#jitdumps.keys()) if (path.startsWith(`${this.#proc}/${pid}/`)) this.#jitdumps.delete(path);
  }

  /**
   * Reads the kernel's symbols ahead of the first kernel frame, without holding the event loop (KernelSymbols.load);
   * a frame looked up before it ends reads them at once, as without it.
   */
  async preloadKernel(): Promise<void> {
    if (this.#kernel) return;
    const loaded = await KernelSymbols.load(this.#kallsymsPath);
    this.#kernel ??= loaded;
  }

  /** A kernel frame. */
  kernelFrame(address: bigint): ProfileFrame {
    const cached = this.#kernelFrames.get(address);
    if (cached) return cached;
    this.#kernel ??= KernelSymbols.read(this.#kallsymsPath);
    const s = this.#kernel.lookup(address);
    let frame: ProfileFrame;
    if (!s) {
      this.stats.framesUnresolved++;
      frame = { function: `[unknown] 0x${address.toString(16)}`, address, binary: KERNEL_BINARY };
    } else {
      this.stats.framesResolved++;
      frame = { function: s.name, address, binary: s.module ? `[${s.module}]` : KERNEL_BINARY };
    }
    if (this.#kernelFrames.size >= MAX_CACHED_FRAMES) this.#kernelFrames.clear();
    this.#kernelFrames.set(address, frame);
    return frame;
  }

  /**
   * User frames of process `pid`, leaf first. Non-leaf addresses are return addresses: they are looked up
   * one byte earlier so that a call at the very end of a function is attributed to that function.
   */
  userFrames(pid: number, addresses: readonly number[]): ProfileFrame[] {
    let cache = this.#frames.get(pid);
    let maps: ProcessMaps | null | undefined;
    if (!cache || this.#periods - cache.readAt >= MAPS_RECHECK_PERIODS) {
      maps = this.#mapsOf(pid);
      cache = this.#frames.get(pid)!;
    }
    const out = new Array<ProfileFrame>(addresses.length);
    for (let i = 0; i < addresses.length; i++) {
      const a = addresses[i]!;
      const back = i === 0 ? 0 : 1;
      const key = a * 2 + back;
      let frame = cache.stable.get(key) ?? cache.period.get(key);
      if (!frame && maps === undefined) {
        if (cache.maps && findMapping(cache.maps.exec, a)) {
          // An address not seen yet in a mapping already known: resolved against the maps as last read.
          maps = cache.maps;
        } else {
          // Outside every known mapping: the maps changed (a library loaded); read them (once this period), then look again.
          maps = this.#mapsOf(pid);
          cache = this.#frames.get(pid)!;
          frame = cache.stable.get(key) ?? cache.period.get(key);
        }
      }
      if (!frame) {
        const r = this.#userFrame(pid, maps!, a, back);
        const into = r.stable ? cache.stable : cache.period;
        if (into.size >= MAX_CACHED_FRAMES) into.clear();
        // A JIT frame named as last period keeps its object (the exporter interns frames by identity).
        const old = r.stable ? undefined : cache.previous.get(key);
        frame = old && old.function === r.frame.function && old.binary === r.frame.binary && old.address === r.frame.address ? old : r.frame;
        into.set(key, frame);
      }
      out[i] = frame;
    }
    return out;
  }

  /** One frame, and whether it stays valid while the process's maps do not change. */
  #userFrame(pid: number, maps: ProcessMaps | null, addr: number, back: number): { frame: ProfileFrame; stable: boolean } {
    const address = BigInt(addr);
    const m = maps ? findMapping(maps.exec, addr) : undefined;
    if (m && m.path.startsWith("/") && !JITDUMP_PATH.test(m.path)) {
      if (m.symbols === undefined) m.symbols = this.#binary(pid, m) ?? null;
      const bin = m.symbols;
      const fileOffset = addr - m.start + m.offset;
      if (bin) {
        const vaddr = fileOffsetToVaddr(bin.segments, fileOffset);
        const key = vaddr === undefined ? -1 : vaddr * 2 + back;
        const known = bin.frames.get(key);
        if (known && known.binary === m.path) {
          this.stats.framesResolved++;
          return { frame: known, stable: true };
        }
        const name = vaddr === undefined ? undefined : bin.table.lookup(vaddr - back);
        if (name !== undefined) {
          this.stats.framesResolved++;
          const frame: ProfileFrame = { function: name, address: BigInt(vaddr!), binary: m.path };
          if (bin.buildId) frame.buildId = bin.buildId;
          if (bin.frames.size >= MAX_CACHED_FRAMES) bin.frames.clear();
          bin.frames.set(key, frame);
          return { frame, stable: true };
        }
      }
      this.stats.framesUnresolved++;
      const frame: ProfileFrame = { function: `${basename(m.path)}+0x${fileOffset.toString(16)}`, address, binary: m.path };
      if (bin?.buildId) frame.buildId = bin.buildId;
      return { frame, stable: true };
    }
    const jit = this.#jitLookup(pid, maps, addr - back);
    if (jit !== undefined) {
      this.stats.framesResolved++;
      return { frame: { function: jit, address, binary: "[jit]" }, stable: false };
    }
    this.stats.framesUnresolved++;
    return { frame: { function: `[unknown] 0x${address.toString(16)}`, address, binary: m?.path || "[anon]" }, stable: false };
  }

  #mapsOf(pid: number): ProcessMaps | null {
    let maps = this.#maps.get(pid);
    if (maps !== undefined) return maps;
    let text = "";
    try {
      text = readFileSync(`${this.#proc}/${pid}/maps`, "utf8");
    } catch {
      maps = null;
    }
    const cache = this.#frames.get(pid);
    if (cache && cache.mapsText === text) {
      maps = cache.maps;
      cache.readAt = this.#periods;
    } else {
      maps ??= parseMaps(text);
      const key = maps ? codeMapsKey(maps) : "";
      if (cache && cache.codeKey === key) {
        // Only data mappings changed (heap growth, anonymous memory): the code, and so every cached frame, is as it was.
        maps = cache.maps;
        cache.mapsText = text;
        cache.readAt = this.#periods;
      } else {
        this.#frames.set(pid, { mapsText: text, codeKey: key, maps, readAt: this.#periods, stable: new Map(), period: new Map(), previous: new Map() });
      }
    }
    this.#maps.set(pid, maps);
    return maps;
  }

  #binary(pid: number, m: Mapping): BinarySymbols | undefined {
    const candidates = [`${this.#proc}/${pid}/map_files/${m.start.toString(16)}-${m.end.toString(16)}`, `${this.#proc}/${pid}/root${m.path}`];
    for (const path of candidates) {
      let identity: string;
      try {
        const s = statSync(path);
        identity = `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
      } catch {
        continue;
      }
      const known = this.#byIdentity.get(identity);
      if (known !== undefined) return known ?? undefined;
      let loaded: BinarySymbols | null = null;
      try {
        using elf = new ElfFile(path);
        const cached = elf.info.buildId ? this.#byBuildId.get(elf.info.buildId) : undefined;
        loaded = cached ?? { segments: elf.info.segments, table: elf.symbols(), buildId: elf.info.buildId, frames: new Map() };
        if (!cached) {
          this.stats.binariesLoaded++;
          if (loaded.buildId) this.#byBuildId.set(loaded.buildId, loaded);
        }
      } catch {
        this.stats.binaryErrors++;
      }
      if (this.#byIdentity.size >= MAX_CACHED_BINARIES) this.#byIdentity.clear();
      if (this.#byBuildId.size >= MAX_CACHED_BINARIES) this.#byBuildId.clear();
      this.#byIdentity.set(identity, loaded);
      return loaded ?? undefined;
    }
    return undefined;
  }

  #refreshOnce(key: string, source: JitSource): SymbolTable | undefined {
    if (this.#jitChecked.has(key)) return source.current;
    this.#jitChecked.add(key);
    return source.table();
  }

  #jitLookup(pid: number, maps: ProcessMaps | null, addr: number): string | undefined {
    let perf = this.#perfMaps.get(pid);
    if (!perf) {
      perf = new PerfMapFile(`${this.#proc}/${pid}/root/tmp/perf-${namespacePid(this.#proc, pid)}.map`);
      this.#perfMaps.set(pid, perf);
    }
    const fromPerfMap = this.#refreshOnce(perf.path, perf)?.lookup(addr);
    if (fromPerfMap !== undefined) return fromPerfMap;
    for (const dump of maps?.jitdumps ?? []) {
      const path = `${this.#proc}/${pid}/root${dump}`;
      let file = this.#jitdumps.get(path);
      if (!file) {
        file = new JitDumpFile(path);
        this.#jitdumps.set(path, file);
      }
      const name = this.#refreshOnce(path, file)?.lookup(addr);
      if (name !== undefined) return name;
    }
    return undefined;
  }
}

/** A JIT symbol source, re-read at most once per period. */
interface JitSource {
  table(): SymbolTable | undefined;
  readonly current: SymbolTable | undefined;
}

/** Executable mappings and jitdump files of a /proc/<pid>/maps text. */
export function parseMaps(text: string): ProcessMaps {
  const exec: Mapping[] = [];
  const jitdumps = new Set<string>();
  for (const line of text.split("\n")) {
    // start-end perms offset dev inode path
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) \S+ \d+\s*(.*)$/.exec(line);
    if (!m) continue;
    const path = m[5]!.replace(/ \(deleted\)$/, "");
    if (JITDUMP_PATH.test(path)) jitdumps.add(path);
    if (m[3]![2] !== "x") continue;
    exec.push({ start: parseInt(m[1]!, 16), end: parseInt(m[2]!, 16), offset: parseInt(m[4]!, 16), path });
  }
  exec.sort((a, b) => a.start - b.start);
  return { exec, jitdumps: [...jitdumps] };
}

/** What cached frames depend on in a process's maps: its executable mappings and jitdump files. */
function codeMapsKey(maps: ProcessMaps): string {
  let key = maps.jitdumps.join("\n");
  for (const m of maps.exec) key += `\n${m.start}-${m.end} ${m.offset} ${m.path}`;
  return key;
}

function findMapping(maps: Mapping[], addr: number): Mapping | undefined {
  let lo = 0;
  let hi = maps.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const m = maps[mid]!;
    if (addr < m.start) hi = mid - 1;
    else if (addr >= m.end) lo = mid + 1;
    else return m;
  }
  return undefined;
}

/** The pid of a process inside its own pid namespace (the number in its perf map's name). */
function namespacePid(proc: string, pid: number): number {
  try {
    const m = /^NSpid:\s+(.*)$/m.exec(readFileSync(`${proc}/${pid}/status`, "utf8"));
    const last = m?.[1]?.trim().split(/\s+/).at(-1);
    return last ? Number(last) : pid;
  } catch {
    return pid;
  }
}

function basename(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}
