/** The benchmark runner's pure parts: BENCH-RESULT parsing, the export table adapter, the PNG chart writer. */
import { describe, expect, test } from "bun:test";
import { inflateSync } from "node:zlib";
import { collect, parseResults } from "../../../bench/lib/collect";
import { encodePng, renderChart, tickLabel } from "../../../bench/lib/png-chart";

const EXPORT_OUTPUT = `export benchmark: 10000 spans per run, batch 512, gzip, receiver on 127.0.0.1:35065, 1 rounds
run                                   spans      spans/s    CPU µs/span spans/CPU-second    cores receiver cores
svc-agent pipeline (round 1)          10000        11064          33.25            30077     0.37           0.15
OTel JS SDK BSP+gRPC (round 1)        10000         4661          57.87            17279     0.27           0.06
median svc-agent                      10000        11064          33.25            30077     0.37           0.15
median OTel JS SDK                    10000         4661          57.87            17279     0.27           0.06
`;

/** Chunks of a PNG: type, data, and whether the stored CRC matches (checked with an independent bitwise CRC). */
function chunks(png: Buffer): Array<{ type: string; data: Buffer; crcOk: boolean }> {
  const crc = (b: Buffer) => {
    let c = ~0;
    for (const x of b) {
      c ^= x;
      for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
    }
    return ~c >>> 0;
  };
  const out = [];
  for (let off = 8; off < png.length; ) {
    const len = png.readUInt32BE(off);
    const typeAndData = png.subarray(off + 4, off + 8 + len);
    out.push({ type: typeAndData.subarray(0, 4).toString("ascii"), data: typeAndData.subarray(4), crcOk: crc(typeAndData) === png.readUInt32BE(off + 8 + len) });
    off += 12 + len;
  }
  return out;
}

describe("BENCH-RESULT collection", () => {
  test("parses result lines among other output and reports unreadable ones", () => {
    const line = JSON.stringify({ bench: "b", rows: [{ name: "x", agent: 2, reference: 4, unit: "ms" }] });
    const { results, errors } = parseResults(`table\nBENCH-RESULT ${line}\nnote: BENCH-RESULT not at start\nBENCH-RESULT {broken\n`);
    expect(results).toEqual([JSON.parse(line)]);
    expect(errors).toHaveLength(1);
  });

  test("bench/export.ts's own table becomes rows with its issue's targets", () => {
    const { results, adapted } = collect("export", EXPORT_OUTPUT);
    expect(adapted).toBe(true);
    const [spans, absolute, cpu] = results[0]!.rows;
    expect(spans).toMatchObject({ agent: 11064, reference: 4661, unit: "spans/s", met: false });
    expect(absolute).toMatchObject({ agent: 11064, met: false });
    expect(cpu).toMatchObject({ agent: 33.25, reference: 57.87 });
  });

  test("a BENCH-RESULT line wins over the adapter; unknown output gives nothing", () => {
    const line = `BENCH-RESULT ${JSON.stringify({ bench: "export", rows: [] })}`;
    expect(collect("export", `${EXPORT_OUTPUT}${line}\n`).adapted).toBe(false);
    expect(collect("other", "no figures").results).toEqual([]);
  });
});

describe("PNG chart writer", () => {
  test("encodes a valid PNG: signature, IHDR, CRCs, inflated IDAT of the right size with the pixels", () => {
    const rgb = new Uint8Array(3 * 2 * 3).fill(7);
    rgb.set([255, 0, 0], 0);
    const png = encodePng(3, 2, rgb);
    expect([...png.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const cs = chunks(png);
    expect(cs.map((c) => c.type)).toEqual(["IHDR", "IDAT", "IEND"]);
    expect(cs.every((c) => c.crcOk)).toBe(true);
    expect(cs[0]!.data.readUInt32BE(0)).toBe(3);
    expect(cs[0]!.data.readUInt32BE(4)).toBe(2);
    const raw = inflateSync(cs[1]!.data);
    expect(raw.length).toBe((3 * 3 + 1) * 2);
    expect([...raw.subarray(0, 4)]).toEqual([0, 255, 0, 0]);
  });

  test("renders a chart whose series colours appear in the image", () => {
    const png = renderChart({ title: "t", xLabel: "x", yLabel: "y", x: [10, 100, 1000], xLog: true, series: [{ name: "a", y: [1, 2, 3] }] });
    const idat = chunks(png).find((c) => c.type === "IDAT")!;
    const raw = inflateSync(idat.data);
    let blue = 0;
    for (let i = 0; i + 2 < raw.length; i++) if (raw[i] === 31 && raw[i + 1] === 119 && raw[i + 2] === 180) blue++;
    expect(blue).toBeGreaterThan(100);
  });

  test("tick labels are short", () => {
    expect([tickLabel(1000), tickLabel(1500), tickLabel(2_000_000), tickLabel(0.0042)]).toEqual(["1k", "1.5k", "2M", "0.0042"]);
  });
});
