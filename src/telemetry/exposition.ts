/**
 * Text exposition of the metric registry, in the Prometheus 0.0.4 format or OpenMetrics 1.0.0.
 *
 * prom-client stays the metric store (Counter/Gauge/Histogram), but its own `Registry.metrics()` costs ~160 us of
 * formatting for our ~100 lines under Bun, and its `get()` builds an object per sample (per bucket for histograms).
 * This formatter reads the stored samples (`hashMap`, after the metric's `collect()`) and writes the same text in
 * one pass; the HELP/TYPE lines and the histograms' `le` labels are formatted once per metric and kept. Metric
 * types it does not know (summaries) go through `get()`.
 */
import type { Registry } from "prom-client";

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
export const OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Record<string, string | number | undefined>;

interface MetricValue {
  value: number;
  labels?: Labels;
  metricName?: string;
}

interface MetricObject {
  name: string;
  help: string;
  type: string;
  values: MetricValue[];
}

/** What prom-client keeps per label set: counters and gauges `{value, labels}`; histograms buckets, sum and count. */
interface StoredSample {
  value: number;
  labels: Labels;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

/** The fields of prom-client's Counter, Gauge and Histogram this formatter reads. */
interface StoredMetric {
  name: string;
  help: string;
  type: string;
  hashMap: Record<string, StoredSample>;
  upperBounds?: number[];
  collect?: () => unknown;
  get(): Promise<MetricObject>;
}

/** Text of one metric that depends only on its name, help and type (kept until one of them changes). */
interface Preformatted {
  name: string;
  help: string;
  /** HELP and TYPE lines per format. */
  headerProm: string;
  headerOpenMetrics: string;
  /** Sample name of counters and gauges per format (OpenMetrics counters end in `_total`). */
  sampleProm: string;
  sampleOpenMetrics: string;
  /** Histograms: `<name>_bucket{le="<bound>"` per upper bound (the label set and `}` follow). */
  buckets: string[];
}

const preformatted = new WeakMap<StoredMetric, Preformatted>();

const escapeHelp = (s: string) => (/[\\\n]/.test(s) ? s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n") : s);
const escapeLabel = (s: string) => (/[\\\n"]/.test(s) ? s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"') : s);

function formatValue(v: number): string {
  if (v - v === 0) return String(v); // finite
  if (Number.isNaN(v)) return "NaN";
  return v > 0 ? "+Inf" : "-Inf";
}

/** `k="v",k2="v2"` (no braces), undefined values left out. */
function formatPairs(labels: Labels | undefined): string {
  let out = "";
  for (const k in labels) {
    const v = labels[k];
    if (v === undefined) continue;
    out += `${out ? "," : ""}${k}="${typeof v === "string" ? escapeLabel(v) : String(v)}"`;
  }
  return out;
}

function formatLabels(labels: Labels | undefined): string {
  const pairs = formatPairs(labels);
  return pairs ? `{${pairs}}` : "";
}

function preformat(m: StoredMetric): Preformatted {
  let p = preformatted.get(m);
  if (p && p.name === m.name && p.help === m.help) return p;
  const counter = m.type === "counter";
  const family = counter && m.name.endsWith("_total") ? m.name.slice(0, -6) : m.name;
  const help = escapeHelp(m.help);
  p = {
    name: m.name,
    help: m.help,
    headerProm: `# HELP ${m.name} ${help}\n# TYPE ${m.name} ${m.type}\n`,
    headerOpenMetrics: `# HELP ${family} ${help}\n# TYPE ${family} ${m.type}\n`,
    sampleProm: m.name,
    sampleOpenMetrics: counter && !m.name.endsWith("_total") ? `${m.name}_total` : m.name,
    buckets: (m.upperBounds ?? []).map((b) => `${m.name}_bucket{le="${formatValue(b)}"`),
  };
  preformatted.set(m, p);
  return p;
}

function histogramLines(m: StoredMetric, p: Preformatted): string {
  const bounds = m.upperBounds!;
  let out = "";
  for (const key in m.hashMap) {
    const s = m.hashMap[key]!;
    const pairs = formatPairs(s.labels);
    const rest = pairs ? `,${pairs}} ` : "} ";
    let acc = 0;
    for (let i = 0; i < bounds.length; i++) {
      acc += s.bucketValues[bounds[i]!]!;
      out += `${p.buckets[i]}${rest}${formatValue(acc)}\n`;
    }
    const braced = pairs ? `{${pairs}} ` : " ";
    out += `${m.name}_bucket{le="+Inf"${rest}${formatValue(s.count)}\n${m.name}_sum${braced}${formatValue(s.sum)}\n${m.name}_count${braced}${formatValue(s.count)}\n`;
  }
  return out;
}

/** Any other metric type, from its `get()` result. */
async function genericLines(m: StoredMetric, openMetrics: boolean): Promise<string> {
  const r = await m.get();
  const counter = r.type === "counter";
  let out = "";
  for (const v of r.values) {
    let name = v.metricName ?? r.name;
    if (openMetrics && counter && !name.endsWith("_total")) name += "_total";
    out += `${name}${formatLabels(v.labels)} ${formatValue(v.value)}\n`;
  }
  return out;
}

/** Renders every metric of `registry`; `openMetrics` selects OpenMetrics 1.0.0 (counter families without `_total`, `# EOF`). */
export async function exposition(registry: Registry, openMetrics: boolean): Promise<string> {
  // The registry holds prom-client Counter/Gauge/Histogram objects; its types describe getMetricsAsArray() loosely.
  const metrics = registry.getMetricsAsArray() as unknown as StoredMetric[];
  let out = "";
  for (const m of metrics) {
    const known = m.type === "counter" || m.type === "gauge" || (m.type === "histogram" && m.upperBounds !== undefined);
    if (known && m.collect) {
      const pending = m.collect();
      if (pending instanceof Promise) await pending;
    }
    const p = preformat(m);
    out += openMetrics ? p.headerOpenMetrics : p.headerProm;
    if (!known) out += await genericLines(m, openMetrics);
    else if (m.type === "histogram") out += histogramLines(m, p);
    else {
      const name = openMetrics ? p.sampleOpenMetrics : p.sampleProm;
      for (const key in m.hashMap) {
        const s = m.hashMap[key]!;
        out += `${name}${formatLabels(s.labels)} ${formatValue(s.value)}\n`;
      }
    }
    if (!openMetrics) out += "\n";
  }
  // Prometheus text: one blank line between families, none after the last (as prom-client writes it).
  return openMetrics ? `${out}# EOF\n` : out.slice(0, -1);
}
