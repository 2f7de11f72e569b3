/**
 * A simulated inference worker: iteration-level continuous batching in the style of vLLM's
 * scheduler, timed by the BLIS/Vidur-style step model (profiles.ts):
 *
 *   step = (beta0 + beta1 * prefill_tokens + beta2 * decode_tokens
 *           + attn_decode * (context tokens of the decoding requests)
 *           + attn_prefill * (query, key) pairs of the prefill chunks) * slowdown
 *
 * The attention terms (issue 36) make a step cost more as contexts grow: a decoding request reads
 * its whole KV cache each iteration, a prefill chunk attends to everything before it. Within a
 * macro step (below) contexts grow linearly, so its k iterations cost exactly k times the
 * iteration at its midpoint; the iterations inside it are taken as equally long.
 *
 * Each iteration every running request that is decoding emits one token; the rest of the token
 * budget (max_batched_tokens) goes to prefill chunks, oldest first, and then to requests taken from
 * the worker's own queue while there is budget, a free place in the batch (max_running) and room in
 * the KV cache. A request's first token comes out of the iteration that finishes its prefill.
 * Past the KV capacity requests wait in the worker's queue; with the `recompute` policy a full
 * cache preempts the newest running request back to the head of that queue (its prefill is redone,
 * over the prompt and the tokens it already produced).
 *
 * Speed: the batch only changes when a prefill completes, a request finishes, the cache fills, or
 * something arrives, leaves or slows the worker. Between such changes all iterations are identical,
 * so the worker plans them as one "macro step" of k iterations and schedules a single event at its
 * end; an arrival in the middle cuts the macro step at the end of the iteration in progress. Decoding
 * requests sit in a heap by the iteration they finish in, so no per-token work is ever done.
 *
 * Prefix cache (block-cache.ts): a job's `prefixBlocks` (block ids of `blockTokens` tokens each,
 * from a replayed trace) are looked up when it arrives; the leading blocks found are not prefilled
 * (at least one token is), so its first token comes sooner. Their KV still counts as the request's
 * own (shared blocks are counted once per request: a conservative model). A prompt's full blocks
 * enter the cache when its prefill ends, and the cache lives in the KV the running requests leave
 * free, least recently used blocks going first.
 */
import type { EngineView } from "../capacity/adaptive-limit.js";
import { BlockCache } from "./block-cache.js";
import type { SimClock, SimEvent } from "./clock.js";
import type { WorkerProfile } from "./profiles.js";

const WAITING = 0;
const PREFILL = 1;
const DECODE = 2;
const GONE = 3;

/** One request's life inside a worker. */
export class Job {
  worker: Worker | null = null;
  state = GONE;
  /** Tokens the current prefill must process (the prompt, plus the output so far after a recompute). */
  prefillTarget = 0;
  /** Block ids of the prompt (each `blockTokens` tokens), for the worker's prefix cache (optional). */
  prefixBlocks: readonly number[] | undefined;
  /** Tokens per block: vLLM's 16 unless the keys say otherwise (a replay's prefix_block_tokens). */
  blockTokens = 16;
  /** Prefix blocks it holds in the worker's cache (from the end of its prefill until it leaves). */
  heldBlocks = 0;
  /** Tokens whose KV the engine threw away by preempting it (recompute), over its life. */
  recomputed = 0;
  /** Prompt tokens found in the prefix cache when the job arrived (not prefilled, still in the KV). */
  cached = 0;
  prefilled = 0;
  /** Prefill tokens per iteration in the current macro step. */
  chunk = 0;
  /** Output tokens produced before the current decode run (non-zero after a recompute). */
  genBase = 0;
  /** Iteration whose end produced the first token of the current decode run. */
  decodeStart = 0;
  /** Iteration whose end produces the last output token. */
  finishIter = 0;
  firstTokenSent = false;
  /** KV tokens held under the `reserve` policy. */
  kvHeld = 0;
  heapIndex = -1;
  prev: Job | null = null;
  next: Job | null = null;
  /** Admission order into the running batch (victim choice: the newest goes first). */
  seq = 0;
  /** The last decode-pace mark (the gateway's while a stream runs): its iteration and time. */
  paceIter = 0;
  paceAt = 0;
  /** Pace marks reported so far. */
  paceMarks = 0;
  /** Milliseconds spent in the worker's waiting queue, closed stretches only (see engineQueueMs). */
  queuedMs = 0;
  /** When the current stretch in the waiting queue began (NaN: not waiting). */
  queuedSince = Number.NaN;
  /** Times the worker preempted it on a full KV cache (each one a recompute). */
  preemptions = 0;

  constructor(
    /** Prompt tokens. */
    readonly prompt: number,
    /** Output tokens the request really produces (>= 1). */
    readonly output: number,
    /** The request's max_tokens (>= output): what the `reserve` policy holds. */
    readonly maxTokens: number,
    readonly ref: unknown,
  ) {}

  get inWorker(): boolean {
    return this.state !== GONE;
  }

  get running(): boolean {
    return this.state === PREFILL || this.state === DECODE;
  }

  /**
   * Time queued inside the engine up to `now`: from reaching the worker to its first place in the
   * running batch, plus every stretch back in the queue after a preemption (still counting while
   * it waits). What sluice wants near zero: queueing there escapes priority and fairness.
   */
  engineQueueMs(now: number): number {
    return this.queuedMs + (Number.isNaN(this.queuedSince) ? 0 : now - this.queuedSince);
  }

  /** Ends a stretch in the waiting queue; returns its length (ms). */
  leftQueue(now: number): number {
    if (Number.isNaN(this.queuedSince)) return 0;
    const stretch = now - this.queuedSince;
    this.queuedMs += stretch;
    this.queuedSince = Number.NaN;
    return stretch;
  }
}

export interface WorkerListener {
  firstToken(job: Job, t: number): void;
  finished(job: Job, t: number): void;
  /** The worker failed the request: `upstream_reset` (worker died) or `context_length` (cannot ever fit). */
  failed(job: Job, t: number, reason: "upstream_reset" | "context_length"): void;
}

/** Doubly linked FIFO over Job.prev/next (a job is on at most one list). */
class JobList {
  head: Job | null = null;
  tail: Job | null = null;
  size = 0;

  pushBack(job: Job): void {
    job.next = null;
    job.prev = this.tail;
    if (this.tail) this.tail.next = job;
    else this.head = job;
    this.tail = job;
    this.size++;
  }

  pushFront(job: Job): void {
    job.prev = null;
    job.next = this.head;
    if (this.head) this.head.prev = job;
    else this.tail = job;
    this.head = job;
    this.size++;
  }

  remove(job: Job): void {
    if (job.prev) job.prev.next = job.next;
    else this.head = job.next;
    if (job.next) job.next.prev = job.prev;
    else this.tail = job.prev;
    job.prev = job.next = null;
    this.size--;
  }
}

/** Min-heap of decoding jobs by finishing iteration (ties: admission order). */
class FinishHeap {
  readonly items: Job[] = [];

  get size(): number {
    return this.items.length;
  }

  min(): Job | undefined {
    return this.items[0];
  }

  private less(a: Job, b: Job): boolean {
    return a.finishIter < b.finishIter || (a.finishIter === b.finishIter && a.seq < b.seq);
  }

  push(job: Job): void {
    job.heapIndex = this.items.length;
    this.items.push(job);
    this.up(job.heapIndex);
  }

  remove(job: Job): void {
    const i = job.heapIndex;
    if (i < 0) return;
    job.heapIndex = -1;
    const last = this.items.pop()!;
    if (i < this.items.length) {
      this.items[i] = last;
      last.heapIndex = i;
      this.down(i);
      this.up(last.heapIndex);
    }
  }

  private up(i: number): void {
    const items = this.items;
    const job = items[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = items[p]!;
      if (!this.less(job, parent)) break;
      items[i] = parent;
      parent.heapIndex = i;
      i = p;
    }
    items[i] = job;
    job.heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const job = items[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      let c = l;
      if (r < n && this.less(items[r]!, items[l]!)) c = r;
      const child = items[c]!;
      if (!this.less(child, job)) break;
      items[i] = child;
      child.heapIndex = i;
      i = c;
    }
    items[i] = job;
    job.heapIndex = i;
  }
}

export interface WorkerStats {
  /** Requests preempted inside the worker by a full KV cache (recompute policy). */
  kvPreemptions: number;
  /** Largest KV occupancy seen, tokens. */
  kvPeak: number;
  /** Milliseconds spent running iterations. */
  busyMs: number;
  iterations: number;
  prefillTokens: number;
  decodeTokens: number;
  completed: number;
  /** Prompt tokens found in the prefix cache (not prefilled). */
  cachedTokens: number;
  /** Tokens whose KV a preemption inside the worker threw away (prefilled again later). */
  recomputedTokens: number;
  /** Time requests spent queued inside the worker (submitted or preempted, until they run), ms. */
  engineWaitMs: number;
  /** Times a request joined that queue (a preempted one joins again). */
  engineWaits: number;
  /** The most requests that queue held at once. */
  engineWaitingPeak: number;
}

export class Worker {
  up = true;
  slowdown = 1;
  /** Set by adaptive capacity: how many requests routing may put here (undefined: its max_running). */
  adaptiveLimit: number | undefined = undefined;
  readonly stats: WorkerStats = {
    kvPreemptions: 0,
    kvPeak: 0,
    busyMs: 0,
    iterations: 0,
    prefillTokens: 0,
    decodeTokens: 0,
    completed: 0,
    cachedTokens: 0,
    recomputedTokens: 0,
    engineWaitMs: 0,
    engineWaits: 0,
    engineWaitingPeak: 0,
  };
  private readonly prefixCache = new BlockCache();
  /** Sum over decoding jobs of (cached + prefillTarget - decodeStart): their contexts at iteration i add nDec * i. */
  private ctxBase = 0;
  private readonly waiting = new JobList();
  private readonly running = new JobList();
  private prefilling: Job[] = [];
  private readonly decoding = new FinishHeap();
  private kvUsed = 0;
  private iter = 0;
  private admitSeq = 0;
  // The macro step in progress.
  private busy = false;
  private stepStart = 0;
  private stepDur = 0;
  private stepK = 0;
  private stepDecoders = 0;
  private stepPrefill = 0;
  private event: SimEvent | null = null;
  private readonly onBoundary = () => this.boundary();

  constructor(
    readonly index: number,
    readonly name: string,
    readonly profile: WorkerProfile,
    private readonly clock: SimClock,
    private readonly listener: WorkerListener,
  ) {}

  /** Requests on this worker, running or queued (what routing balances). */
  get load(): number {
    return this.running.size + this.waiting.size;
  }

  /** Its identity for adaptive capacity (the gateway keys workers by URL). */
  get url(): string {
    return this.name;
  }

  /** What it reports it can run (nothing while down), as the gateway's Worker. */
  get availableCapacity(): number {
    return this.up ? this.profile.maxRunning : 0;
  }

  /** Requests the gateway has on it, as the gateway's Worker. */
  get inflight(): number {
    return this.load;
  }

  /** How many requests it may take: its adaptive limit, else what it reports. */
  get roomLimit(): number {
    return this.adaptiveLimit === undefined
      ? this.profile.maxRunning
      : Math.min(this.adaptiveLimit, this.profile.maxRunning);
  }

  get runningCount(): number {
    return this.running.size;
  }

  get queuedCount(): number {
    return this.waiting.size;
  }

  get kvTokensUsed(): number {
    return this.kvUsed;
  }

  /**
   * What its engine's /metrics would say now (running, waiting, KV use): the signals adaptive
   * capacity reads from a real engine. Read live at each window close, as a scrape every second.
   */
  engineView(): EngineView {
    return {
      running: this.running.size,
      waiting: this.waiting.size,
      kvUtilization: this.kvUsed / this.profile.kvTokens,
    };
  }

  /** Places a request on this worker; it joins the batch at the next iteration with room for it. */
  submit(job: Job): void {
    const now = this.clock.now();
    const p = this.profile;
    const need = p.kvPolicy === "reserve" ? job.prompt + job.maxTokens : job.prompt + job.output;
    if (need > p.kvTokens) {
      this.listener.failed(job, now, "context_length");
      return;
    }
    job.worker = this;
    job.state = WAITING;
    job.prefillTarget = job.prompt;
    job.cached = 0;
    if (job.prefixBlocks !== undefined && job.prefixBlocks.length > 0) {
      // The last prompt token is always computed: its forward pass makes the first output token.
      job.cached = Math.min(this.prefixCache.match(job.prefixBlocks, job.blockTokens), job.prompt - 1);
      job.prefillTarget = job.prompt - job.cached;
      this.stats.cachedTokens += job.cached;
    }
    job.prefilled = 0;
    job.genBase = 0;
    job.queuedSince = now;
    this.waiting.pushBack(job);
    this.waited();
    this.interrupt(now);
  }

  /** Takes a request off this worker at once (preempted by the gateway, or cancelled). */
  abort(job: Job): void {
    if (job.worker !== this || job.state === GONE) return;
    const now = this.clock.now();
    if (job.state === WAITING) {
      this.waiting.remove(job);
      job.leftQueue(now);
      job.state = GONE;
      job.worker = null;
      this.interrupt(now);
      return;
    }
    if (job.state === DECODE && this.busy) this.stepDecoders--; // its growth this step is never added
    this.leaveRunning(job);
    job.state = GONE;
    job.worker = null;
    this.interrupt(now);
  }

  /** Changes the step-time multiplier; the iteration in progress finishes at the old speed. */
  setSlowdown(factor: number): void {
    this.slowdown = factor;
    this.interrupt(this.clock.now());
  }

  /** The worker dies: every request on it fails (upstream_reset) and it takes no more. */
  fail(): void {
    const now = this.clock.now();
    const victims: Job[] = [];
    for (let j = this.running.head; j !== null; j = j.next) victims.push(j);
    for (let j = this.waiting.head; j !== null; j = j.next) victims.push(j);
    this.reset();
    this.up = false;
    for (const job of victims) {
      job.leftQueue(now);
      job.state = GONE;
      job.worker = null;
      job.prev = job.next = null;
      job.heapIndex = -1;
      job.heldBlocks = 0;
      this.listener.failed(job, now, "upstream_reset");
    }
  }

  /** The worker is back, empty. */
  recover(): void {
    this.up = true;
  }

  private reset(): void {
    if (this.event) this.event.dead = true;
    this.event = null;
    this.busy = false;
    this.waiting.head = this.waiting.tail = null;
    this.waiting.size = 0;
    this.running.head = this.running.tail = null;
    this.running.size = 0;
    this.prefilling = [];
    this.decoding.items.length = 0;
    this.kvUsed = 0;
    this.ctxBase = 0;
    this.prefixCache.clear();
  }

  /**
   * Prefill tokens computed so far for a job on this worker (what preempting it now throws away):
   * its finished chunks, those of the macro step in progress up to now, and all of it once decoding.
   */
  computedPrefill(job: Job): number {
    if (job.worker !== this) return 0;
    if (job.state === DECODE) return job.prefillTarget;
    if (job.state !== PREFILL) return 0;
    let done = job.prefilled;
    if (this.busy && job.chunk > 0) {
      const j = Math.min(this.stepK, Math.floor((this.clock.now() - this.stepStart) / this.stepDur));
      done += job.chunk * j;
    }
    return Math.min(done, job.prefillTarget);
  }

  /** Prefix-cache figures: tokens held and blocks evicted. */
  get prefixCacheStats(): { tokens: number; evicted: number } {
    return { tokens: this.prefixCache.tokens, evicted: this.prefixCache.evicted };
  }

  private kvOf(job: Job): number {
    if (this.profile.kvPolicy === "reserve") return job.kvHeld;
    return job.cached + job.prefillTarget + (job.state === DECODE ? this.iter - job.decodeStart : 0);
  }

  /** A job leaves the batch: its prefix blocks stay cached as free blocks. */
  private releaseBlocks(job: Job): void {
    if (job.heldBlocks > 0) {
      this.prefixCache.release(job.prefixBlocks!, job.heldBlocks);
      job.heldBlocks = 0;
    }
  }

  private leaveRunning(job: Job): void {
    this.releaseBlocks(job);
    this.kvUsed -= this.kvOf(job);
    this.running.remove(job);
    if (job.state === PREFILL) {
      const i = this.prefilling.indexOf(job);
      if (i >= 0) this.prefilling.splice(i, 1);
    } else if (job.state === DECODE) {
      this.decoding.remove(job);
      this.ctxBase -= job.cached + job.prefillTarget - job.decodeStart;
    }
    job.chunk = 0;
  }

  /** Something changed: cut the macro step at the end of the iteration in progress. */
  private interrupt(now: number): void {
    if (!this.up) return;
    if (!this.busy) {
      this.plan(now);
      return;
    }
    const j = Math.floor((now - this.stepStart) / this.stepDur) + 1;
    if (j < this.stepK) {
      this.stepK = j;
      this.event!.dead = true;
      this.event = this.clock.at(this.stepStart + j * this.stepDur, this.onBoundary);
    }
  }

  /** Preempts the newest running request back to the head of the queue (recompute policy). */
  private preemptNewest(): void {
    const victim = this.running.tail!;
    const generated =
      victim.state === DECODE ? victim.genBase + (this.iter - victim.decodeStart + 1) : victim.genBase;
    const lost =
      victim.state === DECODE ? victim.prefillTarget + (this.iter - victim.decodeStart) : victim.prefilled;
    victim.recomputed += lost;
    this.stats.recomputedTokens += lost;
    this.leaveRunning(victim);
    victim.genBase = generated;
    // A recompute starts over, the cached prefix included (its blocks went with the request's).
    victim.cached = 0;
    victim.prefillTarget = victim.prompt + generated;
    victim.prefilled = 0;
    victim.state = WAITING;
    victim.queuedSince = this.clock.now();
    victim.preemptions++;
    this.waiting.pushFront(victim);
    this.waited();
    this.stats.kvPreemptions++;
  }

  /** A job joined the waiting queue (its own clock is `queuedSince`): the engine-side wait counters. */
  private waited(): void {
    this.stats.engineWaits++;
    if (this.waiting.size > this.stats.engineWaitingPeak) this.stats.engineWaitingPeak = this.waiting.size;
  }

  /**
   * The decode pace of every decoding request since its last mark, as the gateway reports it
   * while a stream runs: for each whose mark is at least `intervalMs` old, `emit(job, tpotMs)`
   * with the time from its mark to the end of the last finished iteration over the tokens in
   * between (and the span from the last mark to now), and a new mark there.
   */
  paceMarks(now: number, intervalMs: number, emit: (job: Job, tpotMs: number, spanMs: number) => void): void {
    if (!this.busy || this.decoding.size === 0) return;
    const j = Math.min(this.stepK, Math.floor((now - this.stepStart) / this.stepDur));
    const iter = this.iter + j;
    const at = this.stepStart + j * this.stepDur;
    for (const job of this.decoding.items) {
      const tokens = iter - job.paceIter;
      if (tokens < 1 || at - job.paceAt < intervalMs) continue;
      emit(job, (at - job.paceAt) / tokens, now - job.paceAt);
      job.paceIter = iter;
      job.paceAt = at;
      job.paceMarks++;
    }
  }

  /** Composes the next iterations and schedules the end of the macro step. */
  private plan(now: number): void {
    const p = this.profile;
    const recompute = p.kvPolicy === "recompute";
    if (recompute) {
      while (this.decoding.size > 0 && this.kvUsed + this.decoding.size > p.kvTokens) this.preemptNewest();
    }
    const nDec = this.decoding.size;
    let budget = p.maxBatchedTokens - nDec;
    let prefillTokens = 0;
    for (const job of this.prefilling) {
      const c = budget > 0 ? Math.min(job.prefillTarget - job.prefilled, budget) : 0;
      job.chunk = c;
      budget -= c;
      prefillTokens += c;
    }
    // Waiting requests join while the batch, the cache and the token budget have room (FIFO: a
    // head that does not fit blocks the rest, as in vLLM).
    while (budget > 0 && this.waiting.head !== null && this.running.size < p.maxRunning) {
      const job = this.waiting.head;
      const need = recompute ? job.cached + job.prefillTarget : job.prompt + job.maxTokens;
      if (this.kvUsed + need > p.kvTokens) break;
      this.waiting.remove(job);
      this.stats.engineWaitMs += job.leftQueue(now);
      job.state = PREFILL;
      job.prefilled = 0;
      job.seq = this.admitSeq++;
      job.kvHeld = recompute ? 0 : need;
      this.kvUsed += need;
      this.running.pushBack(job);
      this.prefilling.push(job);
      const c = Math.min(job.prefillTarget, budget);
      job.chunk = c;
      budget -= c;
      prefillTokens += c;
    }
    if (this.kvUsed > this.stats.kvPeak) this.stats.kvPeak = this.kvUsed;
    // The prefix cache keeps only what the running requests leave free.
    this.prefixCache.evictTo(Math.max(0, p.kvTokens - this.kvUsed));
    if (nDec === 0 && prefillTokens === 0) {
      this.busy = false;
      this.event = null;
      return;
    }
    let k = Number.POSITIVE_INFINITY;
    const first = this.decoding.min();
    if (first !== undefined) k = first.finishIter - this.iter;
    for (const job of this.prefilling) {
      if (job.chunk > 0) {
        const n = Math.floor((job.prefillTarget - job.prefilled) / job.chunk);
        if (n < k) k = n;
      }
    }
    if (recompute && nDec > 0) {
      const n = Math.floor((p.kvTokens - this.kvUsed) / nDec);
      if (n < k) k = n;
    }
    if (!(k >= 1)) k = 1;
    // The iteration at the macro step's midpoint: k of it cost what the k iterations cost.
    const mid = (k - 1) / 2;
    let us = p.beta0 + p.beta1 * prefillTokens + p.beta2 * nDec;
    const attnDecode = p.attnDecodeUs ?? 0;
    if (attnDecode > 0 && nDec > 0) us += attnDecode * (this.ctxBase + nDec * (this.iter + mid));
    const attnPrefill = p.attnPrefillUs ?? 0;
    if (attnPrefill > 0) {
      let pairs = 0;
      for (const job of this.prefilling) {
        const c = job.chunk;
        if (c > 0) pairs += c * (job.cached + job.prefilled + c * mid + c / 2);
      }
      us += attnPrefill * pairs;
    }
    const d = (us / 1000) * this.slowdown;
    this.busy = true;
    this.stepStart = now;
    this.stepDur = d;
    this.stepK = k;
    this.stepDecoders = nDec;
    this.stepPrefill = prefillTokens;
    this.event = this.clock.at(now + k * d, this.onBoundary);
  }

  /** End of a macro step: commit its iterations, emit first tokens and completions, plan on. */
  private boundary(): void {
    const now = this.clock.now();
    const k = this.stepK;
    this.event = null;
    this.busy = false;
    this.iter += k;
    const st = this.stats;
    st.busyMs += k * this.stepDur;
    st.iterations += k;
    st.decodeTokens += this.stepDecoders * k;
    st.prefillTokens += this.stepPrefill * k;
    if (this.profile.kvPolicy === "recompute") this.kvUsed += this.stepDecoders * k;

    const firsts: Job[] = [];
    const done: Job[] = [];
    if (this.prefilling.length > 0) {
      let keep: Job[] | null = null;
      for (let i = 0; i < this.prefilling.length; i++) {
        const job = this.prefilling[i]!;
        if (job.chunk > 0) job.prefilled += job.chunk * k;
        if (job.prefilled < job.prefillTarget) {
          keep?.push(job);
          continue;
        }
        if (keep === null) keep = this.prefilling.slice(0, i);
        job.chunk = 0;
        job.state = DECODE;
        job.decodeStart = this.iter;
        if (job.prefixBlocks !== undefined && job.heldBlocks === 0) {
          job.heldBlocks = this.prefixCache.acquire(job.prefixBlocks, job.blockTokens, job.prompt);
        }
        job.finishIter = this.iter + (job.output - job.genBase - 1);
        job.paceIter = this.iter;
        job.paceAt = now;
        if (!job.firstTokenSent) {
          job.firstTokenSent = true;
          firsts.push(job);
        }
        if (job.finishIter <= this.iter) {
          this.releaseBlocks(job);
          this.kvUsed -= this.kvOf(job);
          this.running.remove(job);
          job.state = GONE;
          done.push(job);
        } else {
          this.decoding.push(job);
          this.ctxBase += job.cached + job.prefillTarget - job.decodeStart;
        }
      }
      if (keep !== null) this.prefilling = keep;
    }
    for (let top = this.decoding.min(); top !== undefined && top.finishIter <= this.iter; ) {
      this.decoding.remove(top);
      this.ctxBase -= top.cached + top.prefillTarget - top.decodeStart;
      this.releaseBlocks(top);
      this.kvUsed -= this.kvOf(top);
      this.running.remove(top);
      top.state = GONE;
      done.push(top);
      top = this.decoding.min();
    }
    st.completed += done.length;
    this.plan(now);
    for (const job of firsts) this.listener.firstToken(job, now);
    for (const job of done) {
      job.worker = null;
      this.listener.finished(job, now);
    }
  }
}
