/**
 * The outcome record: one per request, emitted exactly once when its lease ends, rejected requests
 * included. It is what the usage ledger stores and what metrics and logs are derived from.
 */
import type { PriorityClass } from "../core/class.js";

/** How the request got (or did not get) its slot, as obleth defines it. */
export type AdmissionPath = "fast" | "queued" | "rejected";

/** How the request ended. */
export type OutcomeKind = "ok" | "preempted" | "cancelled" | "timeout" | "error" | "rejected";

export interface OutcomeRecord {
  /** Arrival, epoch ms. */
  tsMs: number;
  requestId: string;
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
  queueWaitMs: number;
  /** Arrival to the first body byte sent, when one was. */
  ttftMs: number | undefined;
  durationMs: number;
  estimatedTokens: number;
  /** Actual usage, when the worker reported it. */
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  /** What the request was charged in USD (pricing table), when usage or an estimate was charged. */
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
