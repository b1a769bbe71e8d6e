/** Reading what protoc prints (--decode, --decode_raw). */

/** A string as protoc prints it, C-escaped (\\nnn octal, \\xNN, \\n, \\", \\\\), back to its bytes as latin1 chars. */
export function unescapeC(s: string): string {
  return s.replace(/\\([0-7]{1,3}|x[0-9a-fA-F]{2}|.)/g, (_, e: string) => {
    if (/^[0-7]+$/.test(e)) return String.fromCharCode(parseInt(e, 8));
    if (e[0] === "x") return String.fromCharCode(parseInt(e.slice(1), 16));
    return ({ n: "\n", t: "\t", r: "\r" } as Record<string, string>)[e] ?? e;
  });
}
