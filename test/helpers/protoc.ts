/** Reading what protoc prints (--decode, --decode_raw). */

/** A string as protoc prints it, C-escaped (\\nnn octal, \\xNN, \\n, \\", \\\\), back to its bytes as latin1 chars. */
export function unescapeC(s: string): string {
  return s.replace(/\\([0-7]{1,3}|x[0-9a-fA-F]{2}|.)/g, (_, e: string) => {
    if (/^[0-7]+$/.test(e)) return String.fromCharCode(parseInt(e, 8));
    if (e[0] === "x") return String.fromCharCode(parseInt(e.slice(1), 16));
    return ({ n: "\n", t: "\t", r: "\r" } as Record<string, string>)[e] ?? e;
  });
}

/** A message as protoc prints it: each field name (--decode) or number (--decode_raw) with its values in order. */
export type ProtocNode = { [field: string]: Array<string | ProtocNode> };

/** Parses protoc's text output (--decode or --decode_raw): `f {` opens a message, `}` closes it, `f: value` is a scalar. */
export function parseProtocText(text: string): ProtocNode {
  const root: ProtocNode = {};
  const stack: ProtocNode[] = [root];
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const top = stack[stack.length - 1]!;
    let m: RegExpExecArray | null;
    if ((m = /^(\w+) \{$/.exec(line))) {
      const child: ProtocNode = {};
      (top[m[1]!] ??= []).push(child);
      stack.push(child);
    } else if (line === "}") stack.pop();
    else if ((m = /^(\w+): (.*)$/.exec(line))) (top[m[1]!] ??= []).push(m[2]!.startsWith('"') ? unescapeC(m[2]!.slice(1, -1)) : m[2]!);
    else throw new Error(`unexpected protoc output line: ${line}`);
  }
  return root;
}
