/** Scrubbing secrets out of free text (log records, validation messages, bundle files): which secrets is src/config/secrets.ts's business. */

/** Replaces a secret in every view of the configuration. */
export const REDACTED = "[REDACTED]";

/**
 * Secrets shorter than this are replaced only where they stand as a whole token (not next to a letter or
 * digit): `bearer_token: x` must not turn "export" into "e[REDACTED]port". Longer ones are replaced anywhere.
 */
const SCRUB_ANYWHERE_LENGTH = 16;
const tokenPatterns = new Map<string, RegExp>();

function tokenPattern(s: string): RegExp {
  let re = tokenPatterns.get(s);
  if (!re) {
    if (tokenPatterns.size > 256) tokenPatterns.clear();
    const literal = s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    re = new RegExp("(?<![A-Za-z0-9])" + literal + "(?![A-Za-z0-9])", "g");
    tokenPatterns.set(s, re);
  }
  return re;
}

function replaceSecret(text: string, s: string): string {
  if (!text.includes(s)) return text;
  return s.length >= SCRUB_ANYWHERE_LENGTH ? text.replaceAll(s, REDACTED) : text.replace(tokenPattern(s), REDACTED);
}

/** Replaces every occurrence of `secrets` (and of their JSON-escaped form) in `text` by REDACTED. */
export function scrubText(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) {
    out = replaceSecret(out, s);
    const escaped = JSON.stringify(s).slice(1, -1);
    if (escaped !== s) out = replaceSecret(out, escaped);
  }
  return out;
}
