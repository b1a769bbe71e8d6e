/** `.proto` files imported `with { type: "file" }` resolve to their path (embedded in the compiled binary). */
declare module "*.proto" {
  const path: string;
  export default path;
}
