/**
 * Counter samples for the dashboard: what /metrics would show for the cumulative series the
 * dashboard turns into rates and windowed percentiles, read from the same prom-client objects
 * (never a second count kept beside them), plus the outcome sink's per-code totals. A ring of
 * samples taken about once a second gives each window its base.
 */
import type { Registry } from "prom-client";
import { GATEWAY_METRIC_NAMES, QUEUE_WAIT_BUCKETS, SCHEDULER_METRIC_NAMES } from "../metrics/registry.js";

export interface CounterSample {
  /** When it was read, epoch ms. */
  tMs: number;
  /** sluice_http_requests_total by status. */
  statuses: Map<string, number>;
  /** Gateway-made answers by error code (the outcome records). */
  codes: Map<string, number>;
  /** sluice_tenant_tokens_total by tenant label, input + output. */
  tokens: Map<string, number>;
  /**
   * smg_scheduler_queue_wait_seconds by class: cumulative bucket counts, one per QUEUE_WAIT_BUCKETS
   * bound and a last one for +Inf (= the count).
   */
  waits: Map<string, number[]>;
}

type Values = Array<{
  value: number;
  labels: Record<string, string | number | undefined>;
  metricName?: string;
}>;

async function values(registry: Registry, name: string): Promise<Values> {
  const metric = registry.getSingleMetric(name);
  if (metric === undefined) return [];
  return (await metric.get()).values as Values;
}

/** Reads one sample. `codes` are the outcome sink's totals (already a copy). */
export async function readCounters(registry: Registry, codes: Map<string, number>): Promise<CounterSample> {
  const [http, tokens, waits] = await Promise.all([
    values(registry, GATEWAY_METRIC_NAMES.httpRequests),
    values(registry, GATEWAY_METRIC_NAMES.tenantTokens),
    values(registry, SCHEDULER_METRIC_NAMES.queueWait),
  ]);
  const statuses = new Map<string, number>();
  for (const v of http) statuses.set(String(v.labels.status), v.value);
  const byTenant = new Map<string, number>();
  for (const v of tokens) {
    const tenant = String(v.labels.tenant);
    byTenant.set(tenant, (byTenant.get(tenant) ?? 0) + v.value);
  }
  const bucketName = `${SCHEDULER_METRIC_NAMES.queueWait}_bucket`;
  const index = new Map<string, number>(QUEUE_WAIT_BUCKETS.map((b, i) => [String(b), i]));
  index.set("+Inf", QUEUE_WAIT_BUCKETS.length);
  const byClass = new Map<string, number[]>();
  for (const v of waits) {
    if (v.metricName !== bucketName) continue;
    const i = index.get(String(v.labels.le));
    if (i === undefined) continue;
    const cls = String(v.labels.class);
    let buckets = byClass.get(cls);
    if (buckets === undefined) {
      buckets = new Array<number>(QUEUE_WAIT_BUCKETS.length + 1).fill(0);
      byClass.set(cls, buckets);
    }
    buckets[i] = v.value;
  }
  return { tMs: Date.now(), statuses, codes, tokens: byTenant, waits: byClass };
}

/** The last `size` samples, oldest first. */
export class SampleRing {
  private readonly samples: CounterSample[] = [];

  constructor(readonly size: number) {}

  push(sample: CounterSample): void {
    this.samples.push(sample);
    if (this.samples.length > this.size) this.samples.shift();
  }

  get latest(): CounterSample | undefined {
    return this.samples.at(-1);
  }

  /**
   * The base of a window of `windowMs` ending at `nowMs`: the newest sample at least that old, else
   * the oldest one there is (a gateway up for less than the window). Undefined when there is none
   * older than `nowMs`.
   */
  base(nowMs: number, windowMs: number): CounterSample | undefined {
    let found: CounterSample | undefined;
    for (let i = this.samples.length - 1; i >= 0; i--) {
      const s = this.samples[i]!;
      if (s.tMs >= nowMs) continue;
      found = s;
      if (nowMs - s.tMs >= windowMs) break;
    }
    return found;
  }
}

/** Per-key increase from `base` to `now` (a key absent from `base` started at 0). */
export function increase(
  now: Map<string, number>,
  base: Map<string, number> | undefined,
): Map<string, number> {
  const out = new Map<string, number>();
  for (const [key, value] of now) out.set(key, Math.max(0, value - (base?.get(key) ?? 0)));
  return out;
}

/** Bucket-wise increase of cumulative histograms. */
export function increaseBuckets(
  now: Map<string, number[]>,
  base: Map<string, number[]> | undefined,
): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const [key, buckets] of now) {
    const before = base?.get(key);
    out.set(
      key,
      buckets.map((v, i) => Math.max(0, v - (before?.[i] ?? 0))),
    );
  }
  return out;
}

/**
 * The q-quantile (0..1) of a cumulative histogram, as Prometheus's histogram_quantile computes it:
 * linear within the bucket the rank falls in, the first bucket starting at 0, and the highest
 * finite bound when the rank falls in +Inf. Null when the histogram is empty.
 */
export function histogramQuantile(
  bounds: readonly number[],
  cumulative: readonly number[],
  q: number,
): number | null {
  const total = cumulative[cumulative.length - 1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  for (let i = 0; i < cumulative.length; i++) {
    const c = cumulative[i]!;
    if (c < rank) continue;
    if (i >= bounds.length) return bounds[bounds.length - 1] ?? null;
    const lower = i === 0 ? 0 : bounds[i - 1]!;
    const below = i === 0 ? 0 : cumulative[i - 1]!;
    const inBucket = c - below;
    if (inBucket <= 0) return bounds[i]!;
    return lower + (bounds[i]! - lower) * ((rank - below) / inBucket);
  }
  return bounds[bounds.length - 1] ?? null;
}
