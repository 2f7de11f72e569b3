/**
 * What the `sluice` command's flags, environment and `--config` file describe, already validated:
 * the settings a gateway starts from. The types live here (below the gateway) so the option table
 * can produce them; src/gateway/options.ts re-exports them for the gateway and embedders.
 */
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { ClassOverrides, Pricing } from "@sluice/scheduler/core/config.js";
import type { LegacyLimiterOptions } from "@sluice/scheduler/core/legacy.js";
import type { StateOptions } from "../admission/redis/options.js";
import type { EngineChoice } from "../capacity/engine-signals/engine-kind.js";
import type { CapacityUnit, KvCapacitySettings } from "../capacity/kv-budget.js";
import type { LedgerOptions } from "../ledger/writer.js";
import type { BreakerOptions, PolicyName, RoutingOptions } from "../routing/options.js";
import type { LoadSheddingOptions } from "../shedding/load-shedding.js";
import type { InferenceGatewaySettings } from "./inference-objectives.js";

/** Worker choice inside a pool (docs/routing.md). */
export type WorkerPolicy = PolicyName;

export interface WorkerSpec {
  url: string;
  /** Overrides the capacity the worker reports. */
  capacity?: number | undefined;
  /** This worker's own API key, sent as `Authorization: Bearer <key>` (vLLM/SGLang `--api-key`). */
  apiKey?: string | undefined;
  /** The models it serves; replaces what it reports at `GET /v1/models` (model pools). */
  models?: string[] | undefined;
  /** Its engine (`workers[].engine`); default: the fleet's `worker_engine`. */
  engine?: EngineChoice | undefined;
}

/** Reading the workers' engine signals (docs/capacity.md). */
export interface EngineSignalOptions {
  /** The engine of workers that name none (`worker_engine`, default auto). */
  engine: EngineChoice;
  /** Period of the /metrics scrapes; 0 = off (capacity is still read once when a worker joins). */
  scrapeIntervalMs: number;
  /** One scrape's timeout. */
  scrapeTimeoutMs: number;
}

export interface ApiKeySpec {
  /** Lowercase hex SHA-256 of the bearer token. */
  sha256: string;
  tenant: string;
}

export interface HealthCheckOptions {
  intervalSecs: number;
  timeoutSecs: number;
  /** Consecutive failures before a healthy worker is taken out. */
  failureThreshold: number;
  /** Consecutive successes before an unhealthy worker is put back. */
  successThreshold: number;
  endpoint: string;
}

export const CAPACITY_MODES = ["static", "adaptive"] as const;
export type CapacityMode = (typeof CAPACITY_MODES)[number];

/**
 * Where the scheduler's capacity comes from: the workers' reports (static), or a controller that
 * follows the engines' saturation signals with the TPOT and TTFT SLOs as guards (adaptive;
 * docs/adaptive.md).
 */
export interface CapacityOptions {
  mode: CapacityMode;
  /** Adaptive lower bound (default 1). */
  minCapacity?: number | undefined;
  /** Adaptive upper bound (default: the workers' reported capacity). */
  maxCapacity?: number | undefined;
  /** Time-per-output-token ceiling (on the p90 of a decision's samples): above it the limit shrinks. */
  tpotSloMs?: number | undefined;
  /** Time-to-first-token ceiling (from dispatch), same rule. */
  ttftSloMs?: number | undefined;
}

/** Client-side timeouts and the connection cap of a listener. */
export interface ClientLimits {
  /** Time a client has to send its request line and headers. */
  headersTimeoutSecs: number;
  /** Longest silence while a request body is arriving. */
  bodyIdleTimeoutSecs: number;
  /** Time a client has to send its whole request body, from the end of its headers. */
  bodyTimeoutSecs: number;
  /** Idle time of a keep-alive connection between two requests. */
  keepAliveTimeoutSecs: number;
  /** Open client connections; past it a new connection gets 503 and is closed. */
  maxConnections: number;
}

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
type LogLevel = (typeof LOG_LEVELS)[number];

/** `capacity_unit` and `kv_target_utilization`, for the fleet and per pool (by a model of the pool). */
export interface KvCapacityOptions {
  readonly fleet: KvCapacitySettings;
  readonly pools: Readonly<Record<string, { unit?: CapacityUnit; targetUtilization?: number }>>;
}

/** The part of the settings that becomes the gateway's options (startGateway) as it is. */
export interface GatewayStartSettings {
  workers: WorkerSpec[];
  host: string;
  port: number;
  policy: WorkerPolicy;
  priorityScheduler: {
    enabled: boolean;
    /** A fallback to legacy admission is a startup error instead. */
    strict: boolean;
    defaultMaxClass: PriorityClass;
    configPath: string | undefined;
    tenantMetricTopN: number;
  };
  legacy: Omit<LegacyLimiterOptions, "clock">;
  apiKeys: ApiKeySpec[];
  trustedTenantHeader: string | null;
  /** `--inference-gateway-headers`: what the inference gateway's headers mean (undefined: off). */
  inferenceGateway: InferenceGatewaySettings | undefined;
  requireAuth: boolean;
  maxPayloadSize: number;
  requestTimeoutSecs: number;
  upstreamConnectTimeoutSecs: number;
  workerApiKey: string | undefined;
  maxCostTokens: number | undefined;
  /** Output tokens a budget reserves for a request without max_tokens and no history (docs/tenants.md). */
  defaultOutputTokens: number | undefined;
  /** `x-ratelimit-*` and `x-sluice-budget-*` answer headers (docs/rate-limit-headers.md). */
  rateLimitHeaders: boolean;
  capacity: CapacityOptions;
  shedding: LoadSheddingOptions;
  /** The routing policies' knobs (docs/routing.md). */
  routing: Omit<RoutingOptions, "policy">;
  /** Per-worker circuit breakers (docs/routing.md). */
  breaker: BreakerOptions;
  /** Retries on another worker of the pool before any byte was sent (docs/routing.md "Retries"). */
  maxRetries: number;
  /** `default_model`: where a request that names no model goes. */
  defaultModel: string | undefined;
  /** `pools`: per-pool class overrides, keyed by a model of the pool. */
  pools: Record<string, ClassOverrides>;
  /** Capacity unit and KV target: the fleet's default and `pools.<model>` entries (docs/capacity.md). */
  kvCapacity: KvCapacityOptions;
  clientLimits: ClientLimits;
  health: HealthCheckOptions;
  pricing: Pricing;
  admin: { host: string; port: number; token: string } | undefined;
  /** The usage ledger (default duckdb:sluice-ledger.duckdb in the working directory). */
  ledger: LedgerOptions;
  /** Shared state through Redis (`--state-url`); undefined: state in process. */
  state: StateOptions | undefined;
  /** OpenTelemetry traces to this OTLP/HTTP collector (`--otlp-endpoint`); undefined: off. */
  otlpEndpoint: string | undefined;
  /** GenAI metrics to the same collector's /v1/metrics when `otlpEndpoint` is set (`--otlp-metrics`). */
  otlpMetrics: boolean;
  /** The workers' engine signals: recognition and /metrics scrapes (docs/capacity.md). */
  engineSignals: EngineSignalOptions;
}

/** The start settings plus what only the command itself uses. */
export interface GatewaySettings extends GatewayStartSettings {
  /** The workers' URLs after merging `--worker-urls` with the file's `workers`. */
  workerUrls: string[];
  /** How long SIGTERM lets requests already received finish (the gateway's close({drainMs})). */
  drainTimeoutSecs: number;
  logLevel: LogLevel;
  /** The --config file, for reloads. */
  configPath: string | undefined;
}
