/**
 * Worker-choice and circuit-breaker settings, with their documented defaults (docs/routing.md).
 * The cache-aware knobs keep the reference gateway's names and meanings; its defaults where they
 * fit a fleet whose workers are capacity-bounded (see DEFAULT_ROUTING).
 */

/** The worker-choice policies, `--policy` (YAML `policy`). */
export const POLICY_NAMES = [
  "cache_aware",
  "prefix_hash",
  "session",
  "power_of_two",
  "round_robin",
  "random",
  "least_tokens",
] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

const DEFAULT_POLICY: PolicyName = "cache_aware";

export interface RoutingOptions {
  policy: PolicyName;
  /** `session`: the request header whose value is hashed (lowercase). */
  sessionHeader: string;
  /** `cache_aware`: the smallest matched share of the prompt (0..1) that pins a request to a worker. */
  cacheThreshold: number;
  /** Overload gate, absolute part: a worker's in-flight requests above the candidates' mean by more than this... */
  balanceAbsThreshold: number;
  /** ...and above this multiple of the mean: it is overloaded and the request goes to the least loaded. */
  balanceRelThreshold: number;
  /** `cache_aware`: characters the prefix tree may hold per worker set; the least recently used go first. */
  cacheAwareMaxTreeSize: number;
}

/**
 * The reference's defaults (smg `--cache-threshold 0.3`, `--balance-rel-threshold 1.5`,
 * `--max-tree-size 67108864`), except the absolute margin: the reference's 64 in-flight requests
 * above the mean can never be reached in front of workers that run 64 at a time (SGLang's usual
 * `max_running_requests` in a small fleet, and sluice never sends a worker more than its capacity),
 * so the gate would never fire and a shared system prompt would pin every conversation to one
 * worker. 4 keeps the reference's rule (both margins must clear) at the loads sluice sees.
 */
export const DEFAULT_ROUTING: RoutingOptions = {
  policy: DEFAULT_POLICY,
  sessionHeader: "x-session-id",
  cacheThreshold: 0.3,
  balanceAbsThreshold: 4,
  balanceRelThreshold: 1.5,
  cacheAwareMaxTreeSize: 67_108_864,
};

export interface BreakerOptions {
  /** Consecutive failures that open the circuit; 0 = this rule is off. */
  failures: number;
  /** Failed share of the requests in the window that opens the circuit (0..1]; 0 = this rule is off. */
  errorRatio: number;
  /** The error-ratio window, seconds. */
  windowSecs: number;
  /** Requests the window must hold before the error ratio counts. */
  minRequests: number;
  /** Time an open circuit waits before it lets trial requests through (half-open), seconds. */
  cooldownSecs: number;
  /** Trial requests a half-open circuit lets through at once; the first success closes it. */
  halfOpenRequests: number;
}

/**
 * The `sluice` command's defaults: the reference's circuit-breaker defaults (`--cb-failure-threshold
 * 10`, `--cb-timeout-duration-secs 60`, `--cb-window-duration-secs 120`), plus an error ratio of one
 * half over at least 20 requests, and three trial requests.
 */
export const DEFAULT_BREAKER: BreakerOptions = {
  failures: 10,
  errorRatio: 0.5,
  windowSecs: 120,
  minRequests: 20,
  cooldownSecs: 60,
  halfOpenRequests: 3,
};

/**
 * A gateway embedded without `breaker` options (tests, the demo, embedders): no rule counts
 * failures, so a worker is only taken out when it refuses connections or fails its health checks,
 * as before breakers existed.
 */
export const BREAKER_COUNTING_OFF: BreakerOptions = { ...DEFAULT_BREAKER, failures: 0, errorRatio: 0 };
