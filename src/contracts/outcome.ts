/**
 * The outcome record: one per request, emitted exactly once when its lease ends, rejected requests
 * included. It is what the usage ledger stores and what metrics and logs are derived from.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";

/** How the request got (or did not get) its slot, as obleth defines it. */
export type AdmissionPath = "fast" | "queued" | "rejected";

/**
 * Where a served request's token counts come from: `reported` by the worker (its usage), `counted`
 * from a stream's events (the worker sent no usage; the prompt is the gateway's estimate), or
 * `estimated` (a whole answer without usage: from its completion text). Budgets, cost and the ledger
 * use the same numbers.
 */
export type TokenSource = "reported" | "counted" | "estimated";

/** How the request ended. */
export type OutcomeKind = "ok" | "preempted" | "cancelled" | "timeout" | "error" | "rejected";

export interface OutcomeRecord {
  /** Arrival, epoch ms. */
  tsMs: number;
  /** The correlation id (`X-Request-Id`): the client's own when usable, else the gateway's. */
  requestId: string;
  /**
   * The gateway's own id, unique per request (the ledger's key, the budget hold's key). Every record
   * the gateway emits has it; a record built elsewhere without one gets a fresh one in the ledger.
   */
  sluiceRequestId?: string | undefined;
  tenantId: string;
  model: string | undefined;
  requestedClass: PriorityClass | undefined;
  effectiveClass: PriorityClass | undefined;
  admission: AdmissionPath;
  outcome: OutcomeKind;
  /** The status the request ended with (for a stream cut after its first byte: the failure's). */
  status: number;
  /** The error code, when the gateway made the answer up or cut it. */
  errorCode: string | undefined;
  /** Time waiting for a slot: admitted after queueing, or left the queue without one (408, 499). */
  queueWaitMs: number;
  /** Arrival to the first body byte sent, when one was. */
  ttftMs: number | undefined;
  durationMs: number;
  estimatedTokens: number;
  /**
   * The tokens charged (`tokenSource` says where they come from); undefined when nothing was served
   * (rejected, never dispatched, a worker error without usage, cut before the first byte).
   */
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  /** Where `inputTokens`/`outputTokens` come from; undefined when nothing was charged. */
  tokenSource?: TokenSource | undefined;
  /** What the request was charged in USD (pricing table, from the tokens above), when any were. */
  costUsd: number | undefined;
  /** The worker's origin, when the request was dispatched (after retries: the last one tried). */
  worker: string | undefined;
  /**
   * Upstream attempts: 0 when never dispatched, 1 without retries, 1 + retries otherwise. Every
   * record the gateway emits has it; optional for records built elsewhere (ledger fixtures, benches).
   */
  attempts?: number | undefined;
}

/** Where outcome records go (metrics, the ledger, tests). */
export interface OutcomeSink {
  record(outcome: OutcomeRecord): void;
}
