/**
 * Where in the YAML file each problem is: its key path mapped onto the document's nodes (their source ranges), so
 * every problem can be reported with a line and column. An unknown key points at the key; a bad value at the
 * value; a key the file does not have at the nearest section it does have.
 */
import { isMap, isPair, isScalar, isSeq, type Document, type LineCounter, type Node, type Pair } from "yaml";
import type { ConfigProblem } from "./problems";

/** The section name of the original agent, accepted as an alias of `svc` (see load.ts). */
const LEGACY_LOG_SECTION = "telegen";

/** Splits `a.b[0].c` into ["a", "b", 0, "c"]. */
function pathParts(path: string): Array<string | number> {
  const out: Array<string | number> = [];
  for (const m of path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) out.push(m[2] !== undefined ? Number(m[2]) : m[1]!);
  return out;
}

function keyText(pair: Pair): string | undefined {
  return isScalar(pair.key) ? String(pair.key.value) : undefined;
}

/** Start offset of the node a key path names (of its key for an unknown key), else of its nearest ancestor in the file. */
function offsetOf(doc: Document, path: string, unknownKey: boolean): number | undefined {
  const parts = pathParts(path);
  let node: unknown = doc.contents;
  let offset: number | undefined = (doc.contents as Node | null)?.range?.[0];
  /** Where the section found last is named (its key): a key missing inside it is reported there. */
  let section = offset;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (isSeq(node) && /^\d+$/.test(String(part))) {
      const item = node.items[Number(part)] as Node | undefined;
      if (!item?.range) return section;
      node = item;
      offset = section = item.range[0];
      continue;
    }
    if (!isMap(node)) return offset;
    // Keys may contain dots (header names): take the longest run of parts that is one key of this mapping.
    let pair: Pair | undefined;
    let used = 1;
    for (let j = parts.length; j > i && !pair; j--) {
      if (parts.slice(i, j).some((p) => typeof p === "number")) continue;
      const key = parts.slice(i, j).join(".");
      const alias = i === 0 && key === "svc" ? LEGACY_LOG_SECTION : undefined;
      pair = node.items.find((p) => isPair(p) && (keyText(p) === key || (alias !== undefined && keyText(p) === alias)));
      used = j - i;
    }
    if (!pair) return section;
    i += used - 1;
    const last = i === parts.length - 1;
    const keyStart = (pair.key as Node | null)?.range?.[0];
    const value = pair.value as Node | null;
    if (last && (unknownKey || !value?.range)) return keyStart ?? offset;
    node = value;
    offset = value?.range?.[0] ?? keyStart ?? offset;
    section = keyStart ?? offset;
  }
  return offset;
}

/**
 * The problems with `line` and `column` filled in from the document. Problems about a value set by an SVC_*
 * override name that variable instead (`overridden`: key path -> variable).
 */
export function locateProblems(problems: ConfigProblem[], doc: Document, lineCounter: LineCounter, overridden: ReadonlyMap<string, string>): ConfigProblem[] {
  return problems.map((p) => {
    if (p.line !== undefined) return p;
    const variable = overridden.get(p.path);
    if (variable) return { ...p, variable };
    const offset = offsetOf(doc, p.path, p.message === "unknown key");
    if (offset === undefined) return p;
    const { line, col } = lineCounter.linePos(offset);
    return { ...p, line, column: col };
  });
}
