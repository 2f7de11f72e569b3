/**
 * Bounded tenant label cardinality: the seed's `--priority-scheduler-tenant-metric-top-n` (default 32),
 * which sluice enforces.
 *
 * A TenantLabeler counts traffic per tenant and lets the N busiest tenants keep their own metric label;
 * every other tenant is reported as `other`.
 *
 * How it stays cheap and bounded:
 * - Traffic is counted with the space-saving algorithm (Metwally et al.) in a table of a few times N
 *   entries (default max(16, 4N)). A tenant missing from a full table replaces the entry with the
 *   smallest count and inherits that count as its possible overestimate (`error`). Memory is
 *   O(table size) however many distinct tenants appear; a heavy hitter (share of traffic above
 *   1 / table size) is never evicted.
 * - The table and the labelled set are indexed binary min-heaps keyed by count, so `record` is
 *   O(log table size) and `label` a map lookup. Nothing is sorted per call.
 * - Counts (and errors) are halved every `decayEvery` recorded requests, so the ranking follows recent
 *   traffic; halving everything keeps both heaps ordered. The half-life is counted in requests, not
 *   time, so the labeler needs no timer and stays deterministic.
 *
 * Label transitions (decisions):
 * - Promotion: an unlabelled tenant takes a label when a label slot is free, or when its guaranteed
 *   count (count - error) exceeds the weakest labelled tenant's count by the hysteresis factor
 *   (default 10 %); the weakest tenant is then demoted. Using the guaranteed count keeps a flood of
 *   one-off tenants (whose counts are mostly inherited error) from churning the labels, and the
 *   hysteresis keeps two tenants of similar traffic from swapping labels back and forth.
 * - A tenant that enters the top N after being reported as `other` keeps its earlier counts under
 *   `other`; from then on it is reported under its own label. Nothing is moved between series, so
 *   every counter stays monotonic.
 * - A demoted tenant (pushed out by a busier one, or evicted from the table) is reported as `other`
 *   from then on, and `onDemote` listeners are told, so the metrics layer removes its series from the
 *   registry: the exported tenant cardinality is at most N + 1 (the N tenants plus `other`) at any time.
 *   Prometheus sees the series end; rate()/increase() over it stay correct, only increments since the
 *   last scrape are lost.
 * - A tenant with no recorded traffic yet gets its own label at once while a label slot and a table slot
 *   are free (so a small fleet of tenants never shows up as `other`); otherwise it is `other` until its
 *   traffic earns it a label.
 * - N = 0: every tenant is `other` and nothing is stored.
 * - The tenant keys `other` and the empty string are never given a label of their own (they would be
 *   indistinguishable from the shared bucket, or from a missing label); they are always `other`.
 */
import { IndexedHeap } from "@sluice/scheduler/core/heap.js";

/** The shared label of every tenant outside the top N. */
export const OTHER_TENANT = "other";

/** The seed's default for `--priority-scheduler-tenant-metric-top-n`. */
export const DEFAULT_TENANT_METRIC_TOP_N = 32;

interface TenantLabelerOptions {
  /** Tenants that keep their own label (default 32). 0: every tenant is `other`. */
  topN?: number;
  /** Tenants whose traffic is tracked (default max(16, 4 * topN); 0 when topN is 0). Must be >= topN. */
  tableSize?: number;
  /** Recorded requests between two halvings of every count (default max(10_000, 1_000 * tableSize)). */
  decayEvery?: number;
  /** Margin a challenger's guaranteed count must beat the weakest labelled count by (default 0.1). */
  hysteresis?: number;
}

type DemoteListener = (tenant: string) => void;

interface Entry {
  tenant: string;
  /** Estimated traffic (an upper bound: includes `error`). */
  count: number;
  /** Traffic inherited from the entry this one replaced: count - error is a lower bound. */
  error: number;
  /** Position in the table heap. */
  tableIndex: number;
  /** Position in the labelled heap, -1 when not labelled. */
  labelIndex: number;
}

/** The space-saving table: every tracked entry by count (least first). */
class TableHeap extends IndexedHeap<Entry> {
  protected less(a: Entry, b: Entry): boolean {
    return a.count < b.count;
  }
  protected setIndex(entry: Entry, index: number): void {
    entry.tableIndex = index;
  }
}

/** The labelled entries by count (least first: the weakest label is the first to go). */
class LabelHeap extends IndexedHeap<Entry> {
  protected less(a: Entry, b: Entry): boolean {
    return a.count < b.count;
  }
  protected setIndex(entry: Entry, index: number): void {
    entry.labelIndex = index;
  }
}

function assertCount(name: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) {
    throw new RangeError(`TenantLabeler: ${name} must be an integer >= ${min}, got ${value}`);
  }
}

export class TenantLabeler {
  /** Tenants that keep their own label. */
  readonly topN: number;
  /** Maximum number of tenants tracked. */
  readonly tableSize: number;
  readonly decayEvery: number;
  private readonly threshold: number;
  private readonly entries = new Map<string, Entry>();
  private readonly table = new TableHeap();
  private readonly labelled = new LabelHeap();
  private readonly listeners = new Set<DemoteListener>();
  private sinceDecay = 0;

  constructor(options: TenantLabelerOptions = {}) {
    const topN = options.topN ?? DEFAULT_TENANT_METRIC_TOP_N;
    assertCount("topN", topN, 0);
    const tableSize = options.tableSize ?? (topN === 0 ? 0 : Math.max(16, 4 * topN));
    assertCount("tableSize", tableSize, topN);
    const decayEvery = options.decayEvery ?? Math.max(10_000, 1_000 * tableSize);
    assertCount("decayEvery", decayEvery, 1);
    const hysteresis = options.hysteresis ?? 0.1;
    if (!(hysteresis >= 0) || !Number.isFinite(hysteresis)) {
      throw new RangeError(`TenantLabeler: hysteresis must be a finite number >= 0, got ${hysteresis}`);
    }
    this.topN = topN;
    this.tableSize = tableSize;
    this.decayEvery = decayEvery;
    this.threshold = 1 + hysteresis;
  }

  /** Number of tenants currently tracked (never more than `tableSize`). */
  get size(): number {
    return this.entries.size;
  }

  /** The tenants that currently have their own label (at most `topN`), busiest first. */
  labelledTenants(): string[] {
    return [...this.labelled.items].sort((a, b) => b.count - a.count).map((e) => e.tenant);
  }

  /** Calls `listener` with each tenant that loses its own label. Returns an unsubscribe function. */
  onDemote(listener: DemoteListener): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** Counts `weight` (default 1) requests of traffic for `tenant`. */
  record(tenant: string, weight = 1): void {
    if (this.topN === 0 || tenant === OTHER_TENANT || tenant === "") return;
    if (!(weight > 0) || !Number.isFinite(weight)) return;
    if (++this.sinceDecay >= this.decayEvery) this.decay();
    let entry = this.entries.get(tenant);
    if (entry !== undefined) {
      entry.count += weight;
      this.table.increased(entry.tableIndex);
      if (entry.labelIndex >= 0) {
        this.labelled.increased(entry.labelIndex);
        return;
      }
    } else if (this.entries.size < this.tableSize) {
      entry = { tenant, count: weight, error: 0, tableIndex: -1, labelIndex: -1 };
      this.entries.set(tenant, entry);
      this.table.push(entry);
    } else {
      // Space-saving: the least counted entry makes room and its count becomes the newcomer's error.
      entry = this.table.peek()!;
      this.entries.delete(entry.tenant);
      if (entry.labelIndex >= 0) this.unlabel(entry);
      entry.tenant = tenant;
      entry.error = entry.count;
      entry.count += weight;
      this.entries.set(tenant, entry);
      this.table.increased(entry.tableIndex);
    }
    this.consider(entry);
  }

  /** The label for `tenant`: itself while it is among the top N, else `other`. Does not count traffic. */
  label(tenant: string): string {
    if (this.topN === 0 || tenant === OTHER_TENANT || tenant === "") return OTHER_TENANT;
    const entry = this.entries.get(tenant);
    if (entry !== undefined) return entry.labelIndex >= 0 ? tenant : OTHER_TENANT;
    if (this.labelled.size < this.topN && this.entries.size < this.tableSize) {
      const fresh: Entry = { tenant, count: 0, error: 0, tableIndex: -1, labelIndex: -1 };
      this.entries.set(tenant, fresh);
      this.table.push(fresh);
      this.labelled.push(fresh);
      return tenant;
    }
    return OTHER_TENANT;
  }

  /** `record` then `label`. */
  observe(tenant: string, weight = 1): string {
    this.record(tenant, weight);
    return this.label(tenant);
  }

  /** Promotes an unlabelled entry whose traffic grew, demoting the weakest labelled one if needed. */
  private consider(entry: Entry): void {
    if (this.labelled.size < this.topN) {
      this.labelled.push(entry);
      return;
    }
    const weakest = this.labelled.peek()!;
    if (entry.count - entry.error > weakest.count * this.threshold) {
      this.unlabel(weakest);
      this.labelled.push(entry);
    }
  }

  private unlabel(entry: Entry): void {
    this.labelled.removeAt(entry.labelIndex);
    entry.labelIndex = -1;
    for (const listener of this.listeners) listener(entry.tenant);
  }

  private decay(): void {
    this.sinceDecay = 0;
    for (const entry of this.table.items) {
      entry.count *= 0.5;
      entry.error *= 0.5;
    }
  }
}
