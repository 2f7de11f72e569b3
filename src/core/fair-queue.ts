/**
 * One class's queue: weighted fair queuing across tenants by virtual finish time.
 *
 * Each tenant is a flow (a FIFO of its waiters) with a weight. The head of a flow gets the tag
 * vft = max(V, flow.lastVft) + cost / weight when it becomes the head, and the flow with the
 * smallest head tag is served next; V is the tag of the last request served (self-clocked fair
 * queuing). With one tenant this is exactly FIFO. A flow that goes idle keeps no credit: its
 * next tag starts from V, so a returning tenant gets at most its one request's worth of head start.
 *
 * Besides the flows, every waiter is on an arrival-order list, which gives the oldest waiter in
 * O(1) for timeouts and starvation promotion. All links are intrusive, so enqueue, dequeue and
 * removal of any waiter cost O(log flows) and allocate nothing but the flow on first use.
 */

export interface QueueItem {
  readonly tenant: string;
  readonly cost: number;
  /** Global arrival sequence: ties in tags and arrival order break on it. */
  readonly seq: number;
  weight: number;
  tag: number;
  flow: Flow<this> | null;
  prevInFlow: this | null;
  nextInFlow: this | null;
  prevArrival: this | null;
  nextArrival: this | null;
}

export interface Flow<T extends QueueItem = QueueItem> {
  readonly tenant: string;
  weight: number;
  /** Finish tag of the flow's last served request (plus cost corrections). */
  lastVft: number;
  head: T | null;
  tail: T | null;
  length: number;
  /** Position in the heap, -1 when the flow has no waiters. */
  heapIndex: number;
}

export class FairQueue<T extends QueueItem> {
  /** Virtual time: the tag of the last request served. */
  virtualTime = 0;
  size = 0;
  private readonly flows = new Map<string, Flow<T>>();
  private readonly heap: Flow<T>[] = [];
  private oldestItem: T | null = null;
  private newestItem: T | null = null;

  /** The longest-waiting item (arrival order), or null. */
  oldest(): T | null {
    return this.oldestItem;
  }

  /** The item fair queuing would serve next, or null. */
  peek(): T | null {
    const top = this.heap[0];
    return top ? top.head : null;
  }

  /** Number of flows with at least one waiter. */
  activeFlows(): number {
    return this.heap.length;
  }

  /** Number of waiters a tenant has in this queue. */
  lengthOf(tenant: string): number {
    return this.flows.get(tenant)?.length ?? 0;
  }

  push(item: T): void {
    let flow = this.flows.get(item.tenant);
    if (flow === undefined) {
      if (this.flows.size >= 64 && this.flows.size >= 2 * this.heap.length) this.prune();
      flow = {
        tenant: item.tenant,
        weight: item.weight,
        lastVft: 0,
        head: null,
        tail: null,
        length: 0,
        heapIndex: -1,
      };
      this.flows.set(item.tenant, flow);
    }
    flow.weight = item.weight;
    item.flow = flow;
    item.nextInFlow = null;
    item.prevInFlow = flow.tail;
    if (flow.tail) flow.tail.nextInFlow = item;
    else flow.head = item;
    flow.tail = item;
    flow.length++;

    item.nextArrival = null;
    item.prevArrival = this.newestItem;
    if (this.newestItem) this.newestItem.nextArrival = item;
    else this.oldestItem = item;
    this.newestItem = item;
    this.size++;

    if (flow.head === item) {
      item.tag = this.startTag(flow) + item.cost / flow.weight;
      flow.heapIndex = this.heap.length;
      this.heap.push(flow);
      this.siftUp(flow.heapIndex);
    }
  }

  /** Removes and returns the next item in fair order, advancing virtual time. */
  pop(): T | null {
    const flow = this.heap[0];
    if (flow === undefined) return null;
    const item = flow.head!;
    if (item.tag > this.virtualTime) this.virtualTime = item.tag;
    flow.lastVft = item.tag;
    this.unlink(item);
    return item;
  }

  /** Removes an item that leaves without service (timeout, cancel, starvation promotion). */
  remove(item: T): void {
    if (item.flow === null) return;
    this.unlink(item);
  }

  /**
   * Removes an item served out of fair order (starvation promotion). Its flow is charged as if
   * served, but virtual time stays put so the other flows keep their places.
   */
  serveOutOfOrder(item: T): void {
    const flow = item.flow;
    if (flow === null) return;
    // The oldest waiter of a class is always the head of its flow (flows are FIFO).
    flow.lastVft = flow.head === item ? item.tag : this.startTag(flow) + item.cost / flow.weight;
    this.unlink(item);
  }

  /**
   * Corrects a tenant's flow once the actual cost of a served request is known
   * (delta = actual - estimated). A debt on a flow that no longer exists starts from V.
   */
  charge(tenant: string, weight: number, delta: number): void {
    if (delta === 0 || !Number.isFinite(delta)) return;
    let flow = this.flows.get(tenant);
    if (flow === undefined) {
      if (delta < 0) return;
      flow = { tenant, weight, lastVft: this.virtualTime, head: null, tail: null, length: 0, heapIndex: -1 };
      this.flows.set(tenant, flow);
    }
    flow.lastVft += delta / flow.weight;
    // A waiting head's tag moves with its flow, so the correction applies at once.
    const head = flow.head;
    if (head !== null) {
      head.tag += delta / flow.weight;
      this.siftUp(flow.heapIndex);
      this.siftDown(flow.heapIndex);
    }
  }

  private startTag(flow: Flow<T>): number {
    return Math.max(flow.lastVft, this.virtualTime);
  }

  private unlink(item: T): void {
    const flow = item.flow!;
    const wasHead = flow.head === item;
    if (item.prevInFlow) item.prevInFlow.nextInFlow = item.nextInFlow;
    else flow.head = item.nextInFlow;
    if (item.nextInFlow) item.nextInFlow.prevInFlow = item.prevInFlow;
    else flow.tail = item.prevInFlow;
    flow.length--;

    if (item.prevArrival) item.prevArrival.nextArrival = item.nextArrival;
    else this.oldestItem = item.nextArrival;
    if (item.nextArrival) item.nextArrival.prevArrival = item.prevArrival;
    else this.newestItem = item.prevArrival;
    this.size--;

    item.flow = null;
    item.prevInFlow = item.nextInFlow = item.prevArrival = item.nextArrival = null;

    if (!wasHead) return;
    const next = flow.head;
    if (next === null) {
      this.heapRemove(flow.heapIndex);
      return;
    }
    next.tag = this.startTag(flow) + next.cost / flow.weight;
    this.siftDown(flow.heapIndex);
    this.siftUp(flow.heapIndex);
  }

  /** Drops idle flows whose state no longer matters (no debt beyond V). */
  private prune(): void {
    for (const [tenant, flow] of this.flows) {
      if (flow.length === 0 && flow.lastVft <= this.virtualTime) this.flows.delete(tenant);
    }
  }

  private less(a: Flow<T>, b: Flow<T>): boolean {
    const ta = a.head!.tag;
    const tb = b.head!.tag;
    return ta < tb || (ta === tb && a.head!.seq < b.head!.seq);
  }

  private siftUp(index: number): void {
    const heap = this.heap;
    const flow = heap[index]!;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = heap[parentIndex]!;
      if (!this.less(flow, parent)) break;
      heap[index] = parent;
      parent.heapIndex = index;
      index = parentIndex;
    }
    heap[index] = flow;
    flow.heapIndex = index;
  }

  private siftDown(index: number): void {
    const heap = this.heap;
    const n = heap.length;
    const flow = heap[index]!;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      if (right < n && this.less(heap[right]!, heap[left]!)) child = right;
      const c = heap[child]!;
      if (!this.less(c, flow)) break;
      heap[index] = c;
      c.heapIndex = index;
      index = child;
    }
    heap[index] = flow;
    flow.heapIndex = index;
  }

  private heapRemove(index: number): void {
    const heap = this.heap;
    const removed = heap[index]!;
    removed.heapIndex = -1;
    const last = heap.pop()!;
    if (index < heap.length) {
      heap[index] = last;
      last.heapIndex = index;
      this.siftDown(index);
      this.siftUp(last.heapIndex);
    }
  }
}
