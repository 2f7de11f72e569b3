/**
 * Test helper: scrapes a SluiceMetrics and parses the exposition with parse-prometheus-text-format.
 *
 * That parser flattens histogram families as if they had no labels (it keeps one bucket map and drops
 * the other labels), so samples are also read from a second parse in which every histogram family is
 * declared `untyped`: its `_bucket`, `_sum` and `_count` lines then come back as plain samples with all
 * their labels (including `le`).
 */
import parsePrometheusTextFormat, { type PrometheusFamily } from "parse-prometheus-text-format";
import type { SluiceMetrics } from "../../src/metrics/index.js";

export interface Scrape {
  readonly text: string;
  /** Families by name, as the exposition declares them (name, HELP, TYPE). */
  readonly families: ReadonlyMap<string, PrometheusFamily>;
  /** Every sample by sample name (histograms as `<name>_bucket`, `<name>_sum`, `<name>_count`). */
  readonly samples: ReadonlyMap<string, ReadonlyArray<{ labels: Record<string, string>; value: number }>>;
}

export function parseScrape(text: string): Scrape {
  const families = new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f] as const));
  const flat = parsePrometheusTextFormat(text.replace(/^(# TYPE \S+) histogram$/gm, "$1 untyped"));
  const samples = new Map<string, Array<{ labels: Record<string, string>; value: number }>>();
  for (const family of flat) {
    const list = samples.get(family.name) ?? [];
    for (const m of family.metrics) list.push({ labels: m.labels ?? {}, value: Number(m.value) });
    samples.set(family.name, list);
  }
  return { text, families, samples };
}

export async function scrape(metrics: SluiceMetrics): Promise<Scrape> {
  return parseScrape(await metrics.metricsText());
}

function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k]);
}

/** The value of the sample with exactly these labels, or undefined when the series is absent. */
export function sampleValue(
  s: Scrape,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  return s.samples.get(name)?.find((m) => sameLabels(m.labels, labels))?.value;
}

/** Sorted label names used by a family's samples (`le` excluded for histograms). */
export function labelNames(s: Scrape, name: string): string[] {
  const family = s.families.get(name);
  const sampleName = family?.type === "HISTOGRAM" ? `${name}_count` : name;
  const names = new Set<string>();
  for (const m of s.samples.get(sampleName) ?? []) for (const key of Object.keys(m.labels)) names.add(key);
  return [...names].sort();
}

/** Distinct values of one label across a family's samples. */
export function labelValues(s: Scrape, name: string, label: string): string[] {
  const values = new Set<string>();
  for (const m of s.samples.get(name) ?? []) {
    const v = m.labels[label];
    if (v !== undefined) values.add(v);
  }
  return [...values].sort();
}
