/** Bearer-token checks in constant time; the token itself is never logged or echoed. */
import { createHash, timingSafeEqual } from "node:crypto";

export type Access = "full" | "read_only" | "none";

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

export class TokenChecker {
  readonly #full: Buffer;
  readonly #readOnly: Buffer[];

  constructor(token: string, readOnlyTokens: string[]) {
    this.#full = digest(token);
    this.#readOnly = readOnlyTokens.filter((t) => t.length > 0).map(digest);
  }

  /**
   * What the Authorization header grants. Only the form `Bearer <token>` counts, the scheme in any case (RFC 7235:
   * auth-scheme is case-insensitive), one space, the token exactly: no padding, no other case of the token.
   * Every candidate is compared (constant time in the token's content).
   */
  check(header: string | null): { access: Access; reason: string } {
    if (header === null || header === "") return { access: "none", reason: "missing Authorization header" };
    if (header.length < 7 || header.slice(0, 7).toLowerCase() !== "bearer ") return { access: "none", reason: "Authorization must be of the form 'Bearer <token>'" };
    const presented = digest(header.slice(7));
    const full = timingSafeEqual(presented, this.#full);
    let readOnly = false;
    for (const t of this.#readOnly) readOnly = timingSafeEqual(presented, t) || readOnly;
    if (full) return { access: "full", reason: "" };
    if (readOnly) return { access: "read_only", reason: "" };
    return { access: "none", reason: "invalid token" };
  }
}
