/**
 * Safe retries (docs/routing.md, "Retries"), as a pure policy: which upstream failures may be tried
 * again on another worker of the request's pool, and how long to wait before the next attempt.
 *
 * Only failures before any response byte reached the client are retryable, and only those that say
 * the worker, not the request, failed: a refused connection, a connection reset before the answer,
 * and a 502 or 503 status line whose answer sluice has not yet forwarded. The gateway (lease.ts,
 * lifecycle.ts) adds what this file cannot see: the client is still there, the request was not
 * preempted, an untried worker of the pool exists, and the deadline leaves room.
 */

/** The `sluice_upstream_retries_total{reason}` label values, one per retryable failure. */
export const RETRY_REASONS = ["connect", "reset", "status_502", "status_503"] as const;
export type RetryReason = (typeof RETRY_REASONS)[number];

/** `--max-retries` (YAML `max_retries`) default: attempts after the first. */
export const DEFAULT_MAX_RETRIES = 2;

/** Backoff: full jitter over base x 2^(retry-1), capped. */
export const RETRY_BACKOFF_BASE_MS = 25;
export const RETRY_BACKOFF_CAP_MS = 250;

/** A worker status that may be retried when nothing of its answer reached the client. */
export function retryableStatus(status: number): RetryReason | undefined {
  if (status === 502) return "status_502";
  if (status === 503) return "status_503";
  return undefined;
}

/**
 * The reason an upstream failure (classified by upstream.ts's `upstreamFailure`) may be retried:
 * connect (refused, unreachable, connect timeout) and reset. A timeout is not: the attempt already
 * spent the request's deadline. A malformed answer and a refused request shape are not either.
 */
export function retryableFailure(kind: string): RetryReason | undefined {
  if (kind === "connect") return "connect";
  if (kind === "reset") return "reset";
  return undefined;
}

/**
 * The wait before retry number `retry` (1 for the first retry): uniform in [0, min(cap, base x
 * 2^(retry-1))) ("full jitter", AWS Architecture Blog), so retries of many requests that failed
 * together on one worker do not arrive together on the next. `random` returns [0, 1).
 */
export function retryBackoffMs(retry: number, random: () => number = Math.random): number {
  const ceiling = Math.min(RETRY_BACKOFF_CAP_MS, RETRY_BACKOFF_BASE_MS * 2 ** Math.max(0, retry - 1));
  return Math.floor(random() * ceiling);
}
