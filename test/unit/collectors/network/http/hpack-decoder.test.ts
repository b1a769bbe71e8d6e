/**
 * The HPACK decoder of the HTTP/2 parser: RFC 7541 Appendix C's examples (as hpack.js's test fixtures carry
 * them), round trips through hpack.js's compressor with random headers (fixed seed), and invalid Huffman strings
 * rejected with an HpackError.
 */
import { describe, expect, test } from "bun:test";
import hpack from "hpack.js";
import { HpackDecoder, HpackError, huffmanDecode, KEPT_NAMES, type HeaderFields } from "../../../../../src/collectors/network/http/hpack-decoder";

/** RFC 7541 C.3 to C.6: input octets, the fields decoded in order, the dynamic table's entry sizes (newest first). */
const EXAMPLES: Array<{ id: string; input: string; output: Array<[string, string]>; table: number[] }> = [
  { id: "C.3.1", input: "828684410f7777772e6578616d706c652e636f6d", output: [[":method","GET"],[":scheme","http"],[":path","/"],[":authority","www.example.com"]], table: [57] },
  { id: "C.3.2", input: "828684be58086e6f2d6361636865", output: [[":method","GET"],[":scheme","http"],[":path","/"],[":authority","www.example.com"],["cache-control","no-cache"]], table: [53,57] },
  { id: "C.3.3", input: "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565", output: [[":method","GET"],[":scheme","https"],[":path","/index.html"],[":authority","www.example.com"],["custom-key","custom-value"]], table: [54,53,57] },
  { id: "C.4.1", input: "828684418cf1e3c2e5f23a6ba0ab90f4ff", output: [[":method","GET"],[":scheme","http"],[":path","/"],[":authority","www.example.com"]], table: [57] },
  { id: "C.4.2", input: "828684be5886a8eb10649cbf", output: [[":method","GET"],[":scheme","http"],[":path","/"],[":authority","www.example.com"],["cache-control","no-cache"]], table: [53,57] },
  { id: "C.4.3", input: "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf", output: [[":method","GET"],[":scheme","https"],[":path","/index.html"],[":authority","www.example.com"],["custom-key","custom-value"]], table: [54,53,57] },
  { id: "C.5.1", input: "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d", output: [[":status","302"],["cache-control","private"],["date","Mon, 21 Oct 2013 20:13:21 GMT"],["location","https://www.example.com"]], table: [63,65,52,42] },
  { id: "C.5.2", input: "4803333037c1c0bf", output: [[":status","307"],["cache-control","private"],["date","Mon, 21 Oct 2013 20:13:21 GMT"],["location","https://www.example.com"]], table: [42,63,65,52] },
  { id: "C.5.3", input: "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076657273696f6e3d31", output: [[":status","200"],["cache-control","private"],["date","Mon, 21 Oct 2013 20:13:22 GMT"],["location","https://www.example.com"],["content-encoding","gzip"],["set-cookie","foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"]], table: [98,52,65] },
  { id: "C.6.1", input: "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3", output: [[":status","302"],["cache-control","private"],["date","Mon, 21 Oct 2013 20:13:21 GMT"],["location","https://www.example.com"]], table: [63,65,52,42] },
  { id: "C.6.2", input: "4883640effc1c0bf", output: [[":status","307"],["cache-control","private"],["date","Mon, 21 Oct 2013 20:13:21 GMT"],["location","https://www.example.com"]], table: [42,63,65,52] },
  { id: "C.6.3", input: "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007", output: [[":status","200"],["cache-control","private"],["date","Mon, 21 Oct 2013 20:13:22 GMT"],["location","https://www.example.com"],["content-encoding","gzip"],["set-cookie","foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"]], table: [98,52,65] },
];

const hex = (s: string) => Uint8Array.from(Buffer.from(s, "hex"));
/** What the decoder keeps of a header list: the last value of each kept name. */
function kept(list: Array<[string, string]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of list) if ((KEPT_NAMES as readonly string[]).includes(name)) out[name] = value;
  return out;
}
function asRecord(fields: HeaderFields): Record<string, string> {
  const out: Record<string, string> = {};
  KEPT_NAMES.forEach((name, k) => {
    if (fields[k] !== undefined) out[name] = fields[k]!;
  });
  return out;
}

describe("HPACK decoder", () => {
  test("RFC 7541 Appendix C: kept fields, table entry sizes and table size after each block", () => {
    let decoder = new HpackDecoder(4096, 4096);
    for (const e of EXAMPLES) {
      /* C.3 and C.4 start with a fresh 4096-octet table; C.5 and C.6 with a fresh 256-octet one. */
      if (e.id.endsWith(".1")) decoder = new HpackDecoder(e.id.startsWith("C.5") || e.id.startsWith("C.6") ? 256 : 4096, 4096);
      const fields: HeaderFields = [];
      const input = hex(e.input);
      decoder.decode(input, 0, input.length, fields);
      expect({ id: e.id, fields: asRecord(fields) }).toEqual({ id: e.id, fields: kept(e.output) });
      expect({ id: e.id, table: decoder.entrySizes() }).toEqual({ id: e.id, table: e.table });
      expect(decoder.size).toBe(e.table.reduce((a, b) => a + b, 0));
    }
  });

  test("round trips through hpack.js's compressor: random headers, Huffman or not, evictions and size updates (fixed seed)", () => {
    let seed = 0x2545f491;
    const rand = (n: number) => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    const names = [...KEPT_NAMES, "user-agent", "x-request-id", "accept", "cookie", "x-a", "grpc-message", "date", "content-length"];
    const str = (max: number) => {
      let s = "";
      const n = rand(max);
      for (let k = 0; k < n; k++) s += String.fromCharCode(rand(4) === 0 ? 0x80 + rand(128) : 0x20 + rand(95));
      return s;
    };
    let blocks = 0;
    for (const tableSize of [4096, 256, 64]) {
      const compressor = hpack.compressor.create({ table: { maxSize: tableSize } });
      const table = (compressor as unknown as { _table: { size: number; dynamic: unknown[] } })._table;
      const decoder = new HpackDecoder(tableSize, 4096);
      const fields: HeaderFields = [];
      for (let b = 0; b < 300; b++) {
        const list: Array<[string, string]> = [];
        const n = 1 + rand(12);
        for (let k = 0; k < n; k++) {
          const name = rand(5) === 0 ? str(20).toLowerCase() || "x" : names[rand(names.length)]!;
          /* Repeated values make indexed fields; the rest are literals. */
          list.push([name, rand(3) === 0 ? "same" : str(rand(4) === 0 ? 200 : 30)]);
        }
        if (rand(50) === 0) (compressor as unknown as { reset(): void }).reset();
        compressor.write(list.map(([name, value]) => ({ name, value, huffman: rand(2) === 0, neverIndex: rand(10) === 0 })));
        let block = new Uint8Array(0);
        for (let chunk = compressor.read(); chunk; chunk = compressor.read()) block = Uint8Array.from([...block, ...chunk]);
        decoder.decode(block, 0, block.length, fields);
        expect(asRecord(fields)).toEqual(kept(list));
        expect([decoder.size, decoder.length]).toEqual([table.size, table.dynamic.length]);
        blocks++;
      }
    }
    expect(blocks).toBe(900);
  });

  test("Huffman: decodes and counts alike; EOS, padding over 7 bits and padding with a 0 bit are errors", () => {
    /* RFC 7541 C.4.1: "www.example.com". */
    const www = hex("f1e3c2e5f23a6ba0ab90f4ff");
    const out = new Uint8Array(32);
    expect(huffmanDecode(www, 0, www.length, out)).toBe(15);
    expect(new TextDecoder().decode(out.subarray(0, 15))).toBe("www.example.com");
    expect(huffmanDecode(www, 0, www.length, undefined)).toBe(15);
    expect(huffmanDecode(www, 0, 0, undefined)).toBe(0);
    /* 'a' is 00011: then three 1 bits of padding. */
    expect(huffmanDecode(Uint8Array.of(0x1f), 0, 1, out)).toBe(1);
    expect(out[0]).toBe(0x61);
    const bad = [
      ["EOS (30 ones)", Uint8Array.of(0xff, 0xff, 0xff, 0xfc)],
      ["11 bits of padding", Uint8Array.of(0x1f, 0xff)],
      ["padding with a 0 bit", Uint8Array.of(0x18)],
      ["a whole octet of padding", Uint8Array.of(0xff)],
    ] as const;
    for (const [why, bytes] of bad) expect(() => huffmanDecode(bytes, 0, bytes.length, undefined), why).toThrow(HpackError);
  });

  test("a block repeated byte for byte: the same fields; a block that changed the table is decoded again", () => {
    const decoder = new HpackDecoder(4096, 4096);
    const decode = (bytes: Uint8Array, from = 0) => {
      const fields: HeaderFields = ["stale", "stale", "stale", "stale", "stale", "stale", "stale"];
      decoder.decode(bytes, from, bytes.length, fields);
      return asRecord(fields);
    };
    const c31 = hex("828684410f7777772e6578616d706c652e636f6d");
    const www = { ":method": "GET", ":scheme": "http", ":path": "/", ":authority": "www.example.com" };
    /* C.3.1 adds an entry: the same bytes again add another. */
    expect(decode(c31)).toEqual(www);
    expect(decode(c31)).toEqual(www);
    expect(decoder.entrySizes()).toEqual([57, 57]);
    /* Indexed fields only (62: the newest entry): repeated, at another offset too, the table untouched. */
    const indexed = hex("828684be");
    expect(decode(indexed)).toEqual(www);
    expect(decode(hex("00828684be"), 1)).toEqual(www);
    expect(decode(indexed)).toEqual(www);
    expect(decoder.entrySizes()).toEqual([57, 57]);
    /* A new :authority entry (literal with indexing, name index 1): the same indexed block now reads it. */
    expect(decode(hex("41056f74686572"))).toEqual({ ":authority": "other" });
    expect(decode(indexed)).toEqual({ ...www, ":authority": "other" });
    expect(decoder.entrySizes()).toEqual([47, 57, 57]);
    /* A size update empties the table: the indexed block no longer decodes. */
    expect(decode(hex("20"))).toEqual({});
    expect(() => decode(indexed)).toThrow(HpackError);
  });

  test("malformed blocks are HpackErrors: index 0, past the table, strings and integers past the block, size update over the bound", () => {
    const decoder = () => new HpackDecoder(4096, 4096);
    for (const b of [Uint8Array.of(0x80), Uint8Array.of(0xbf, 0x01), Uint8Array.of(0x04, 0x05, 0x61), Uint8Array.of(0xff), Uint8Array.of(0x3f, 0xe1, 0xff, 0x03), Uint8Array.of(0x04, 0x81, 0x18)]) {
      expect(() => decoder().decode(b, 0, b.length, [])).toThrow(HpackError);
    }
  });
});

describe("a partial decoder (a connection decoded from its middle)", () => {
  test("C.3: joined at the second block, the entry from before is unknown, the entries added since keep their true indexes", () => {
    const whole = new HpackDecoder(4096, 65536);
    const partial = new HpackDecoder(4096, 65536);
    partial.setPartial();
    const out: HeaderFields = new Array(KEPT_NAMES.length);
    whole.decode(hex(EXAMPLES[0]!.input), 0, hex(EXAMPLES[0]!.input).length, out);
    /* C.3.2 names :authority by the entry C.3.1 added (index 62): unknown to the partial decoder, no error. */
    const second = hex(EXAMPLES[1]!.input);
    partial.decode(second, 0, second.length, out);
    expect(asRecord(out)).toEqual({ ":method": "GET", ":scheme": "http", ":path": "/" });
    expect(partial.unknownFields).toBe(1);
    expect(() => new HpackDecoder(4096, 65536).decode(second, 0, second.length, out)).toThrow(HpackError);
    /* C.3.3 adds custom-key and names cache-control (its own, index 63 then 62 ... ) and :authority (from before). */
    whole.decode(second, 0, second.length, out);
    const third = hex(EXAMPLES[2]!.input);
    partial.decode(third, 0, third.length, out);
    expect(asRecord(out)).toEqual({ ":method": "GET", ":scheme": "https", ":path": "/index.html" });
    expect(partial.unknownFields).toBe(1);
    /* A block that changes nothing, twice (the second time remembered, not decoded): the same unknown count. */
    const still = Uint8Array.from([0x82, 0xc5]);
    partial.decode(still, 0, 2, out);
    expect(partial.unknownFields).toBe(1);
    partial.decode(still, 0, 2, out);
    expect([partial.unknownFields, asRecord(out)]).toEqual([1, { ":method": "GET" }]);
  });

  test("a literal naming an entry from before adds an entry of unknown name: fields that name it later count as unknown", () => {
    const partial = new HpackDecoder(4096, 65536);
    partial.setPartial();
    const out: HeaderFields = new Array(KEPT_NAMES.length);
    /* 0x7e: literal with incremental indexing, name index 62 (past the empty table), value "/x"; then 0xbe: index 62. */
    partial.decode(Uint8Array.from([0x7e, 0x02, 0x2f, 0x78]), 0, 4, out);
    expect(partial.unknownFields).toBe(1);
    expect(out[1]).toBeUndefined();
    partial.decode(Uint8Array.from([0x82, 0xbe]), 0, 2, out);
    expect(asRecord(out)).toEqual({ ":method": "GET" });
    expect(partial.unknownFields).toBe(1);
  });
});
