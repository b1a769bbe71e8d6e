/** Newline-delimited JSON streams (Docker /events, Kubernetes watch). */

/** Splits a byte stream of newline-separated JSON documents into objects (blank and broken lines skipped). */
export async function* parseJsonLines<T>(body: ReadableStream<Uint8Array>): AsyncGenerator<T> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of body) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf("\n")) !== -1) {
      const line = pending.slice(0, nl).trim();
      pending = pending.slice(nl + 1);
      if (!line) continue;
      try {
        yield JSON.parse(line) as T;
      } catch {
        // a broken record: skip it, the next re-list repairs the state
      }
    }
  }
}
