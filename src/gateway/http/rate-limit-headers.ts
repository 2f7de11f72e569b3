/**
 * The rate-limit headers of an answer to an identified tenant, in OpenAI's names and formats
 * (docs/rate-limit-headers.md): per configured per-minute bucket, its limit, what is left, and the
 * time until it is full again; per term budget, what is left of it this period.
 *
 *   x-ratelimit-limit-requests / -remaining-requests / -reset-requests   requests_per_minute
 *   x-ratelimit-limit-tokens   / -remaining-tokens   / -reset-tokens     tokens_per_minute
 *   x-sluice-budget-remaining-tokens                                     budget_tokens
 *   x-sluice-budget-remaining-usd                                        budget_cost_usd
 *
 * Only the headers of limits the tenant has are sent: a client reads an absent pair as "no limit".
 */
import type { BudgetRemaining } from "@sluice/scheduler/core/budgets.js";
import type { TenantPolicy } from "@sluice/scheduler/core/config.js";

/** The header names sluice sets itself; a worker's own values of these names are not passed on. */
export const RATE_LIMIT_HEADER_PREFIXES = ["x-ratelimit-", "x-sluice-budget-"] as const;

/**
 * A duration as OpenAI writes it in `x-ratelimit-reset-*` (Go's duration format): under a second
 * in whole milliseconds (`20ms`), else hours, minutes and seconds with the seconds' fraction to the
 * millisecond, trailing zeros dropped (`1s`, `6m0s`, `1m30.5s`, `2h0m0s`). Rounded up to the
 * millisecond, so a client that waits the value finds the bucket full. 0 is `0s`.
 */
export function formatResetDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return "0s";
  const total = Math.ceil(ms);
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const millis = total % 60_000;
  const whole = Math.floor(millis / 1000);
  const fraction = millis % 1000;
  const secs =
    fraction === 0 ? `${whole}s` : `${whole}.${String(fraction).padStart(3, "0").replace(/0+$/, "")}s`;
  if (hours > 0) return `${hours}h${minutes}m${secs}`;
  if (minutes > 0) return `${minutes}m${secs}`;
  return secs;
}

/** Milliseconds until a bucket of `perMinute` (refilling `perMinute` a minute) at `level` is full. */
export function msUntilFull(level: number, perMinute: number): number {
  return Math.max(0, ((perMinute - level) * 60_000) / perMinute);
}

/** USD with at most six decimals (a millionth of a dollar), no exponent, no trailing zeros. */
function usd(value: number): string {
  const fixed = Math.max(0, value).toFixed(6);
  return fixed.replace(/\.?0+$/, "");
}

/** One bucket's three headers, appended to `out` (a flat name/value list). */
function bucketHeaders(out: string[], unit: "requests" | "tokens", perMinute: number, level: number): void {
  const left = Math.max(0, Math.min(perMinute, level));
  out.push(
    `x-ratelimit-limit-${unit}`,
    String(Math.floor(perMinute)),
    `x-ratelimit-remaining-${unit}`,
    String(Math.floor(left)),
    `x-ratelimit-reset-${unit}`,
    formatResetDuration(msUntilFull(left, perMinute)),
  );
}

/**
 * The headers for a tenant's policy and what is left of its limits now (BudgetBook.remaining), as
 * a flat name/value list; empty when the tenant has none of these limits.
 */
export function rateLimitHeaders(policy: TenantPolicy, remaining: BudgetRemaining): string[] {
  const out: string[] = [];
  const rpm = policy.requests_per_minute;
  if (rpm !== undefined) bucketHeaders(out, "requests", rpm, remaining.requests_per_minute ?? rpm);
  const tpm = policy.tokens_per_minute;
  if (tpm !== undefined) bucketHeaders(out, "tokens", tpm, remaining.tokens_per_minute ?? tpm);
  if (policy.budget_tokens !== undefined) {
    const left = remaining.budget_tokens ?? policy.budget_tokens;
    out.push("x-sluice-budget-remaining-tokens", String(Math.max(0, Math.floor(left))));
  }
  if (policy.budget_cost_usd !== undefined) {
    out.push("x-sluice-budget-remaining-usd", usd(remaining.budget_cost_usd ?? policy.budget_cost_usd));
  }
  return out;
}

/** True for a header name sluice sets itself from the tenant's limits. */
export function isRateLimitHeader(name: string): boolean {
  return name.startsWith(RATE_LIMIT_HEADER_PREFIXES[0]) || name.startsWith(RATE_LIMIT_HEADER_PREFIXES[1]);
}
