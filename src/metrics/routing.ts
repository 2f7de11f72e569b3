/**
 * Metrics of worker choice and circuit breakers (docs/routing.md): choices by policy and reason,
 * the matched prompt share of cache-aware choices, the prefix trees' size, and each worker's
 * circuit state (0 closed, 1 open, 2 half-open), read at scrape time.
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { ChoiceCounter, RoutingObserver } from "../contracts/routing-policy.js";
import { CIRCUIT_STATE_VALUE, type CircuitState } from "../routing/circuit-breaker.js";
import { RETRY_REASONS, type RetryReason } from "../routing/retry.js";

const ROUTING_METRIC_NAMES = {
  choices: "sluice_routing_choices_total",
  matchRatio: "sluice_routing_cache_match_ratio",
  treeChars: "sluice_routing_cache_tree_chars",
  circuitState: "sluice_worker_circuit_state",
  retries: "sluice_upstream_retries_total",
} as const;

/** Matched share of the prompt: exact zeros (no match) get their own bucket. */
const MATCH_RATIO_BUCKETS: readonly number[] = Object.freeze([
  0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1,
]);

interface RoutingMetricSources {
  /** Every worker's circuit state, by worker URL. */
  circuits(): Iterable<{ worker: string; state: CircuitState }>;
  /** Characters held by the prefix trees of every worker set. */
  treeChars(): number;
}

/** One (policy, reason) count: a plain number on the hot path, published at scrape time. */
class ChoiceCount implements ChoiceCounter {
  n = 0;
  constructor(
    readonly policy: string,
    readonly reason: string,
  ) {}
  inc(): void {
    this.n++;
  }
}

export function registerRoutingMetrics(registry: Registry, sources: RoutingMetricSources): RoutingObserver {
  const registers = [registry];
  // One count per (policy, reason), made when a policy is built and shared by every pool's policy.
  const counts = new Map<string, ChoiceCount>();
  new Counter({
    name: ROUTING_METRIC_NAMES.choices,
    help: "Workers chosen, by policy and reason (docs/routing.md lists each policy's reasons).",
    labelNames: ["policy", "reason"] as const,
    registers,
    collect() {
      this.reset();
      for (const c of counts.values()) this.inc({ policy: c.policy, reason: c.reason }, c.n);
    },
  });
  const ratio = new Histogram({
    name: ROUTING_METRIC_NAMES.matchRatio,
    help: "cache_aware: share of the prompt's characters matched by the best-matching candidate's prefix.",
    buckets: [...MATCH_RATIO_BUCKETS],
    registers,
  });
  new Gauge({
    name: ROUTING_METRIC_NAMES.treeChars,
    help: "cache_aware: characters held by the approximate prefix trees (bounded by cache_aware_max_tree_size each).",
    registers,
    collect() {
      this.set(sources.treeChars());
    },
  });
  new Gauge({
    name: ROUTING_METRIC_NAMES.circuitState,
    help: "Circuit breaker state per worker: 0 closed, 1 open, 2 half-open.",
    labelNames: ["worker"] as const,
    registers,
    collect() {
      // Rebuilt at every scrape: a worker that left the configuration leaves the series.
      this.reset();
      for (const { worker, state } of sources.circuits()) this.set({ worker }, CIRCUIT_STATE_VALUE[state]);
    },
  });
  return {
    choices(policy, reason) {
      const key = `${policy}\u0000${reason}`;
      let count = counts.get(key);
      if (count === undefined) {
        count = new ChoiceCount(policy, reason);
        counts.set(key, count);
      }
      return count;
    },
    matchRatio(value) {
      ratio.observe(value);
    },
  };
}

/** Retries counted by reason: plain numbers on the request path, published at scrape time. */
export interface RetryCounter {
  count(reason: RetryReason): void;
}

/** `sluice_upstream_retries_total{reason}`: every reason present from the start, at 0. */
export function registerRetryMetrics(registry: Registry): RetryCounter {
  const counts: Record<RetryReason, number> = { connect: 0, reset: 0, status_502: 0, status_503: 0 };
  new Counter({
    name: ROUTING_METRIC_NAMES.retries,
    help: "Upstream attempts retried on another worker of the pool, by the failure that caused the retry (connect, reset, status_502, status_503).",
    labelNames: ["reason"] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const reason of RETRY_REASONS) this.inc({ reason }, counts[reason]);
    },
  });
  return {
    count(reason) {
      counts[reason]++;
    },
  };
}
