/** Files embedded in the binary with `import path from "..." with { type: "file" }`: the import is their path. */
declare module "*.bpf.o" {
  const path: string;
  export default path;
}
declare module "*.so.1" {
  const path: string;
  export default path;
}
/** C source imported as text (`with { type: "text" }`): compiled at run time by bun:ffi's TinyCC. */
declare module "*.c" {
  const text: string;
  export default text;
}
