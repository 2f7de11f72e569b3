/**
 * The `sluice` command line: the contract's flags with their exact names and defaults, plus
 * `--config FILE`, a YAML file holding any flag by its long name in snake_case (`worker_urls`,
 * `port`, ...) and what has no flag (`workers`, `api_keys`, `trusted_tenant_header`).
 * A flag given on the command line wins over the file; the file wins over the default.
 */
import { readFileSync } from "node:fs";
import { PRIORITY_CLASSES, type PriorityClass, parsePriority } from "@sluice/scheduler/core/class.js";
import type { ClassOverrides, Pricing } from "@sluice/scheduler/core/config.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { LegacyLimiterOptions } from "@sluice/scheduler/core/legacy.js";
import { Command, InvalidArgumentError, Option } from "commander";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import {
  DEFAULT_LEASE_TTL_SECS,
  DEFAULT_STATE_KEY_PREFIX,
  STATE_FAIL_MODES,
  type StateFailMode,
  type StateOptions,
  stateUrlProblem,
} from "../admission/redis/options.js";
import { type AdaptiveTuning, resolveAdaptiveLimitOptions } from "../capacity/adaptive-limit.js";
import { adaptiveTuningSchema, tuningOptions } from "../config/adaptive-tuning.js";
import { pricingSchema } from "../config/pricing.js";
import { schedulerFileSchema } from "../config/scheduler-file.js";
import { toConfigError } from "../config/zod-errors.js";
import { defaultReplicaId, REPLICA_ID_PATTERN } from "../contracts/replica-id.js";
import type { ClientLimits } from "../gateway/http/client-guard.js";
import {
  type ApiKeySpec,
  CAPACITY_MODES,
  type CapacityOptions,
  type HealthCheckOptions,
  type WorkerPolicy,
  type WorkerSpec,
} from "../gateway/options.js";
import { DEFAULT_LEDGER, DEFAULT_RETENTION_DAYS, parseLedgerTarget } from "../ledger/target.js";
import type { LedgerOptions } from "../ledger/writer.js";
import {
  type BreakerOptions,
  DEFAULT_BREAKER,
  DEFAULT_ROUTING,
  POLICY_NAMES,
  type RoutingOptions,
} from "../routing/options.js";
import { DEFAULT_MAX_RETRIES } from "../routing/retry.js";
import type { LoadSheddingOptions } from "../shedding/load-shedding.js";
import { otlpEndpointProblem } from "../tracing/endpoint.js";

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
export const POLICIES = POLICY_NAMES;

export interface GatewayFlags {
  workerUrls: string[];
  host: string;
  port: number;
  policy: WorkerPolicy;
  priorityScheduler: {
    enabled: boolean;
    defaultMaxClass: PriorityClass;
    configPath: string | undefined;
    tenantMetricTopN: number;
  };
  legacy: Omit<LegacyLimiterOptions, "clock">;
  workers: WorkerSpec[];
  apiKeys: ApiKeySpec[];
  trustedTenantHeader: string | null;
  requireAuth: boolean;
  maxPayloadSize: number;
  requestTimeoutSecs: number;
  /** How long SIGTERM lets requests already received finish (the gateway's close({drainMs})). */
  drainTimeoutSecs: number;
  upstreamConnectTimeoutSecs: number;
  workerApiKey: string | undefined;
  maxCostTokens: number | undefined;
  /** Output tokens a budget reserves for a request without max_tokens and no history (docs/tenants.md). */
  defaultOutputTokens: number | undefined;
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
  clientLimits: ClientLimits;
  health: HealthCheckOptions;
  logLevel: (typeof LOG_LEVELS)[number];
  pricing: Pricing;
  admin: { host: string; port: number; token: string } | undefined;
  /** The usage ledger (default duckdb:sluice-ledger.duckdb in the working directory). */
  ledger: LedgerOptions;
  /** Shared state through Redis (`--state-url`); undefined: state in process. */
  state: StateOptions | undefined;
  /** OpenTelemetry traces to this OTLP/HTTP collector (`--otlp-endpoint`); undefined: off. */
  otlpEndpoint: string | undefined;
  /** The --config file, for reloads. */
  configPath: string | undefined;
}

type Parser = (raw: string) => unknown;

function intArg(min: number, what = `an integer >= ${min}`): Parser {
  return (raw) => {
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`must be ${what}`);
    return n;
  };
}
function numArg(what: string, ok: (n: number) => boolean): Parser {
  return (raw) => {
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(n) || !ok(n)) throw new InvalidArgumentError(`must be ${what}`);
    return n;
  };
}
function choiceArg(choices: readonly string[]): Parser {
  return (raw) => {
    if (!choices.includes(raw)) throw new InvalidArgumentError(`must be one of ${choices.join(", ")}`);
    return raw;
  };
}
const urlArg: Parser = (raw) => {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new InvalidArgumentError(`"${raw}" is not a URL (expected http://host:port)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new InvalidArgumentError(`"${raw}" must be an http:// or https:// URL`);
  }
  return url.origin;
};
const ledgerArg: Parser = (raw) => {
  try {
    parseLedgerTarget(raw);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return raw;
};
// Parsed with the header's lenient rules: an unknown value falls back to default, as in the contract.
const classArg: Parser = (raw) => parsePriority(raw).class;

interface FlagSpec {
  flags: string;
  key: string;
  description: string;
  parse?: Parser;
  default?: unknown;
  variadic?: boolean;
  boolean?: boolean;
}

/** One row per flag; the YAML key is the long name in snake_case. */
export const FLAG_SPECS: FlagSpec[] = [
  {
    flags: "--worker-urls <url...>",
    key: "worker_urls",
    description: "worker base URLs",
    parse: urlArg,
    variadic: true,
  },
  { flags: "--host <host>", key: "host", description: "address to listen on", default: "127.0.0.1" },
  { flags: "--port <port>", key: "port", description: "port to listen on", parse: intArg(0), default: 30000 },
  {
    flags: "--policy <policy>",
    key: "policy",
    description: `worker choice: ${POLICIES.join(" | ")} (docs/routing.md)`,
    parse: choiceArg(POLICIES),
    default: DEFAULT_ROUTING.policy,
  },
  {
    flags: "--session-header <name>",
    key: "session_header",
    description: "session policy: the header whose value is hashed onto a worker",
    parse: (raw) => {
      if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(raw)) throw new InvalidArgumentError("must be a header name");
      return raw.toLowerCase();
    },
    default: DEFAULT_ROUTING.sessionHeader,
  },
  {
    flags: "--cache-threshold <ratio>",
    key: "cache_threshold",
    description: "cache_aware: smallest matched share of the prompt (0..1) that pins a request to a worker",
    parse: numArg("a number from 0 to 1", (n) => n >= 0 && n <= 1),
    default: DEFAULT_ROUTING.cacheThreshold,
  },
  {
    flags: "--balance-abs-threshold <n>",
    key: "balance_abs_threshold",
    description:
      "cache_aware, prefix_hash: a worker more than this many requests above the mean (and past the relative threshold) is overloaded",
    parse: intArg(0),
    default: DEFAULT_ROUTING.balanceAbsThreshold,
  },
  {
    flags: "--balance-rel-threshold <ratio>",
    key: "balance_rel_threshold",
    description:
      "cache_aware, prefix_hash: a worker above this multiple of the mean load (and past the absolute threshold) is overloaded",
    parse: numArg("a number >= 1", (n) => n >= 1),
    default: DEFAULT_ROUTING.balanceRelThreshold,
  },
  {
    flags: "--cache-aware-max-tree-size <chars>",
    key: "cache_aware_max_tree_size",
    description:
      "cache_aware: characters the prefix tree of a pool holds at most (least recently used go first)",
    parse: intArg(1),
    default: DEFAULT_ROUTING.cacheAwareMaxTreeSize,
  },
  {
    flags: "--breaker-failures <n>",
    key: "breaker_failures",
    description: "circuit breaker: consecutive failed requests that open a worker's circuit (0 = rule off)",
    parse: intArg(0),
    default: DEFAULT_BREAKER.failures,
  },
  {
    flags: "--breaker-error-ratio <ratio>",
    key: "breaker_error_ratio",
    description:
      "circuit breaker: failed share of the window's requests that opens the circuit (0 = rule off)",
    parse: numArg("a number from 0 to 1", (n) => n >= 0 && n <= 1),
    default: DEFAULT_BREAKER.errorRatio,
  },
  {
    flags: "--breaker-window-secs <secs>",
    key: "breaker_window_secs",
    description: "circuit breaker: the error ratio's window",
    parse: numArg("a number > 0", (n) => n > 0),
    default: DEFAULT_BREAKER.windowSecs,
  },
  {
    flags: "--breaker-min-requests <n>",
    key: "breaker_min_requests",
    description: "circuit breaker: requests the window must hold before the error ratio counts",
    parse: intArg(1),
    default: DEFAULT_BREAKER.minRequests,
  },
  {
    flags: "--breaker-cooldown-secs <secs>",
    key: "breaker_cooldown_secs",
    description: "circuit breaker: time an open circuit waits before trial requests (half-open)",
    parse: numArg("a number > 0", (n) => n > 0),
    default: DEFAULT_BREAKER.cooldownSecs,
  },
  {
    flags: "--breaker-half-open-requests <n>",
    key: "breaker_half_open_requests",
    description:
      "circuit breaker: trial requests a half-open circuit lets through at once; one success closes it",
    parse: intArg(1),
    default: DEFAULT_BREAKER.halfOpenRequests,
  },
  {
    flags: "--max-retries <n>",
    key: "max_retries",
    description:
      "retries of a request whose worker failed before any byte was sent, each on another worker of its pool (0 = none)",
    parse: intArg(0),
    default: DEFAULT_MAX_RETRIES,
  },
  {
    flags: "--default-model <model>",
    key: "default_model",
    description:
      "the model of a request whose body names none (with several model pools; else such a request gets 400)",
    parse: (raw) => {
      if (raw.trim() === "" || raw.length > 256) throw new InvalidArgumentError("must be a model name");
      return raw;
    },
  },
  {
    flags: "--priority-scheduler-enabled",
    key: "priority_scheduler_enabled",
    description: "enable the priority scheduler (otherwise legacy admission)",
    boolean: true,
    default: false,
  },
  {
    flags: "--priority-scheduler-default-max-class <class>",
    key: "priority_scheduler_default_max_class",
    description: `max class for tenants not in the YAML (${[...PRIORITY_CLASSES].reverse().join(" | ")})`,
    parse: classArg,
    default: "default",
  },
  {
    flags: "--priority-scheduler-config <path>",
    key: "priority_scheduler_config",
    description: "priority-scheduler YAML (classes, tenant_policies)",
  },
  {
    flags: "--priority-scheduler-tenant-metric-top-n <n>",
    key: "priority_scheduler_tenant_metric_top_n",
    description: "tenants that keep their own metric label; the rest share 'other'",
    parse: intArg(0),
    default: 32,
  },
  {
    flags: "--max-concurrent-requests <n>",
    key: "max_concurrent_requests",
    description: "legacy admission: concurrent requests (-1 = unlimited)",
    parse: (raw) => {
      const n = Number(raw);
      if (raw.trim() === "" || !Number.isInteger(n) || (n !== -1 && n < 1)) {
        throw new InvalidArgumentError("must be -1 (unlimited) or an integer >= 1");
      }
      return n;
    },
    default: -1,
  },
  {
    flags: "--queue-size <n>",
    key: "queue_size",
    description: "legacy admission: queue size",
    parse: intArg(0),
    default: 100,
  },
  {
    flags: "--queue-timeout-secs <secs>",
    key: "queue_timeout_secs",
    description: "legacy admission: queue timeout",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 60,
  },
  {
    flags: "--rate-limit-tokens-per-second <n>",
    key: "rate_limit_tokens_per_second",
    description: "legacy admission: request rate (token bucket)",
    parse: numArg("a number > 0", (n) => n > 0),
  },
  {
    flags: "--require-auth",
    key: "require_auth",
    description: "answer 401 to requests without a known API key",
    boolean: true,
    default: false,
  },
  {
    flags: "--max-payload-size <bytes>",
    key: "max_payload_size",
    description: "largest request body accepted (413 past it)",
    parse: intArg(1),
    default: 32 * 1024 * 1024,
  },
  {
    flags: "--request-timeout-secs <secs>",
    key: "request_timeout_secs",
    description: "upstream headers and body timeout",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 1800,
  },
  {
    flags: "--drain-timeout-secs <secs>",
    key: "drain_timeout_secs",
    description:
      "on SIGTERM or SIGINT, how long requests already received may finish before they are cut (0: none)",
    parse: numArg("a number >= 0", (n) => n >= 0),
    default: 25,
  },
  {
    flags: "--upstream-connect-timeout-secs <secs>",
    key: "upstream_connect_timeout_secs",
    description: "time to open a connection to a worker (502 upstream_unavailable past it)",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 10,
  },
  {
    flags: "--worker-api-key <key>",
    key: "worker_api_key",
    description:
      "API key sent to workers as Authorization: Bearer (else SLUICE_WORKER_API_KEY; workers[].api_key wins)",
  },
  {
    flags: "--max-cost-tokens <n>",
    key: "max_cost_tokens",
    description: "ceiling of a request's estimated cost (default: the workers' context length, else 131072)",
    parse: intArg(1),
  },
  {
    flags: "--default-output-tokens <n>",
    key: "default_output_tokens",
    description:
      "output tokens a budgeted request without max_tokens reserves until its tenant or model has a history (default: the model's context)",
    parse: intArg(1),
  },
  {
    flags: "--capacity-mode <mode>",
    key: "capacity_mode",
    description: "static (the workers' reported capacity) | adaptive (follows time per token and TTFT)",
    parse: choiceArg(CAPACITY_MODES),
    default: "static",
  },
  {
    flags: "--adaptive-min-capacity <n>",
    key: "adaptive_min_capacity",
    description: "adaptive mode: lowest capacity the controller may set",
    parse: intArg(1),
    default: 1,
  },
  {
    flags: "--adaptive-max-capacity <n>",
    key: "adaptive_max_capacity",
    description:
      "adaptive mode: highest capacity the controller may set (default: the workers' reported capacity)",
    parse: intArg(1),
  },
  {
    flags: "--tpot-slo-ms <ms>",
    key: "tpot_slo_ms",
    description: "adaptive mode: time per output token ceiling; above it capacity shrinks",
    parse: numArg("a number > 0", (n) => n > 0),
  },
  {
    flags: "--ttft-slo-ms <ms>",
    key: "ttft_slo_ms",
    description: "adaptive mode: time to first token ceiling; above it capacity shrinks",
    parse: numArg("a number > 0", (n) => n > 0),
  },
  {
    flags: "--client-headers-timeout-secs <secs>",
    key: "client_headers_timeout_secs",
    description: "time a client has to send its request headers (408 past it)",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 10,
  },
  {
    flags: "--client-body-idle-timeout-secs <secs>",
    key: "client_body_idle_timeout_secs",
    description: "longest silence while a request body arrives (408 past it)",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 30,
  },
  {
    flags: "--client-body-timeout-secs <secs>",
    key: "client_body_timeout_secs",
    description:
      "time a client has to send its whole request body, from the end of its headers (408 past it)",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 60,
  },
  {
    flags: "--client-keep-alive-timeout-secs <secs>",
    key: "client_keep_alive_timeout_secs",
    description: "idle time before a keep-alive client connection is closed",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 65,
  },
  {
    flags: "--max-client-connections <n>",
    key: "max_client_connections",
    description: "open client connections; past it new ones get 503 too_many_connections",
    parse: intArg(1),
    default: 8192,
  },
  {
    flags: "--health-check-interval-secs <secs>",
    key: "health_check_interval_secs",
    description: "worker health check period",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 10,
  },
  {
    flags: "--health-check-timeout-secs <secs>",
    key: "health_check_timeout_secs",
    description: "worker health check timeout",
    parse: numArg("a number > 0", (n) => n > 0),
    default: 5,
  },
  {
    flags: "--health-failure-threshold <n>",
    key: "health_failure_threshold",
    description: "failed checks before a worker leaves",
    parse: intArg(1),
    default: 3,
  },
  {
    flags: "--health-success-threshold <n>",
    key: "health_success_threshold",
    description: "passed checks before a worker returns",
    parse: intArg(1),
    default: 2,
  },
  {
    flags: "--health-check-endpoint <path>",
    key: "health_check_endpoint",
    description: "worker health path",
    default: "/health",
  },
  {
    flags: "--log-level <level>",
    key: "log_level",
    description: LOG_LEVELS.join(" | "),
    parse: choiceArg(LOG_LEVELS),
    default: "info",
  },
  {
    flags: "--admin-port <port>",
    key: "admin_port",
    description: "admin API port (off unless given); token from --admin-token-file or SLUICE_ADMIN_TOKEN",
    parse: intArg(0),
  },
  {
    flags: "--admin-host <host>",
    key: "admin_host",
    description: "address the admin API listens on",
    default: "127.0.0.1",
  },
  {
    flags: "--admin-token-file <path>",
    key: "admin_token_file",
    description: "file holding the admin API bearer token (else SLUICE_ADMIN_TOKEN)",
  },
  {
    flags: "--ledger <target>",
    key: "ledger",
    description: "usage ledger: duckdb:PATH (embedded) | postgres://USER@HOST:PORT/DB (shared) | off",
    parse: ledgerArg,
    default: DEFAULT_LEDGER,
  },
  {
    flags: "--ledger-retention-days <days>",
    key: "ledger_retention_days",
    description: "ledger rows older than this are deleted (both tables), checked hourly",
    parse: numArg("a number > 0", (n) => n > 0),
    default: DEFAULT_RETENTION_DAYS,
  },
  {
    flags: "--state-url <url>",
    key: "state_url",
    description:
      "shared state for several replicas: redis://[:PASSWORD@]HOST:PORT/DB or rediss:// (docs/replicas.md); without it state stays in process",
    parse: (raw) => {
      const problem = stateUrlProblem(raw);
      if (problem !== undefined) throw new InvalidArgumentError(problem);
      return raw;
    },
  },
  {
    flags: "--otlp-endpoint <url>",
    key: "otlp_endpoint",
    description:
      "OpenTelemetry traces over OTLP/HTTP to <url>/v1/traces, e.g. http://collector:4318 (docs/tracing.md); without it tracing is off",
    parse: (raw) => {
      const problem = otlpEndpointProblem(raw);
      if (problem !== undefined) throw new InvalidArgumentError(problem);
      return raw;
    },
  },
  {
    flags: "--state-key-prefix <prefix>",
    key: "state_key_prefix",
    description: "prefix of every shared-state key (one hash tag, so Redis Cluster works)",
    parse: (raw) => {
      if (raw === "" || /\s/.test(raw))
        throw new InvalidArgumentError("must be a non-empty prefix without spaces");
      return raw;
    },
    default: DEFAULT_STATE_KEY_PREFIX,
  },
  {
    flags: "--replica-id <id>",
    key: "replica_id",
    description: "this replica's name in the shared state (default: hostname-pid)",
    parse: (raw) => {
      if (!REPLICA_ID_PATTERN.test(raw)) {
        throw new InvalidArgumentError("must be 1 to 128 letters, digits or . _ : @ -");
      }
      return raw;
    },
  },
  {
    flags: "--state-fail-mode <mode>",
    key: "state_fail_mode",
    description:
      "when Redis is unreachable: local (admit on capacity / N replicas, local budgets) | closed (503 scheduler_unavailable)",
    parse: choiceArg(STATE_FAIL_MODES),
    default: "local",
  },
  {
    flags: "--lease-ttl-secs <secs>",
    key: "lease_ttl_secs",
    description:
      "shared state: a dead replica's slots come back within this time (renewed while requests run)",
    parse: numArg("a number > 0", (n) => n > 0),
    default: DEFAULT_LEASE_TTL_SECS,
  },
  {
    flags: "--config <path>",
    key: "config",
    description:
      "gateway YAML: any flag by its snake_case name, plus workers, api_keys, trusted_tenant_header",
  },
];

const NON_FLAG_KEYS = new Set([
  "workers",
  "api_keys",
  "trusted_tenant_header",
  "pricing",
  "load_shedding",
  "keyed_shedding",
  "adaptive_tuning",
  "pools",
]);

const sheddableClass = z.enum(["bulk", "default", "interactive"], {
  error: () => "must be bulk, default or interactive (system is never shed)",
});
const positive = () => z.number({ error: "must be a number" }).gt(0, "must be > 0");
const loadSheddingSchema = z.strictObject({
  max_queue_wait_ms: positive().optional(),
  usage_half_life_secs: positive().optional(),
  codel_classes: z.array(sheddableClass).optional(),
  codel_target_ms: positive().optional(),
  codel_interval_ms: positive().optional(),
});
const keyedSheddingSchema = z.strictObject({
  header: z.string().min(1, "must be a header name").optional(),
  classes: z.array(sheddableClass).optional(),
  target_delay_ms: positive().optional(),
  rotation_window_secs: positive().optional(),
  decrease_fraction: positive().lt(1, "must be < 1").optional(),
  increase_step: positive().max(100, "must be <= 100").optional(),
  min_percent: z
    .number({ error: "must be a number" })
    .min(0, "must be >= 0")
    .max(100, "must be <= 100")
    .optional(),
});

const workersSchema = z.array(
  z.strictObject({
    url: z.string(),
    capacity: z.number().int("must be an integer").min(1, "must be >= 1").optional(),
    api_key: z.string().min(1, "must be a non-empty string").optional(),
    models: z
      .array(z.string().min(1, "must be a model name").max(256, "must be at most 256 characters"), {
        error: "must be a list of model names",
      })
      .min(1, "must name at least one model (leave it out to use what the worker reports)")
      .optional(),
  }),
);
// Per-pool overrides of the priority YAML's classes, keyed by any model of the pool.
const poolsSchema = z.record(
  z.string().min(1, "must be a model name"),
  z.strictObject({
    classes: schedulerFileSchema.shape.classes,
  }),
  { error: "must be a mapping of model name to {classes: ...}" },
);
const apiKeysSchema = z.array(z.strictObject({ sha256: z.string(), tenant: z.string() }));

function camel(key: string): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

export function buildCommand(): Command {
  const cmd = new Command("sluice")
    .description("Priority-aware admission control gateway for LLM inference workers")
    .allowExcessArguments(false)
    .showHelpAfterError("(run sluice --help for the flags)");
  for (const spec of FLAG_SPECS) {
    const opt = new Option(spec.flags, spec.description);
    if (spec.parse) {
      const parse = spec.parse;
      opt.argParser(
        spec.variadic ? (raw: string, prev: unknown) => [...((prev as unknown[]) ?? []), parse(raw)] : parse,
      );
    }
    if (spec.default !== undefined) opt.default(spec.default);
    cmd.addOption(opt);
  }
  return cmd;
}

/** Reads and checks the --config file; errors name the key. */
export function loadConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(
      "--config",
      `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(path, `invalid YAML: ${(err as Error).message.split("\n")[0]}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc)) throw new ConfigError(path, "must be a YAML mapping");
  const known = new Set(FLAG_SPECS.map((s) => s.key));
  for (const key of Object.keys(doc)) {
    if (key === "config")
      throw new ConfigError(`${path}: config`, "a config file cannot name another config file");
    if (!known.has(key) && !NON_FLAG_KEYS.has(key)) throw new ConfigError(`${path}: ${key}`, "unknown key");
  }
  return doc as Record<string, unknown>;
}

/** Converts a YAML value to the flag's type with the flag's own parser (so rules cannot drift). */
function fromYaml(spec: FlagSpec, value: unknown, path: string): unknown {
  const where = `${path}: ${spec.key}`;
  if (spec.boolean) {
    if (typeof value !== "boolean") throw new ConfigError(where, "must be true or false");
    return value;
  }
  const one = (v: unknown) => {
    if (typeof v !== "string" && typeof v !== "number")
      throw new ConfigError(where, "must be a string or a number");
    if (!spec.parse) return String(v);
    try {
      return spec.parse(String(v));
    } catch (err) {
      throw new ConfigError(where, (err as Error).message);
    }
  };
  if (spec.variadic) {
    const list = Array.isArray(value) ? value : [value];
    return list.map(one);
  }
  return one(value);
}

/** Parses argv (without node and script) into validated gateway settings. */
export function parseGatewayArgs(argv: string[]): GatewayFlags {
  const cmd = buildCommand();
  cmd.exitOverride();
  cmd.configureOutput({ writeErr: () => {}, writeOut: (s) => process.stdout.write(s) });
  cmd.parse(argv, { from: "user" });
  const cli = cmd.opts() as Record<string, unknown>;
  const configPath = cli.config as string | undefined;
  const file = configPath ? loadConfigFile(configPath) : {};

  const values: Record<string, unknown> = {};
  for (const spec of FLAG_SPECS) {
    const name = camel(spec.key);
    const source = cmd.getOptionValueSource(name);
    if (source === "cli" || !(spec.key in file)) values[spec.key] = cli[name];
    else values[spec.key] = fromYaml(spec, file[spec.key], configPath!);
  }

  const workerUrls = (values.worker_urls as string[] | undefined) ?? [];
  let workers: WorkerSpec[] = workerUrls.map((url) => ({ url }));
  if (file.workers !== undefined) {
    const parsed = workersSchema.safeParse(file.workers);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new ConfigError(`${configPath}: workers.${issue.path.join(".")}`, issue.message);
    }
    const byUrl = new Map(workers.map((w) => [w.url, w]));
    parsed.data.forEach((w, i) => {
      let origin: string;
      try {
        origin = urlArg(w.url) as string;
      } catch (err) {
        throw new ConfigError(`${configPath}: workers.${i}.url`, (err as Error).message);
      }
      const existing = byUrl.get(origin);
      if (existing) {
        existing.capacity = w.capacity;
        if (w.api_key !== undefined) existing.apiKey = w.api_key;
        if (w.models !== undefined) existing.models = w.models;
      } else {
        const spec: WorkerSpec = { url: origin, capacity: w.capacity };
        if (w.api_key !== undefined) spec.apiKey = w.api_key;
        if (w.models !== undefined) spec.models = w.models;
        workers.push(spec);
        byUrl.set(origin, spec);
      }
    });
  }
  workers = workers.filter((w, i) => workers.findIndex((x) => x.url === w.url) === i);
  if (workers.length === 0) throw new ConfigError("--worker-urls", "at least one worker URL is required");

  const { apiKeys, pricing } = reloadableParts(file, configPath);
  const trusted = file.trusted_tenant_header;
  if (trusted !== undefined && trusted !== null && (typeof trusted !== "string" || trusted.trim() === "")) {
    throw new ConfigError(`${configPath}: trusted_tenant_header`, "must be a header name or null");
  }

  return {
    workerUrls: workers.map((w) => w.url),
    host: values.host as string,
    port: values.port as number,
    policy: values.policy as WorkerPolicy,
    priorityScheduler: {
      enabled: values.priority_scheduler_enabled as boolean,
      defaultMaxClass: values.priority_scheduler_default_max_class as PriorityClass,
      configPath: values.priority_scheduler_config as string | undefined,
      tenantMetricTopN: values.priority_scheduler_tenant_metric_top_n as number,
    },
    legacy: {
      maxConcurrentRequests: values.max_concurrent_requests as number,
      queueSize: values.queue_size as number,
      queueTimeoutSecs: values.queue_timeout_secs as number,
      rateLimitTokensPerSecond: values.rate_limit_tokens_per_second as number | undefined,
    },
    workers,
    apiKeys,
    trustedTenantHeader: (trusted as string | null | undefined) ?? null,
    requireAuth: values.require_auth as boolean,
    maxPayloadSize: values.max_payload_size as number,
    requestTimeoutSecs: values.request_timeout_secs as number,
    drainTimeoutSecs: values.drain_timeout_secs as number,
    upstreamConnectTimeoutSecs: values.upstream_connect_timeout_secs as number,
    workerApiKey:
      (values.worker_api_key as string | undefined) ?? (process.env.SLUICE_WORKER_API_KEY || undefined),
    maxCostTokens: values.max_cost_tokens as number | undefined,
    defaultOutputTokens: values.default_output_tokens as number | undefined,
    capacity: capacitySettings(values, file, configPath),
    shedding: sheddingSettings(file, configPath),
    routing: {
      sessionHeader: values.session_header as string,
      cacheThreshold: values.cache_threshold as number,
      balanceAbsThreshold: values.balance_abs_threshold as number,
      balanceRelThreshold: values.balance_rel_threshold as number,
      cacheAwareMaxTreeSize: values.cache_aware_max_tree_size as number,
    },
    breaker: {
      failures: values.breaker_failures as number,
      errorRatio: values.breaker_error_ratio as number,
      windowSecs: values.breaker_window_secs as number,
      minRequests: values.breaker_min_requests as number,
      cooldownSecs: values.breaker_cooldown_secs as number,
      halfOpenRequests: values.breaker_half_open_requests as number,
    },
    maxRetries: values.max_retries as number,
    defaultModel: values.default_model as string | undefined,
    pools: poolSettings(file, configPath),
    clientLimits: {
      headersTimeoutSecs: values.client_headers_timeout_secs as number,
      bodyIdleTimeoutSecs: values.client_body_idle_timeout_secs as number,
      bodyTimeoutSecs: values.client_body_timeout_secs as number,
      keepAliveTimeoutSecs: values.client_keep_alive_timeout_secs as number,
      maxConnections: values.max_client_connections as number,
    },
    health: {
      intervalSecs: values.health_check_interval_secs as number,
      timeoutSecs: values.health_check_timeout_secs as number,
      failureThreshold: values.health_failure_threshold as number,
      successThreshold: values.health_success_threshold as number,
      endpoint: values.health_check_endpoint as string,
    },
    logLevel: values.log_level as GatewayFlags["logLevel"],
    pricing,
    admin: adminSettings(values),
    ledger: {
      target: parseLedgerTarget(values.ledger as string),
      retentionDays: values.ledger_retention_days as number,
      replica: values.replica_id as string | undefined,
    },
    state:
      values.state_url === undefined
        ? undefined
        : {
            url: values.state_url as string,
            keyPrefix: values.state_key_prefix as string,
            replicaId: (values.replica_id as string | undefined) ?? defaultReplicaId(),
            failMode: values.state_fail_mode as StateFailMode,
            leaseTtlSecs: values.lease_ttl_secs as number,
          },
    otlpEndpoint: values.otlp_endpoint as string | undefined,
    configPath,
  };
}

/** The `pools` block of the --config file: per-pool class overrides; errors name the key. */
function poolSettings(
  file: Record<string, unknown>,
  configPath: string | undefined,
): Record<string, ClassOverrides> {
  const value = file.pools;
  if (value === undefined || value === null) return {};
  const parsed = poolsSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const at = issue.path.length > 0 ? `pools.${issue.path.join(".")}` : "pools";
    throw new ConfigError(`${configPath}: ${at}`, issue.message);
  }
  const out: Record<string, ClassOverrides> = {};
  for (const [model, block] of Object.entries(parsed.data))
    out[model] = (block.classes ?? {}) as ClassOverrides;
  return out;
}

/** The `load_shedding` and `keyed_shedding` blocks of the --config file; errors name the key. */
function sheddingSettings(
  file: Record<string, unknown>,
  configPath: string | undefined,
): LoadSheddingOptions {
  const parse = <T>(key: string, schema: z.ZodType<T>): T | undefined => {
    const value = file[key];
    if (value === undefined || value === null) return undefined;
    const parsed = schema.safeParse(value);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const at = issue.path.length > 0 ? `${key}.${issue.path.join(".")}` : key;
      throw new ConfigError(`${configPath}: ${at}`, issue.message);
    }
    return parsed.data;
  };
  const shedding: LoadSheddingOptions = {};
  // `load_shedding: false` turns off what adaptive mode would otherwise shed by default.
  const p = file.load_shedding === false ? false : parse("load_shedding", loadSheddingSchema);
  if (p === false) shedding.prioritized = false;
  else if (p !== undefined) {
    shedding.prioritized = {
      maxQueueWaitMs: p.max_queue_wait_ms,
      usageHalfLifeMs: p.usage_half_life_secs === undefined ? undefined : p.usage_half_life_secs * 1000,
      codelClasses: p.codel_classes,
      codelTargetMs: p.codel_target_ms,
      codelIntervalMs: p.codel_interval_ms,
    };
  }
  const k = parse("keyed_shedding", keyedSheddingSchema);
  if (k !== undefined) {
    shedding.keyed = {
      header: k.header,
      classes: k.classes,
      targetDelayMs: k.target_delay_ms,
      rotationWindowMs: k.rotation_window_secs === undefined ? undefined : k.rotation_window_secs * 1000,
      decreaseFraction: k.decrease_fraction,
      increaseStep: k.increase_step,
      minPercent: k.min_percent,
    };
  }
  return shedding;
}

function capacitySettings(
  values: Record<string, unknown>,
  file: Record<string, unknown>,
  configPath: string | undefined,
): CapacityOptions {
  const settings: CapacityOptions = {
    mode: values.capacity_mode as CapacityOptions["mode"],
    minCapacity: values.adaptive_min_capacity as number,
    maxCapacity: values.adaptive_max_capacity as number | undefined,
    tpotSloMs: values.tpot_slo_ms as number | undefined,
    ttftSloMs: values.ttft_slo_ms as number | undefined,
    tuning: adaptiveTuning(file, configPath),
  };
  if (settings.maxCapacity !== undefined && settings.minCapacity! > settings.maxCapacity) {
    throw new ConfigError(
      "--adaptive-min-capacity",
      `must be <= --adaptive-max-capacity (adaptive_min_capacity ${settings.minCapacity} > adaptive_max_capacity ${settings.maxCapacity})`,
    );
  }
  return settings;
}

/**
 * The --config file's `adaptive_tuning` block (src/config/adaptive-tuning.ts), each value checked
 * here by the controller's own rules so a bad one stops startup, not the first worker's discovery.
 */
function adaptiveTuning(
  file: Record<string, unknown>,
  configPath: string | undefined,
): Partial<AdaptiveTuning> {
  const block = file.adaptive_tuning;
  if (block === undefined || block === null) return {};
  const where = `${configPath}: adaptive_tuning`;
  const parsed = adaptiveTuningSchema.safeParse(block);
  if (!parsed.success) throw toConfigError(parsed.error, where);
  const tuning = tuningOptions(parsed.data);
  try {
    resolveAdaptiveLimitOptions({ ...tuning, minCapacity: 1, maxCapacity: 1, initialCapacity: 1 });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    throw new ConfigError(`${where}.${err.path}`, err.reason);
  }
  return tuning;
}

function adminSettings(values: Record<string, unknown>): GatewayFlags["admin"] {
  const port = values.admin_port as number | undefined;
  if (port === undefined) return undefined;
  const tokenFile = values.admin_token_file as string | undefined;
  let token: string | undefined;
  if (tokenFile !== undefined) {
    try {
      token = readFileSync(tokenFile, "utf8").trim();
    } catch (err) {
      throw new ConfigError(
        "--admin-token-file",
        `cannot read ${tokenFile}: ${(err as NodeJS.ErrnoException).code}`,
      );
    }
  } else token = process.env.SLUICE_ADMIN_TOKEN?.trim();
  if (!token) {
    throw new ConfigError(
      "--admin-token-file",
      "the admin API needs a token: --admin-token-file or SLUICE_ADMIN_TOKEN",
    );
  }
  return { host: values.admin_host as string, port, token };
}

/** The parts of the --config file a reload re-reads: api_keys and pricing. */
function reloadableParts(
  file: Record<string, unknown>,
  configPath: string | undefined,
): { apiKeys: ApiKeySpec[]; pricing: Pricing } {
  let apiKeys: ApiKeySpec[] = [];
  if (file.api_keys !== undefined) {
    const parsed = apiKeysSchema.safeParse(file.api_keys);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new ConfigError(`${configPath}: api_keys.${issue.path.join(".")}`, issue.message);
    }
    apiKeys = parsed.data;
  }
  let pricing: Pricing = {};
  if (file.pricing !== undefined && file.pricing !== null) {
    const parsed = pricingSchema.safeParse(file.pricing);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new ConfigError(`${configPath}: pricing.${issue.path.join(".")}`, issue.message);
    }
    pricing = parsed.data;
  }
  return { apiKeys, pricing };
}

/** Re-reads api_keys and pricing from the --config file (for reload). */
export function reloadGatewayFile(configPath: string): { apiKeys: ApiKeySpec[]; pricing: Pricing } {
  return reloadableParts(loadConfigFile(configPath), configPath);
}
