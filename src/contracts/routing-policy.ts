/**
 * The one interface every worker-choice policy implements. A policy instance serves one worker set
 * (a pool): it is created per pool, sees only the candidates it is given, and forgets a worker when
 * told it left. It never reads the body itself: the request hands it what was already parsed.
 */

/** What a policy may read of a worker. */
export interface RoutingCandidate {
  /** Stable identity across restarts and gateway replicas (hashing keys on it). */
  readonly url: string;
  /** Requests this gateway has in flight on the worker: the load every policy balances. */
  readonly inflight: number;
}

/** What a policy may read of a request. */
export interface RoutingRequest {
  /** The prompt as text (chat messages' roles and contents, or `prompt`/`input`/`text`); "" when none. */
  promptText(): string;
  /** A request header's first value (name in lowercase). */
  header(name: string): string | undefined;
  /** The parsed JSON body, when it was a JSON object (for policies of an embedder's own). */
  readonly json: Record<string, unknown> | undefined;
  /**
   * Tokens the gateway has outstanding on the worker at `url` (prompt + predicted output of its
   * requests in flight there); absent when the caller does not count them.
   */
  outstandingTokens?(url: string): number;
}

export interface RoutingPolicy<W extends RoutingCandidate = RoutingCandidate> {
  /** A built-in policy's name (routing/options.ts) or an embedder's own. */
  readonly name: string;
  /**
   * Picks one of `candidates` (healthy, circuit not open, with room when any has room) for
   * `request`; undefined only when `candidates` is empty.
   */
  choose(candidates: readonly W[], request: RoutingRequest): W | undefined;
  /** `worker` left the set (unhealthy, circuit open, removed): drop what the policy keeps for it. */
  onWorkerRemoved(worker: W): void;
  /** Characters the policy's prefix tree holds (0 for policies without one). */
  readonly treeChars?: number;
}

/** A counter child, bound once per (policy, reason): counting a choice builds no label set. */
export interface ChoiceCounter {
  inc(): void;
}

/** Where policies report their choices (the metrics, or nothing). */
export interface RoutingObserver {
  /** The counter of choices by `policy` for `reason` (called at construction, not per request). */
  choices(policy: string, reason: string): ChoiceCounter;
  /** The prompt share matched by the chosen worker's prefix (cache-aware policies). */
  matchRatio(ratio: number): void;
}

const NO_COUNT: ChoiceCounter = { inc() {} };

export const NO_ROUTING_OBSERVER: RoutingObserver = {
  choices: () => NO_COUNT,
  matchRatio() {},
};

/** Makes one policy instance per worker set (an embedder's own policy; the routing bench's oracle). */
export type RoutingPolicyFactory = <W extends RoutingCandidate>() => RoutingPolicy<W>;
