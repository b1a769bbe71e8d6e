/** The parts of hpack.js (CommonJS, no type definitions of its own) that the HTTP/2 parser uses. */
declare module "hpack.js" {
  interface Entry {
    name: string;
    value: string;
    nameSize: number;
  }
  interface Decoder {
    push(chunk: Uint8Array): void;
    isEmpty(): boolean;
    decodeBit(): number;
    decodeInt(): number;
    /** Raw octets (a Buffer) or Huffman-decoded octets. */
    decodeStr(): ArrayLike<number>;
  }
  interface Compressor {
    write(headers: Array<{ name: string; value: string; huffman?: boolean; neverIndex?: boolean }>): void;
    read(): Uint8Array;
  }
  interface Table {
    maxSize: number;
    size: number;
    lookup(index: number): Entry;
    add(name: string, value: string, nameSize: number, valueSize: number): void;
    updateSize(size: number): void;
  }
  const hpack: {
    /** RFC 7541 Appendix B: [bits, code] per symbol, 256 the EOS. */
    huffman: { encode: Array<[number, number]> };
    /** RFC 7541 Appendix A. */
    "static-table": { table: Array<{ name: string; value: string; nameSize: number }> };
    compressor: { create(options: { table: { maxSize: number } }): Compressor };
    decoder: { create(): Decoder };
    table: { create(options: { maxSize: number }): Table };
    utils: { stringify(octets: ArrayLike<number>): string };
  };
  export default hpack;
}
