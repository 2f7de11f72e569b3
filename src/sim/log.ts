/**
 * The per-request outcome log of one simulated run, kept as growable typed arrays (one column per
 * field) so an hour at 100 requests/s costs a few tens of megabytes and sorts fast.
 */

/** Every way a simulated request can end. `ok` is a completed answer. */
export const OUTCOMES = [
  "ok",
  "scheduler_queue_full",
  "scheduler_queue_timeout",
  "scheduler_preempted",
  "scheduler_client_cancelled",
  "load_shed",
  "admission_queue_full",
  "admission_queue_timeout",
  "admission_client_cancelled",
  "tenant_inactive",
  "model_not_allowed",
  "tenant_budget_exhausted",
  "token_budget_exceeded",
  "model_not_found",
  "no_healthy_workers",
  "upstream_reset",
  "context_length",
  "unfinished",
  "request_rate_exceeded",
] as const;
export type Outcome = (typeof OUTCOMES)[number];
export const OUTCOME_INDEX: Readonly<Record<Outcome, number>> = Object.fromEntries(
  OUTCOMES.map((o, i) => [o, i]),
) as Record<Outcome, number>;
/** Outcomes that are the gateway's admission decisions (rejections), as opposed to worker failures. */
export const REJECTIONS: readonly Outcome[] = OUTCOMES.filter(
  (o) => o !== "ok" && o !== "upstream_reset" && o !== "context_length" && o !== "unfinished",
);

/** The pool column's value for a request whose model no pool serves. */
export const NO_POOL = 0xffff;

function grow<T extends Float64Array | Int32Array | Uint8Array | Uint16Array>(a: T, n: number): T {
  const b = new (a.constructor as new (n: number) => T)(n);
  b.set(a);
  return b;
}

export class RequestLog {
  size = 0;
  tenant = new Uint16Array(1024);
  /** Index into the scenario's pools, or NO_POOL. */
  pool = new Uint16Array(1024);
  cls = new Uint8Array(1024);
  outcome = new Uint8Array(1024);
  arrival = new Float64Array(1024);
  /** Queue wait (ms) of admitted requests, NaN otherwise. */
  wait = new Float64Array(1024);
  /** Arrival to first token (ms), NaN when none came. */
  ttft = new Float64Array(1024);
  /** Mean time per output token after the first (ms), NaN when fewer than two tokens came. */
  tpot = new Float64Array(1024);
  /** Arrival to the last token (ms), completed requests only. */
  e2e = new Float64Array(1024);
  prompt = new Int32Array(1024);
  output = new Int32Array(1024);
  /** Completed requests: |predicted − actual| / actual output tokens (NaN: not measured). */
  predictionError = new Float64Array(1024);
  /** Time (ms) its last attempt spent queued inside the worker (engine), NaN when it reached none. */
  engineQueue = new Float64Array(1024);
  /** Times the worker preempted its last attempt on a full KV cache (each one a recompute). */
  enginePreemptions = new Int32Array(1024);

  add(r: {
    tenant: number;
    pool: number;
    cls: number;
    outcome: number;
    arrival: number;
    wait: number;
    ttft: number;
    tpot: number;
    e2e: number;
    prompt: number;
    output: number;
    predictionError: number;
    engineQueue: number;
    enginePreemptions: number;
  }): void {
    if (this.size === this.tenant.length) {
      const n = this.size * 2;
      this.tenant = grow(this.tenant, n);
      this.pool = grow(this.pool, n);
      this.cls = grow(this.cls, n);
      this.outcome = grow(this.outcome, n);
      this.arrival = grow(this.arrival, n);
      this.wait = grow(this.wait, n);
      this.ttft = grow(this.ttft, n);
      this.tpot = grow(this.tpot, n);
      this.e2e = grow(this.e2e, n);
      this.prompt = grow(this.prompt, n);
      this.output = grow(this.output, n);
      this.predictionError = grow(this.predictionError, n);
      this.engineQueue = grow(this.engineQueue, n);
      this.enginePreemptions = grow(this.enginePreemptions, n);
    }
    const i = this.size++;
    this.tenant[i] = r.tenant;
    this.pool[i] = r.pool;
    this.cls[i] = r.cls;
    this.outcome[i] = r.outcome;
    this.arrival[i] = r.arrival;
    this.wait[i] = r.wait;
    this.ttft[i] = r.ttft;
    this.tpot[i] = r.tpot;
    this.e2e[i] = r.e2e;
    this.prompt[i] = r.prompt;
    this.output[i] = r.output;
    this.predictionError[i] = r.predictionError;
    this.engineQueue[i] = r.engineQueue;
    this.enginePreemptions[i] = r.enginePreemptions;
  }
}
