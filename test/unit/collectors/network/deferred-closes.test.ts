/** DeferredCloses: a close waits out its grace and the records it follows; a bound applies the oldest at once. */
import { expect, test } from "bun:test";
import { DeferredCloses } from "../../../../src/collectors/network/deferred-closes";

test("a close applies after its grace, once a record written after it was handled or the other ring is empty; in order", () => {
  const applied: Array<[string, bigint]> = [];
  const q = new DeferredCloses((key, ns) => applied.push([key, ns]), 2000, 3);
  q.add("a", 100n, 0);
  q.add("b", 200n, 500);
  let caughtUp = false;
  let asked = 0;
  const ring = () => (asked++, caughtUp);
  // Within the grace nothing applies, and the ring is not asked.
  q.applyDue(1999, ring);
  expect([applied, asked]).toEqual([[], 0]);
  // Past it, with the other ring behind and no later record handled: still waiting.
  q.applyDue(5000, ring);
  expect(applied).toEqual([]);
  // A record written after "a" but before "b" was handled: "a" applies, "b" waits.
  q.lastNs = 150n;
  q.applyDue(5000, ring);
  expect(applied).toEqual([["a", 100n]]);
  // The other ring has nothing left: "b" applies too.
  caughtUp = true;
  q.applyDue(5000, ring);
  expect(applied).toEqual([["a", 100n], ["b", 200n]]);
});

test("past `max` waiting the oldest applies at once; clear forgets the rest", () => {
  const applied: string[] = [];
  const q = new DeferredCloses((key) => applied.push(key), 2000, 2);
  for (const k of ["a", "b", "c", "d"]) q.add(k, 1n, 0);
  expect(applied).toEqual(["a", "b"]);
  q.clear();
  q.applyDue(10_000, () => true);
  expect(applied).toEqual(["a", "b"]);
});
