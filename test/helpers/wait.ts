/** Polls a condition until it holds or a bound passes (never a bare sleep as synchronisation). */
export async function waitUntil<T>(
  probe: () => T | Promise<T>,
  options: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  let last: T | undefined;
  for (;;) {
    last = await probe();
    if (last) return last as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${options.what ?? "condition"}`);
    await Bun.sleep(options.intervalMs ?? 20);
  }
}

/** A JSON answer body, untyped for assertions (Response.json() is `unknown` in Bun's types). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function json(r: Response | Promise<Response>): Promise<any> {
  return (await r).json();
}

/** The first line a child process writes to `stream` (e.g. the port it bound), without waiting for the rest; the stream stays readable. */
export async function firstLine(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  reader.releaseLock();
  return text.split("\n")[0]!.trim();
}
