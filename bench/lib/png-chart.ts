/**
 * A small line-chart rasteriser for the benchmark report: axes (linear or log10), grid, tick labels, one
 * polyline with markers per series, a legend, written as an RGB PNG with node:zlib. No browser, no native
 * dependency. Text uses a built-in 5x7 bitmap font (upper case, digits, a few symbols), drawn at 2x.
 */
import { deflateSync } from "node:zlib";

const WIDTH_PX = 880;
const HEIGHT_PX = 500;
const MARGIN = { left: 110, right: 24, top: 56, bottom: 70 };
const FONT_SCALE = 2;
const GLYPH_W = 5;
const GLYPH_H = 7;
const BACKGROUND: Rgb = [255, 255, 255];
const AXIS: Rgb = [40, 40, 40];
const GRID: Rgb = [225, 225, 225];
const PALETTE: Rgb[] = [
  [31, 119, 180],
  [214, 39, 40],
  [44, 160, 44],
  [255, 127, 14],
  [148, 103, 189],
  [140, 86, 75],
];

type Rgb = [number, number, number];

export interface ChartSeries {
  name: string;
  /** y per x of the chart (NaN or undefined: no point). */
  y: Array<number | undefined>;
}

export interface Chart {
  title: string;
  xLabel: string;
  yLabel: string;
  x: number[];
  series: ChartSeries[];
  xLog?: boolean;
  yLog?: boolean;
}

/** 5x7 glyphs, rows top to bottom, '#' set. Lower-case text is drawn in upper case. */
const FONT: Record<string, string> = {
  A: " ### |#   #|#   #|#####|#   #|#   #|#   #",
  B: "#### |#   #|#   #|#### |#   #|#   #|#### ",
  C: " ### |#   #|#    |#    |#    |#   #| ### ",
  D: "#### |#   #|#   #|#   #|#   #|#   #|#### ",
  E: "#####|#    |#    |#### |#    |#    |#####",
  F: "#####|#    |#    |#### |#    |#    |#    ",
  G: " ### |#   #|#    |# ###|#   #|#   #| ####",
  H: "#   #|#   #|#   #|#####|#   #|#   #|#   #",
  I: " ### |  #  |  #  |  #  |  #  |  #  | ### ",
  J: "  ###|   # |   # |   # |   # |#  # | ##  ",
  K: "#   #|#  # |# #  |##   |# #  |#  # |#   #",
  L: "#    |#    |#    |#    |#    |#    |#####",
  M: "#   #|## ##|# # #|# # #|#   #|#   #|#   #",
  N: "#   #|##  #|# # #|#  ##|#   #|#   #|#   #",
  O: " ### |#   #|#   #|#   #|#   #|#   #| ### ",
  P: "#### |#   #|#   #|#### |#    |#    |#    ",
  Q: " ### |#   #|#   #|#   #|# # #|#  # | ## #",
  R: "#### |#   #|#   #|#### |# #  |#  # |#   #",
  S: " ####|#    |#    | ### |    #|    #|#### ",
  T: "#####|  #  |  #  |  #  |  #  |  #  |  #  ",
  U: "#   #|#   #|#   #|#   #|#   #|#   #| ### ",
  V: "#   #|#   #|#   #|#   #|#   #| # # |  #  ",
  W: "#   #|#   #|#   #|# # #|# # #|# # #| # # ",
  X: "#   #|#   #| # # |  #  | # # |#   #|#   #",
  Y: "#   #|#   #| # # |  #  |  #  |  #  |  #  ",
  Z: "#####|    #|   # |  #  | #   |#    |#####",
  "0": " ### |#   #|#  ##|# # #|##  #|#   #| ### ",
  "1": "  #  | ##  |  #  |  #  |  #  |  #  | ### ",
  "2": " ### |#   #|    #|   # |  #  | #   |#####",
  "3": "#####|   # |  #  |   # |    #|#   #| ### ",
  "4": "   # |  ## | # # |#  # |#####|   # |   # ",
  "5": "#####|#    |#### |    #|    #|#   #| ### ",
  "6": "  ## | #   |#    |#### |#   #|#   #| ### ",
  "7": "#####|    #|   # |  #  | #   | #   | #   ",
  "8": " ### |#   #|#   #| ### |#   #|#   #| ### ",
  "9": " ### |#   #|#   #| ####|    #|   # | ##  ",
  " ": "     |     |     |     |     |     |     ",
  ".": "     |     |     |     |     | ##  | ##  ",
  ",": "     |     |     |     | ##  |  #  | #   ",
  ":": "     | ##  | ##  |     | ##  | ##  |     ",
  "-": "     |     |     |#####|     |     |     ",
  "+": "     |  #  |  #  |#####|  #  |  #  |     ",
  "/": "     |    #|   # |  #  | #   |#    |     ",
  "(": "   # |  #  | #   | #   | #   |  #  |   # ",
  ")": " #   |  #  |   # |   # |   # |  #  | #   ",
  "%": "##   |##  #|   # |  #  | #   |#  ##|   ##",
  "_": "     |     |     |     |     |     |#####",
  "=": "     |     |#####|     |#####|     |     ",
  "<": "   # |  #  | #   |#    | #   |  #  |   # ",
  ">": " #   |  #  |   # |    #|   # |  #  | #   ",
  "*": "     |  #  |# # #| ### |# # #|  #  |     ",
  "'": "  #  |  #  |     |     |     |     |     ",
  "?": " ### |#   #|    #|   # |  #  |     |  #  ",
};

class Canvas {
  readonly pixels: Uint8Array;
  constructor(
    readonly width: number,
    readonly height: number,
  ) {
    this.pixels = new Uint8Array(width * height * 3);
    this.rect(0, 0, width, height, BACKGROUND);
  }

  set(x: number, y: number, c: Rgb): void {
    x = Math.round(x);
    y = Math.round(y);
    if (x < 0 || y < 0 || x >= this.width || y >= this.height) return;
    const i = (y * this.width + x) * 3;
    this.pixels[i] = c[0];
    this.pixels[i + 1] = c[1];
    this.pixels[i + 2] = c[2];
  }

  rect(x: number, y: number, w: number, h: number, c: Rgb): void {
    for (let j = 0; j < h; j++) for (let i = 0; i < w; i++) this.set(x + i, y + j, c);
  }

  /** A line `thickness` pixels wide (square brush along a DDA walk). */
  line(x0: number, y0: number, x1: number, y1: number, c: Rgb, thickness = 1): void {
    const steps = Math.max(1, Math.ceil(Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0))));
    const off = Math.floor((thickness - 1) / 2);
    for (let s = 0; s <= steps; s++) {
      const x = x0 + ((x1 - x0) * s) / steps;
      const y = y0 + ((y1 - y0) * s) / steps;
      this.rect(Math.round(x) - off, Math.round(y) - off, thickness, thickness, c);
    }
  }

  textWidth(text: string): number {
    return text.length * (GLYPH_W + 1) * FONT_SCALE;
  }

  /** Draws text with its top-left corner at (x, y); `vertical` turns it 90 degrees (reads bottom to top). */
  text(x: number, y: number, text: string, c: Rgb, vertical = false): void {
    let pen = 0;
    for (const ch of text) {
      const glyph = FONT[ch] ?? FONT[ch.toUpperCase()] ?? FONT["?"]!;
      const rows = glyph.split("|");
      for (let r = 0; r < GLYPH_H; r++) {
        for (let col = 0; col < GLYPH_W; col++) {
          if (rows[r]![col] !== "#") continue;
          const gx = pen + col * FONT_SCALE;
          const gy = r * FONT_SCALE;
          if (vertical) this.rect(x + gy, y - gx - FONT_SCALE, FONT_SCALE, FONT_SCALE, c);
          else this.rect(x + gx, y + gy, FONT_SCALE, FONT_SCALE, c);
        }
      }
      pen += (GLYPH_W + 1) * FONT_SCALE;
    }
  }
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, "ascii");
  const body = Buffer.concat([head.subarray(4), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body), 0);
  return Buffer.concat([head.subarray(0, 4), body, crc]);
}

/** Encodes RGB pixels as a PNG (8-bit truecolour, filter 0 on every row). */
export function encodePng(width: number, height: number, rgb: Uint8Array): Buffer {
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) {
    raw[y * (width * 3 + 1)] = 0;
    raw.set(rgb.subarray(y * width * 3, (y + 1) * width * 3), y * (width * 3 + 1) + 1);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", new Uint8Array(0))]);
}

/** Short tick label: 1500 -> 1.5k, 2000000 -> 2M, 0.0042 -> 0.0042. */
export function tickLabel(v: number): string {
  const a = Math.abs(v);
  const trim = (n: number) => Number(n.toPrecision(3)).toString();
  if (a >= 1e9) return `${trim(v / 1e9)}G`;
  if (a >= 1e6) return `${trim(v / 1e6)}M`;
  if (a >= 1e3) return `${trim(v / 1e3)}k`;
  return trim(v);
}

interface Axis {
  min: number;
  max: number;
  log: boolean;
  ticks: number[];
}

function axis(values: number[], log: boolean): Axis {
  const finite = values.filter((v) => Number.isFinite(v) && (!log || v > 0));
  let min = Math.min(...finite);
  let max = Math.max(...finite);
  if (!finite.length) (min = 0), (max = 1);
  if (log) {
    const lo = Math.floor(Math.log10(min));
    const hi = Math.max(lo + 1, Math.ceil(Math.log10(max)));
    const ticks: number[] = [];
    for (let e = lo; e <= hi; e++) ticks.push(10 ** e);
    return { min: 10 ** lo, max: 10 ** hi, log, ticks };
  }
  min = Math.min(0, min);
  if (max === min) max = min + 1;
  const raw = (max - min) / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const top = Math.ceil(max / step) * step;
  const ticks: number[] = [];
  for (let v = min; v <= top + step / 2; v += step) ticks.push(Number(v.toPrecision(12)));
  return { min, max: top, log, ticks };
}

function position(a: Axis, v: number): number {
  return a.log ? (Math.log10(v) - Math.log10(a.min)) / (Math.log10(a.max) - Math.log10(a.min)) : (v - a.min) / (a.max - a.min);
}

/** Renders the chart to PNG bytes. */
export function renderChart(chart: Chart): Buffer {
  const cv = new Canvas(WIDTH_PX, HEIGHT_PX);
  const plotW = WIDTH_PX - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT_PX - MARGIN.top - MARGIN.bottom;
  const xa = axis(chart.x, chart.xLog ?? false);
  const ys = chart.series.flatMap((s) => s.y.filter((v): v is number => v !== undefined && Number.isFinite(v)));
  const ya = axis(ys, chart.yLog ?? false);
  const px = (v: number) => MARGIN.left + position(xa, v) * plotW;
  const py = (v: number) => MARGIN.top + plotH - position(ya, v) * plotH;

  cv.text(MARGIN.left, 14, chart.title, AXIS);
  for (const t of ya.ticks) {
    const y = py(t);
    cv.line(MARGIN.left, y, MARGIN.left + plotW, y, GRID);
    const label = tickLabel(t);
    cv.text(MARGIN.left - 8 - cv.textWidth(label), y - GLYPH_H, label, AXIS);
  }
  for (const t of xa.ticks) {
    const x = px(t);
    cv.line(x, MARGIN.top, x, MARGIN.top + plotH, GRID);
    const label = tickLabel(t);
    cv.text(x - cv.textWidth(label) / 2, MARGIN.top + plotH + 8, label, AXIS);
  }
  cv.line(MARGIN.left, MARGIN.top, MARGIN.left, MARGIN.top + plotH, AXIS, 2);
  cv.line(MARGIN.left, MARGIN.top + plotH, MARGIN.left + plotW, MARGIN.top + plotH, AXIS, 2);
  const xl = chart.xLabel + (xa.log ? " (log)" : "");
  cv.text(MARGIN.left + plotW / 2 - cv.textWidth(xl) / 2, HEIGHT_PX - 28, xl, AXIS);
  const yl = chart.yLabel + (ya.log ? " (log)" : "");
  cv.text(8, MARGIN.top + plotH / 2 + cv.textWidth(yl) / 2, yl, AXIS, true);

  chart.series.forEach((s, si) => {
    const colour = PALETTE[si % PALETTE.length]!;
    let prev: [number, number] | undefined;
    chart.x.forEach((xv, i) => {
      const yv = s.y[i];
      if (yv === undefined || !Number.isFinite(yv) || (ya.log && yv <= 0)) {
        prev = undefined;
        return;
      }
      const p: [number, number] = [px(xv), py(yv)];
      if (prev) cv.line(prev[0], prev[1], p[0], p[1], colour, 3);
      cv.rect(p[0] - 4, p[1] - 4, 9, 9, colour);
      prev = p;
    });
    const ly = MARGIN.top + 8 + si * 22;
    const lx = MARGIN.left + 14;
    cv.rect(lx, ly + 3, 18, 8, colour);
    cv.text(lx + 26, ly, s.name, colour);
  });
  return encodePng(WIDTH_PX, HEIGHT_PX, cv.pixels);
}
