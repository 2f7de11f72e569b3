/**
 * Typed admission errors with stable codes, in the style of undici/fastify: callers switch on
 * `code` (never on the message). A core error says why admission failed, not how to answer it:
 * it carries no HTTP status. The gateway's error table (src/gateway/error-table.ts) maps each code
 * to its status and Retry-After rule.
 */
import type { BudgetRejectionReason } from "./budgets.js";
import type { PriorityClass } from "./class.js";

export type AdmissionErrorCode =
  | "scheduler_queue_full"
  | "scheduler_queue_timeout"
  | "scheduler_preempted"
  | "scheduler_client_cancelled"
  | "admission_queue_full"
  | "admission_queue_timeout"
  | "admission_client_cancelled";

export class AdmissionError extends Error {
  override readonly name: string = "AdmissionError";
  /** Stable machine-readable code; also sent as `X-SMG-Error-Code`. */
  readonly code: AdmissionErrorCode;
  /** Seconds a client should wait before retrying, when the contract says so. */
  readonly retryAfterSecs: number | undefined;
  /** Effective class of the request, when the scheduler had resolved one. */
  readonly priorityClass: PriorityClass | undefined;
  /**
   * Time the request waited in the queue before it left without a slot (a queue timeout, the client
   * gone while queued), ms on the scheduler's clock; undefined when it never queued.
   */
  queueWaitMs: number | undefined;

  constructor(
    code: AdmissionErrorCode,
    message: string,
    options: { retryAfterSecs?: number; priorityClass?: PriorityClass } = {},
  ) {
    super(message);
    this.code = code;
    this.retryAfterSecs = options.retryAfterSecs;
    this.priorityClass = options.priorityClass;
  }
}

export class QueueFullError extends AdmissionError {
  override readonly name = "QueueFullError";
  constructor(cls: PriorityClass, limit: number) {
    super("scheduler_queue_full", `the ${cls} queue is full (${limit} waiting)`, { priorityClass: cls });
  }
}

export class QueueTimeoutError extends AdmissionError {
  override readonly name = "QueueTimeoutError";
  constructor(cls: PriorityClass, timeoutSecs: number) {
    super("scheduler_queue_timeout", `waited ${timeoutSecs}s in the ${cls} queue without admission`, {
      priorityClass: cls,
    });
  }
}

export class PreemptedError extends AdmissionError {
  override readonly name = "PreemptedError";
  constructor(cls: PriorityClass, byClass: PriorityClass) {
    super(
      "scheduler_preempted",
      `the ${cls} request was preempted before its first byte by a ${byClass} request`,
      { retryAfterSecs: 1, priorityClass: cls },
    );
  }
}

export class ClientCancelledError extends AdmissionError {
  override readonly name = "ClientCancelledError";
  constructor(
    cls: PriorityClass | undefined,
    code: "scheduler_client_cancelled" | "admission_client_cancelled",
  ) {
    super(code, "the client went away before admission completed", cls ? { priorityClass: cls } : {});
  }
}

/**
 * A tenant's access rule or budget refused the request before it queued: the reason budgets.ts
 * gives, raised by a budget store that keeps its accounts elsewhere (the shared one in Redis).
 */
export class BudgetRefusedError extends Error {
  override readonly name = "BudgetRefusedError";
  readonly code: BudgetRejectionReason;
  /** For the transient refusal (the token bucket): seconds until the estimate fits. */
  readonly retryAfterSecs: number | undefined;
  constructor(code: BudgetRejectionReason, message: string, retryAfterSecs?: number) {
    super(message);
    this.code = code;
    this.retryAfterSecs = retryAfterSecs;
  }
}

/** A configuration value is invalid; `path` names the key (e.g. `classes.bulk.queue_timeout_secs`). */
export class ConfigError extends Error {
  override readonly name: string = "ConfigError";
  readonly code = "invalid_config";
  readonly path: string;
  /** What is wrong, without the path: for re-raising under a longer path (a file, a block). */
  readonly reason: string;
  constructor(path: string, reason: string) {
    super(path ? `${path}: ${reason}` : reason);
    this.path = path;
    this.reason = reason;
  }
}

/** The configured reservations do not fit the capacity the scheduler is built with. */
export class ReservationsExceedCapacityError extends ConfigError {
  override readonly name = "ReservationsExceedCapacityError";
  readonly reserved: number;
  readonly capacity: number;
  constructor(reserved: number, capacity: number, detail: string) {
    super("classes", `reservations total ${reserved} exceed capacity ${capacity} (${detail})`);
    this.reserved = reserved;
    this.capacity = capacity;
  }
}
