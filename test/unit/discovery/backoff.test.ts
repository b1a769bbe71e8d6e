import { describe, expect, test } from "bun:test";
import { Backoff, sleep } from "../../../src/discovery/backoff";

describe("Backoff", () => {
  test("doubles from the initial delay up to the cap, with at most 20% jitter below; reset starts again", () => {
    const b = new Backoff(500, 30_000);
    const expected = [500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000];
    for (const e of expected) {
      const d = b.nextDelayMs();
      expect(d).toBeLessThanOrEqual(e);
      expect(d).toBeGreaterThanOrEqual(Math.floor(e * 0.8));
    }
    b.reset();
    expect(b.nextDelayMs()).toBeLessThanOrEqual(500);
  });

  test("a cap below the initial delay wins", () => {
    const b = new Backoff(500, 200);
    for (let i = 0; i < 5; i++) expect(b.nextDelayMs()).toBeLessThanOrEqual(200);
  });

  test("sleep ends at once when the signal aborts", async () => {
    const ac = new AbortController();
    const p = sleep(3_600_000, ac.signal);
    ac.abort();
    await p;
    await sleep(3_600_000, ac.signal);
  });
});
