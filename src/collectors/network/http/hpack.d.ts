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
  interface Table {
    maxSize: number;
    size: number;
    lookup(index: number): Entry;
    add(name: string, value: string, nameSize: number, valueSize: number): void;
    updateSize(size: number): void;
  }
  const hpack: {
    decoder: { create(): Decoder };
    table: { create(options: { maxSize: number }): Table };
    utils: { stringify(octets: ArrayLike<number>): string };
  };
  export default hpack;
}
