/**
 * The parts of hpack.js (CommonJS, no type definitions of its own) that the project uses: its Huffman code and
 * static tables (the HPACK decoder's data, ./hpack-decoder.ts) and its compressor (tests encode header blocks).
 */
declare module "hpack.js" {
  interface Compressor {
    write(headers: Array<{ name: string; value: string; huffman?: boolean; neverIndex?: boolean }>): void;
    read(): Uint8Array;
  }
  const hpack: {
    /** RFC 7541 Appendix B: [bits, code] per symbol, 256 the EOS. */
    huffman: { encode: Array<[number, number]> };
    /** RFC 7541 Appendix A. */
    "static-table": { table: Array<{ name: string; value: string; nameSize: number }> };
    compressor: { create(options: { table: { maxSize: number } }): Compressor };
  };
  export default hpack;
}
