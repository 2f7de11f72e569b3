/**
 * One class's queue: weighted fair sharing across tenants by counters of service received, in the
 * style of the Virtual Token Counter (Sheng et al., "Fairness in Serving Large Language Models",
 * OSDI 2024). docs/fairness.md has the rules, the bound and its derivation.
 *
 * Each tenant is a flow: a FIFO of its waiters and a counter of the service it has received, in
 * tokens / weight. Dispatch serves the head of the backlogged flow with the smallest counter (ties:
 * the older head). What is charged when:
 * - a dispatch (queued, fast path, starvation promotion) charges the estimate at once, as pending;
 * - the actual cost, once known (`correct`), replaces the estimate, with no clamping: an
 *   overestimate gives its credit back, an underestimate costs extra;
 * - a release without a correction settles the estimate (it stands);
 * - a preemption before the first byte refunds the whole charge;
 * - a waiter that leaves unserved (timeout, cancel) charges nothing, and no other waiter's place
 *   changes: order is per flow, not per item, so nothing is re-tagged.
 * A flow that becomes backlogged is lifted to the class floor (the settled service of the last
 * flow served), so idle time earns no credit, and neither does anybody's pending estimate.
 *
 * Counters are relative to an offset that is moved (renormalization) whenever the floor passes
 * RENORMALIZE_AT, so float64 keeps sub-token precision however long the process runs.
 *
 * A flow's waiters are in arrival order, so the oldest waiter of the queue (for timeouts and
 * starvation promotion) is the oldest flow head: a second heap orders the backlogged flows by their
 * head's arrival. It costs an O(log flows) step per dispatch and saves every waiter two links
 * (docs/design.md, "A waiter's bytes"). All links are intrusive: enqueue, dispatch and removal cost
 * O(log flows) and allocate nothing but a flow on a tenant's first use.
 */
import { IndexedHeap } from "./heap.js";

/** Largest cost one request can be charged, in tokens (2^40, about 1.1e12: no model comes close). */
export const MAX_CHARGE_TOKENS = 2 ** 40;
/** Weights are clamped to this range for accounting, so cost / weight stays finite and precise. */
export const MIN_WEIGHT = 1e-6;
export const MAX_WEIGHT = 1e6;
/** The floor is brought back to 0 (every counter shifted) when it passes this many units. */
export const RENORMALIZE_AT = 2 ** 32;
/**
 * Idle flows (no waiter, nothing in flight) kept per class at most. An idle flow at or below the
 * floor carries nothing and is always dropped; above this many, the idle flows with the smallest
 * lead over the floor (at most their last burst) are forgotten too, so memory stays bounded
 * whatever the number of distinct tenants.
 */
export const MAX_IDLE_FLOWS = 4096;

/**
 * What the queue keeps on an item: its arrival order and its flow's links. The tenant and weight
 * are the flow's (an item is pushed with its flow), so an item does not repeat them.
 */
export interface QueueItem {
  /**
   * Arrival order, unique and increasing among queued items: ties in counters break on it (the
   * older head first), and the oldest item is the one with the least.
   */
  readonly seq: number;
  /** The flow the item is queued in; null once it left (served, timed out or cancelled). */
  flow: Flow<this> | null;
  prevInFlow: this | null;
  nextInFlow: this | null;
}

/** What a dispatched request carries so that its charge can be corrected, settled or refunded. */
export interface Charge {
  readonly tenant: string;
  /** The tenant's weight when it was admitted: the charge and its corrections use it. */
  readonly weight: number;
  /** The flow charged, or null before the first charge. */
  chargeFlow: Flow | null;
  /** Units (tokens / weight) this request holds in its flow's counter now. */
  charged: number;
  /** The charge is still pending (an estimate not yet settled by a correction or a release). */
  chargeOpen: boolean;
}

export interface Flow<T extends QueueItem = QueueItem> {
  readonly tenant: string;
  weight: number;
  /** Service received, in tokens / weight, relative to the queue's offset; pending charges included. */
  counter: number;
  /** The part of `counter` that is open estimates of requests still in flight. */
  pending: number;
  /** Requests with an open charge. */
  open: number;
  head: T | null;
  tail: T | null;
  length: number;
  /** Position in the heap, -1 when the flow has no waiters. */
  heapIndex: number;
  /** Position in the heap of heads by arrival (meaningful only while the flow has waiters). */
  ageIndex: number;
  /** False once pruned from the queue's map (a late correction then goes to the live flow). */
  live: boolean;
  /**
   * Held by a record of the caller's (a tenant with a policy, which caches it): never dropped, so
   * the caller's cache stays good and a returning tenant costs no map work; a prune that would
   * drop it moves it to the floor instead, which is where a new flow would start. Memory is then
   * bounded by the caller's records, not by the traffic.
   */
  kept: boolean;
}

/** Tokens a cost stands for: finite, >= 0, at most MAX_CHARGE_TOKENS; anything else is `fallback`. */
function sanitizeCost(cost: number, fallback: number): number {
  if (!(cost >= 0)) return fallback; // NaN and negatives
  return cost > MAX_CHARGE_TOKENS ? MAX_CHARGE_TOKENS : cost; // +Infinity included
}

function accountingWeight(weight: number): number {
  if (!(weight >= MIN_WEIGHT)) return MIN_WEIGHT; // NaN, <= 0 and tiny
  return weight > MAX_WEIGHT ? MAX_WEIGHT : weight;
}

/** Backlogged flows by counter (ties: the older head); each flow keeps its position in `heapIndex`. */
class FlowHeap<T extends QueueItem> extends IndexedHeap<Flow<T>> {
  protected less(a: Flow<T>, b: Flow<T>): boolean {
    return a.counter < b.counter || (a.counter === b.counter && a.head!.seq < b.head!.seq);
  }
  protected setIndex(flow: Flow<T>, index: number): void {
    flow.heapIndex = index;
  }
}

/** Backlogged flows by their head's arrival: the oldest item of the queue is the top's head. */
class AgeHeap<T extends QueueItem> extends IndexedHeap<Flow<T>> {
  protected less(a: Flow<T>, b: Flow<T>): boolean {
    return a.head!.seq < b.head!.seq;
  }
  protected setIndex(flow: Flow<T>, index: number): void {
    flow.ageIndex = index;
  }
}

/**
 * Reorders `flows` so that its first `k` hold the `k` smallest counters (in no particular order):
 * Hoare's selection, O(n) on average, where a sort was O(n log n) with a comparator call per step.
 */
export function selectSmallest(flows: Flow[], k: number): void {
  let lo = 0;
  let hi = flows.length - 1;
  while (lo < hi) {
    const pivot = flows[(lo + hi) >>> 1]!.counter;
    let i = lo;
    let j = hi;
    while (i <= j) {
      while (flows[i]!.counter < pivot) i++;
      while (flows[j]!.counter > pivot) j--;
      if (i <= j) {
        const t = flows[i]!;
        flows[i] = flows[j]!;
        flows[j] = t;
        i++;
        j--;
      }
    }
    // [lo, j] <= pivot <= [i, hi]: keep the side that holds the boundary between k-1 and k.
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else return;
  }
}

export class FairQueue<T extends QueueItem> {
  /**
   * The class floor: the settled service (counter minus pending) of the last flow dispatched in
   * fair order, never decreasing. A flow that becomes backlogged is lifted to it.
   */
  floor = 0;
  /** Total shifted out of every counter by renormalization (absolute = offset + relative). */
  offset = 0;
  size = 0;
  private readonly flows = new Map<string, Flow<T>>();
  private readonly heap = new FlowHeap<T>();
  private readonly ages = new AgeHeap<T>();
  private pruneAt = 64;
  /** Scratch list of prune(), kept so a prune allocates nothing. */
  private readonly idle: Flow<T>[] = [];
  /** The flow of the last lookup: consecutive requests of one tenant skip the map. */
  private lastFlow: Flow<T> | null = null;

  /** The longest-waiting item (arrival order), or null. */
  oldest(): T | null {
    const top = this.ages.items[0];
    return top ? top.head : null;
  }

  /** The item fair queuing would serve next, or null. */
  peek(): T | null {
    const top = this.heap.items[0];
    return top ? top.head : null;
  }

  /** The flow of the item fair queuing would serve next (the one `pop` takes), or null. */
  peekFlow(): Flow<T> | null {
    return this.heap.items[0] ?? null;
  }

  /** Number of flows with at least one waiter. */
  activeFlows(): number {
    return this.heap.items.length;
  }

  /** Number of waiters a tenant has in this queue. */
  lengthOf(tenant: string): number {
    return this.flows.get(tenant)?.length ?? 0;
  }

  /** A tenant's flow state (tests and diagnostics), or undefined when it keeps none. */
  flowOf(tenant: string): Readonly<Flow<T>> | undefined {
    return this.flows.get(tenant);
  }

  /** Queues an item in its tenant's flow (from `flowFor`). */
  push(item: T, flow: Flow<T>): void {
    item.flow = flow;
    item.nextInFlow = null;
    item.prevInFlow = flow.tail;
    if (flow.tail) flow.tail.nextInFlow = item;
    else flow.head = item;
    flow.tail = item;
    flow.length++;
    this.size++;

    if (flow.head === item) {
      // The flow becomes backlogged: idle time earns no credit.
      this.lift(flow);
      this.heap.push(flow);
      this.ages.push(flow);
    }
  }

  /**
   * Removes and returns the next item in fair order (the head of the backlogged flow with the
   * smallest counter) and moves the floor to that flow's settled service. The caller must charge
   * it (`charge`) before anything else touches the queue: the charge puts the flow back in order.
   */
  pop(): T | null {
    const flow = this.heap.items[0];
    if (flow === undefined) return null;
    const settled = flow.counter - flow.pending;
    if (settled > this.floor) this.floor = settled;
    const item = flow.head!;
    this.unlink(item, false);
    this.lastFlow = flow;
    return item;
  }

  /** Removes an item that leaves without service (timeout, cancel): nothing is charged. */
  remove(item: T): void {
    if (item.flow === null) return;
    this.unlink(item, true);
  }

  /**
   * Removes an item served out of fair order (starvation promotion). The caller charges it like
   * any dispatch; the floor stays put, so the flows that were passed over keep their places.
   */
  serveOutOfOrder(item: T): void {
    const flow = item.flow;
    if (flow === null) return;
    this.unlink(item, false);
    this.lastFlow = flow;
  }

  /**
   * Charges a dispatched request's estimate to its tenant's flow, as pending. `fastPath`: the
   * request did not queue (its flow is not backlogged), so the flow is lifted first and the floor
   * moves as for a fair-order dispatch.
   */
  charge(
    charge: Charge,
    cost: number,
    fastPath: boolean,
    flow: Flow<T> = this.flowFor(charge.tenant, charge.weight),
  ): void {
    const weight = charge.weight;
    if (fastPath) {
      // lift() and the floor update, inlined: this is the uncontended hot path.
      const settled = flow.counter - flow.pending;
      const floor = this.floor;
      if (settled < floor) flow.counter = floor + flow.pending;
      else if (settled > floor) this.floor = settled;
    }
    const units =
      cost >= 0 && cost <= MAX_CHARGE_TOKENS && weight >= MIN_WEIGHT && weight <= MAX_WEIGHT
        ? cost / weight
        : sanitizeCost(cost, 1) / accountingWeight(weight);
    charge.chargeFlow = flow;
    charge.charged = units;
    charge.chargeOpen = true;
    flow.counter += units;
    flow.pending += units;
    flow.open++;
    if (flow.heapIndex >= 0) this.heap.increased(flow.heapIndex);
    if (this.floor >= RENORMALIZE_AT) this.renormalize();
  }

  /**
   * Replaces a request's charge with its actual cost (tokens). Returns false when ignored: never
   * charged, refunded by preemption, or an actual that is not a number >= 0. A second call corrects
   * relative to the first (the last actual reported stands).
   */
  correct(charge: Charge, actualCost: number): boolean {
    let flow = charge.chargeFlow;
    if (flow === null || !(actualCost >= 0)) return false;
    const units = sanitizeCost(actualCost, 0) / accountingWeight(charge.weight);
    const delta = units - charge.charged;
    if (charge.chargeOpen) {
      charge.chargeOpen = false;
      this.close(flow as Flow<T>, charge.charged);
    }
    charge.charged = units;
    if (!flow.live) {
      // Pruned since the charge was settled (it was at or below the floor): the live flow pays.
      flow = this.flowFor(charge.tenant, flow.weight);
      charge.chargeFlow = flow;
    }
    this.move(flow as Flow<T>, delta);
    return true;
  }

  /** The request ended without a correction: its estimate stands. */
  settle(charge: Charge): void {
    const flow = charge.chargeFlow;
    if (flow === null || !charge.chargeOpen) return;
    charge.chargeOpen = false;
    this.close(flow as Flow<T>, charge.charged);
  }

  /** Takes the whole charge back (preempted before its first byte: nothing was served). */
  refund(charge: Charge): void {
    const flow = charge.chargeFlow;
    if (flow === null) return;
    const units = charge.charged;
    charge.charged = 0;
    charge.chargeFlow = null;
    if (charge.chargeOpen) {
      charge.chargeOpen = false;
      this.close(flow as Flow<T>, units);
    }
    if (flow.live) this.move(flow as Flow<T>, -units);
  }

  /** Absolute counter of a tenant (tests and diagnostics), or undefined when it keeps none. */
  counterOf(tenant: string): number | undefined {
    const flow = this.flows.get(tenant);
    return flow === undefined ? undefined : this.offset + flow.counter;
  }

  // --- internals ---------------------------------------------------------------------------

  /**
   * A tenant's flow, created (at the floor) on first use. Check `live` before reusing it later.
   * `keep`: the caller holds the flow in a record of its own (`Flow.kept`) until `releaseKept`.
   */
  flowFor(tenant: string, weight: number, keep = false): Flow<T> {
    const last = this.lastFlow;
    if (last !== null && last.tenant === tenant) {
      last.weight = weight;
      return last;
    }
    let flow = this.flows.get(tenant);
    if (flow === undefined) {
      if (this.flows.size >= this.pruneAt) this.prune();
      // A new flow starts at the floor: the same place a lift would give it.
      flow = {
        tenant,
        weight,
        counter: this.floor,
        pending: 0,
        open: 0,
        head: null,
        tail: null,
        length: 0,
        heapIndex: -1,
        ageIndex: -1,
        live: true,
        kept: keep,
      };
      this.flows.set(tenant, flow);
    } else {
      flow.weight = weight;
      if (keep) flow.kept = true;
    }
    this.lastFlow = flow;
    return flow;
  }

  /** Lifts a flow that becomes backlogged to the floor (its pending charges stay on top). */
  private lift(flow: Flow<T>): void {
    if (flow.counter - flow.pending < this.floor) flow.counter = this.floor + flow.pending;
  }

  /** Closes an open charge of `units` (a release, a correction or a refund). */
  private close(flow: Flow<T>, units: number): void {
    flow.open--;
    // Exactly 0 once nothing is open, so rounding never accumulates.
    flow.pending = flow.open === 0 ? 0 : Math.max(0, flow.pending - units);
  }

  /** Moves a flow's counter by `delta` units, keeping the heap in order. */
  private move(flow: Flow<T>, delta: number): void {
    if (delta === 0) return;
    flow.counter += delta;
    if (flow.heapIndex < 0) return;
    if (delta < 0) this.heap.decreased(flow.heapIndex);
    else this.heap.increased(flow.heapIndex);
  }

  /** Shifts every counter (and the floor) down by the floor: relative order is unchanged. */
  private renormalize(): void {
    const shift = this.floor;
    this.offset += shift;
    this.floor = 0;
    for (const flow of this.flows.values()) flow.counter -= shift;
    this.prune();
  }

  /**
   * Drops flows that carry no state (no waiters, nothing open, no service above the floor); then,
   * past MAX_IDLE_FLOWS idle flows, the idle ones with the smallest lead until half remain.
   */
  private prune(): void {
    const idle = this.idle;
    for (const flow of this.flows.values()) {
      if (flow.length !== 0 || flow.open !== 0) continue;
      if (flow.counter > this.floor) idle.push(flow);
      else if (!flow.kept) this.drop(flow);
    }
    if (idle.length > MAX_IDLE_FLOWS) {
      // Which ones go is a selection, not an order: partition around the k-th smallest lead.
      const k = idle.length - MAX_IDLE_FLOWS / 2;
      selectSmallest(idle, k);
      for (let i = 0; i < k; i++) {
        const flow = idle[i]!;
        // Forgotten: a kept flow goes back to the floor, where a new flow would start.
        if (flow.kept) flow.counter = this.floor;
        else this.drop(flow);
      }
    }
    idle.length = 0;
    this.pruneAt = Math.max(64, 2 * this.flows.size);
  }

  /** The caller's records are gone (e.g. replaced on reload): kept flows become ordinary ones. */
  releaseKept(): void {
    for (const flow of this.flows.values()) flow.kept = false;
  }

  private drop(flow: Flow<T>): void {
    flow.live = false;
    this.flows.delete(flow.tenant);
    if (this.lastFlow === flow) this.lastFlow = null;
  }

  /** Number of flows kept (tests and diagnostics). */
  flowCount(): number {
    return this.flows.size;
  }

  /** `sift` false: the caller charges the flow next, which sifts it (a counter only grows). */
  private unlink(item: T, sift: boolean): void {
    const flow = item.flow!;
    const wasHead = flow.head === item;
    if (item.prevInFlow) item.prevInFlow.nextInFlow = item.nextInFlow;
    else flow.head = item.nextInFlow;
    if (item.nextInFlow) item.nextInFlow.prevInFlow = item.prevInFlow;
    else flow.tail = item.prevInFlow;
    flow.length--;
    this.size--;

    item.flow = null;
    item.prevInFlow = item.nextInFlow = null;

    if (!wasHead) return;
    if (flow.head === null) {
      this.heap.removeAt(flow.heapIndex);
      flow.heapIndex = -1;
      this.ages.removeAt(flow.ageIndex);
      flow.ageIndex = -1;
      return;
    }
    // A younger head: the flow moves back in arrival order.
    this.ages.increased(flow.ageIndex);
    // Same counter, younger head: the flow can only lose ties.
    if (sift) this.heap.increased(flow.heapIndex);
  }
}
