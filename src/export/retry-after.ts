/** Retry-After (RFC 9110 §10.2.3): the delay a server asks for, in either of its two forms. */

/** The delay of a `Retry-After` header in ms (delay-seconds or an HTTP date), undefined when absent or malformed (the backoff then applies). */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  // An HTTP-date (IMF-fixdate, RFC 850 or asctime) starts with a day name; Date.parse alone also reads
  // "-5", "2015" or "5 PM" as dates, and a negative Retry-After would become "retry at once".
  if (!/^(mon|tue|wed|thu|fri|sat|sun)[a-z]*,? /i.test(v)) return undefined;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
