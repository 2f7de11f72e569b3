/**
 * Prometheus text exposition (format 0.0.4) as Python's prometheus_client writes it, which is what
 * vLLM and SGLang serve: counters carry their `_total` suffix in HELP, TYPE and samples; numbers
 * are written as Go floats (`1.0`, `0.25`, `+Inf`); a histogram's `le` label comes after the others.
 */

type MetricType = "gauge" | "counter" | "histogram";

/** One metric family as an engine declares it. */
export interface FamilyDefinition {
  /** The name as exposed (counters with `_total`). */
  readonly name: string;
  readonly type: MetricType;
  readonly help: string;
  /** Label names in the engine's order (`le` not included). */
  readonly labelNames: readonly string[];
  /** Upper bounds of a histogram's buckets, ascending (+Inf is added). */
  readonly buckets?: readonly number[];
}

export type Labels = Readonly<Record<string, string>>;

/** A histogram's state: cumulative counts per bucket, the sum and the count. */
export class HistogramState {
  private readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(readonly bounds: readonly number[]) {
    this.counts = bounds.map(() => 0);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    for (let i = 0; i < this.bounds.length; i++) if (value <= this.bounds[i]!) this.counts[i]!++;
  }

  /** Cumulative count of observations at or below bucket `i`. */
  cumulative(i: number): number {
    return this.counts[i]!;
  }
}

/** A value of one family, with its labels: a number, or a histogram's state. */
export interface Series {
  readonly labels: Labels;
  readonly value: number | HistogramState;
}

/** Go's float formatting as prometheus_client uses it: integers keep a `.0`. */
function goFloat(value: number): string {
  if (value === Number.POSITIVE_INFINITY) return "+Inf";
  if (value === Number.NEGATIVE_INFINITY) return "-Inf";
  if (Number.isNaN(value)) return "NaN";
  return Number.isInteger(value) && Math.abs(value) < 1e16 ? value.toFixed(1) : String(value);
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function labelText(labels: Labels, extra?: [string, string]): string {
  const pairs = Object.entries(labels);
  if (extra !== undefined) pairs.push(extra);
  if (pairs.length === 0) return "";
  return `{${pairs.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",")}}`;
}

/** One family's HELP, TYPE and samples. */
export function renderFamily(family: FamilyDefinition, series: readonly Series[]): string {
  let text = `# HELP ${family.name} ${family.help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}\n`;
  text += `# TYPE ${family.name} ${family.type}\n`;
  for (const s of series) {
    if (typeof s.value === "number") {
      text += `${family.name}${labelText(s.labels)} ${goFloat(s.value)}\n`;
      continue;
    }
    const h = s.value;
    h.bounds.forEach((bound, i) => {
      text += `${family.name}_bucket${labelText(s.labels, ["le", goFloat(bound)])} ${goFloat(h.cumulative(i))}\n`;
    });
    text += `${family.name}_bucket${labelText(s.labels, ["le", "+Inf"])} ${goFloat(h.count)}\n`;
    text += `${family.name}_count${labelText(s.labels)} ${goFloat(h.count)}\n`;
    text += `${family.name}_sum${labelText(s.labels)} ${goFloat(h.sum)}\n`;
  }
  return text;
}
