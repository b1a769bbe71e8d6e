/**
 * Counts the items of an OTLP Export request by walking the protobuf wire format (no decoding into objects),
 * so the receiver can summarise heavy traffic cheaply.
 */
import type { Signal } from "../config";

/** Field path from the request to the items: resource level, scope level, item (metrics: metric, data, point). */
const ITEM_FIELD = 2;
const METRIC_DATA_FIELDS = new Set([5, 7, 9, 10, 11]);

export interface RequestCounts {
  resources: number;
  scopes: number;
  items: number;
}

class Reader {
  pos: number;
  constructor(
    readonly buf: Uint8Array,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }

  varint(): number {
    let result = 0;
    let shift = 0;
    for (;;) {
      if (this.pos >= this.end) throw new RangeError("truncated varint");
      const b = this.buf[this.pos++]!;
      if (shift < 28) result |= (b & 0x7f) << shift;
      else result += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return result >>> 0 === result ? result : result;
      shift += 7;
    }
  }

  /** Visits each field: `fn(field, start, end)` for length-delimited ones; others are skipped. */
  each(fn: (field: number, start: number, end: number) => void): void {
    while (this.pos < this.end) {
      const key = this.varint();
      const field = key >>> 3;
      switch (key & 7) {
        case 0:
          this.varint();
          break;
        case 1:
          this.pos += 8;
          break;
        case 5:
          this.pos += 4;
          break;
        case 2: {
          const len = this.varint();
          const start = this.pos;
          this.pos += len;
          if (this.pos > this.end) throw new RangeError("truncated field");
          fn(field, start, this.pos);
          break;
        }
        default:
          throw new RangeError(`unsupported wire type ${key & 7}`);
      }
    }
  }
}

export function countItems(signal: Signal, buf: Uint8Array): RequestCounts {
  const c: RequestCounts = { resources: 0, scopes: 0, items: 0 };
  new Reader(buf, 0, buf.length).each((f, s, e) => {
    if (f !== 1) return;
    c.resources++;
    new Reader(buf, s, e).each((f2, s2, e2) => {
      if (f2 !== 2) return;
      c.scopes++;
      new Reader(buf, s2, e2).each((f3, s3, e3) => {
        if (f3 !== ITEM_FIELD) return;
        if (signal !== "metrics") {
          c.items++;
          return;
        }
        new Reader(buf, s3, e3).each((f4, s4, e4) => {
          if (!METRIC_DATA_FIELDS.has(f4)) return;
          new Reader(buf, s4, e4).each((f5) => {
            if (f5 === 1) c.items++;
          });
        });
      });
    });
  });
  return c;
}
