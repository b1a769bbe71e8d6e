/**
 * The bundle as a gzipped tar for `tar -xzf`: tar-stream's ustar writer (pax headers for names ustar cannot
 * hold), all of it in memory (a bundle is a few hundred kB).
 */
import { gzipSync } from "node:zlib";
import { pack } from "tar-stream";

export interface TarEntry {
  /** Path inside the archive; a trailing "/" makes a directory. */
  name: string;
  data?: Uint8Array | string;
  /** Permission bits (default 0644 for files, 0755 for directories). */
  mode?: number;
  mtime?: Date;
}

/** The uncompressed archive. */
export async function tar(entries: readonly TarEntry[]): Promise<Uint8Array> {
  const archive = pack();
  const chunks: Uint8Array[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    archive.on("data", (c) => chunks.push(c as Uint8Array));
    archive.on("end", resolve);
    archive.on("error", reject);
  });
  for (const e of entries) {
    const directory = e.name.endsWith("/");
    const header = { name: e.name, type: directory ? "directory" : "file", mode: e.mode ?? (directory ? 0o755 : 0o644), mtime: e.mtime ?? new Date(), uid: 0, gid: 0, uname: "root", gname: "root" } as const;
    if (directory) archive.entry(header);
    else archive.entry(header, e.data ?? "");
  }
  archive.finalize();
  await ended;
  return Buffer.concat(chunks);
}

/** The archive, gzipped (.tar.gz). */
export async function tarGz(entries: readonly TarEntry[]): Promise<Uint8Array> {
  return gzipSync(await tar(entries));
}
