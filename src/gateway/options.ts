/** Everything the gateway needs to run, already validated (the CLI builds it from flags and YAML). */

import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { Clock } from "@sluice/scheduler/core/clock.js";
import type { ClassOverrides, Pricing } from "@sluice/scheduler/core/config.js";
import type { LegacyLimiterOptions } from "@sluice/scheduler/core/legacy.js";
import type { Logger } from "pino";
import type { StateOptions } from "../admission/redis/options.js";
import type {
  ApiKeySpec,
  CapacityOptions,
  ClientLimits,
  EngineSignalOptions,
  HealthCheckOptions,
  KvCapacityOptions,
  WorkerPolicy,
  WorkerSpec,
} from "../config/gateway-settings.js";
import type { InferenceGatewaySettings } from "../config/inference-objectives.js";
import type { RoutingPolicyFactory } from "../contracts/routing-policy.js";
import type { LedgerOptions } from "../ledger/writer.js";
import type { BreakerOptions, RoutingOptions } from "../routing/options.js";
import type { LoadSheddingOptions } from "../shedding/load-shedding.js";

// The option types are defined beside the option table (src/config), which produces them.
export {
  type ApiKeySpec,
  CAPACITY_MODES,
  type CapacityMode,
  type CapacityOptions,
  type EngineSignalOptions,
  type HealthCheckOptions,
  type KvCapacityOptions,
  type WorkerPolicy,
  type WorkerSpec,
} from "../config/gateway-settings.js";

export interface GatewayOptions {
  workers: WorkerSpec[];
  host: string;
  port: number;
  policy: WorkerPolicy;
  /** The policies' knobs (session header, cache-aware thresholds, tree size); defaults: DEFAULT_ROUTING. */
  routing?: Partial<Omit<RoutingOptions, "policy">> | undefined;
  /** A policy of the embedder's own (one instance per pool), instead of `policy`. */
  routingPolicy?: RoutingPolicyFactory | undefined;
  /**
   * Per-worker circuit breakers (docs/routing.md). Absent = BREAKER_COUNTING_OFF: no failure count
   * opens a circuit, only refused connections and health checks (the `sluice` command always passes
   * its flags, whose defaults are DEFAULT_BREAKER).
   */
  breaker?: BreakerOptions | undefined;
  /**
   * Retries of a request whose upstream failed before any byte reached the client, on another
   * worker of its pool (docs/routing.md "Retries"); default DEFAULT_MAX_RETRIES (2), 0 = none.
   */
  maxRetries?: number | undefined;
  priorityScheduler: {
    enabled: boolean;
    /** A fallback to legacy admission (bad file, reservations that do not fit) fails the start instead. */
    strict?: boolean | undefined;
    defaultMaxClass: PriorityClass;
    /** Path of the priority-scheduler YAML; a bad file makes the gateway fall back to legacy admission. */
    configPath?: string | undefined;
    tenantMetricTopN: number;
  };
  legacy: Omit<LegacyLimiterOptions, "clock">;
  apiKeys: ApiKeySpec[];
  trustedTenantHeader?: string | null | undefined;
  /**
   * A Gateway API inference gateway in front is trusted (`--inference-gateway-headers`): its
   * fairness id names the tenant and its objective the class (docs/kubernetes.md). Undefined: off,
   * and both headers are removed from requests.
   */
  inferenceGateway?: InferenceGatewaySettings | undefined;
  requireAuth: boolean;
  /** Largest request body accepted, in bytes (413 past it). */
  maxPayloadSize: number;
  /** Upstream timeout: for the response headers, and for each silence in the response body. */
  requestTimeoutSecs: number;
  /** Upstream connect timeout (default 10 s). */
  upstreamConnectTimeoutSecs?: number | undefined;
  /** API key sent to workers that have none of their own in `workers`. */
  workerApiKey?: string | undefined;
  /** Ceiling of a request's estimated cost in tokens; default: the workers' context length, else 131072. */
  maxCostTokens?: number | undefined;
  /**
   * Output tokens a budgeted request without `max_tokens` reserves when neither its tenant nor its
   * model has a recent history of output lengths (`default_output_tokens`); default: the cost
   * ceiling less the prompt (the model's context). docs/tenants.md, "Token accounting".
   */
  defaultOutputTokens?: number | undefined;
  /** `x-ratelimit-*` and `x-sluice-budget-*` answer headers to identified tenants; default true. */
  rateLimitHeaders?: boolean | undefined;
  /** Static (default) or adaptive capacity. */
  capacity?: CapacityOptions | undefined;
  /** Shedding at the door (`load_shedding`, `keyed_shedding` in the gateway file); off when absent. */
  shedding?: LoadSheddingOptions | undefined;
  /** Where a request whose body names no model goes (`default_model`). */
  defaultModel?: string | undefined;
  /** Per-pool overrides of the priority YAML's classes, keyed by a model of the pool (`pools`). */
  pools?: Record<string, ClassOverrides> | undefined;
  /** `capacity_unit` / `kv_target_utilization`, fleet-wide and per pool (default: requests). */
  kvCapacity?: KvCapacityOptions | undefined;
  /** Client-side timeouts and the connection cap (defaults: DEFAULT_CLIENT_LIMITS). */
  clientLimits?: Partial<ClientLimits> | undefined;
  health: HealthCheckOptions;
  /** USD per million tokens per model, for `budget_cost_usd`. */
  pricing?: Pricing | undefined;
  /** The admin listener; absent = no admin API. */
  admin?: { host: string; port: number; token: string } | undefined;
  /** Re-reads the gateway file's reloadable parts (api_keys, pricing) on reload; throws ConfigError. */
  reloadGatewayConfig?: (() => { apiKeys: ApiKeySpec[]; pricing: Pricing }) | undefined;
  /**
   * The usage ledger (docs/ledger.md). Absent = no ledger: an embedded gateway (tests, the demo)
   * writes nothing unless asked; the `sluice` command's default is `duckdb:sluice-ledger.duckdb`.
   */
  ledger?: LedgerOptions | undefined;
  /**
   * OpenTelemetry traces over OTLP/HTTP to `<otlpEndpoint>/v1/traces` (`--otlp-endpoint`,
   * docs/tracing.md). Absent = tracing off: nothing is traced and traceparent passes through as is.
   */
  otlpEndpoint?: string | undefined;
  /**
   * GenAI metrics over OTLP/HTTP to `<otlpEndpoint>/v1/metrics` (`--otlp-metrics`,
   * docs/genai-telemetry.md); only with `otlpEndpoint`. Absent = on; false = traces only.
   */
  otlpMetrics?: boolean | undefined;
  /**
   * The workers' engine signals (docs/capacity.md): which engine each runs, and how often its
   * /metrics is scraped. Absent fields take DEFAULT_ENGINE_SIGNALS (auto, every 2 s, 1 s timeout).
   */
  engineSignals?: Partial<EngineSignalOptions> | undefined;
  /**
   * Shared state (`--state-url`, docs/replicas.md): several replicas admit as one through Redis.
   * Absent = admission and budgets in process.
   */
  state?: StateOptions | undefined;
  logger: Logger;
  clock?: Clock | undefined;
}

export const DEFAULT_HEALTH: HealthCheckOptions = {
  intervalSecs: 10,
  timeoutSecs: 5,
  failureThreshold: 3,
  successThreshold: 2,
  endpoint: "/health",
};
