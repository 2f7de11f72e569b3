/**
 * The gateway's option table: one row per option of the `sluice` command. A row's key is its YAML
 * key in the `--config` file; the flag (`--` and the key in kebab-case) and the environment
 * variable (`SLUICE_` and the key in upper case) follow from it, so the three names cannot drift.
 * A row also gives the value's parser, its default, its `--help` line and its line in the docs
 * table (docs/gateway.md "Flags", generated from these rows by src/config/flags-doc-table.ts).
 */

import { PRIORITY_CLASSES } from "@sluice/scheduler/core/class.js";
import { InvalidArgumentError } from "commander";
import {
  DEFAULT_LEASE_TTL_SECS,
  DEFAULT_STATE_KEY_PREFIX,
  STATE_FAIL_MODES,
  stateUrlProblem,
} from "../admission/redis/options.js";
import { DEFAULT_ENGINE_SIGNALS, ENGINE_CHOICES } from "../capacity/engine-signals/engine-kind.js";
import {
  CAPACITY_UNITS,
  DEFAULT_KV_TARGET_UTILIZATION,
  validTargetUtilization,
} from "../capacity/kv-budget.js";
import { REPLICA_ID_PATTERN } from "../contracts/replica-id.js";
import { DEFAULT_LEDGER, DEFAULT_RETENTION_DAYS } from "../ledger/target.js";
import { DEFAULT_BREAKER, DEFAULT_ROUTING, POLICY_NAMES } from "../routing/options.js";
import { DEFAULT_MAX_RETRIES } from "../routing/retry.js";
import { otlpEndpointProblem } from "../tracing/endpoint.js";
import { CAPACITY_MODES, LOG_LEVELS } from "./gateway-settings.js";
import {
  checkedArg,
  choiceArg,
  classArg,
  intArg,
  ledgerArg,
  numArg,
  type Parser,
  positiveNumArg,
  ratioArg,
  textArg,
  urlArg,
} from "./option-parsers.js";

export interface OptionRow<T> {
  /** `value`: one argument; `list`: one or more (a list in YAML, separated by commas or spaces in the environment); `switch`: no argument. */
  readonly kind: "value" | "list" | "switch";
  /** The argument's name in `--help` (`<port>`); absent for a switch. */
  readonly arg: string | undefined;
  /** One argument (for a list, one item) to its value; throws InvalidArgumentError saying what it must be. */
  readonly parse: Parser<unknown>;
  readonly default: T;
  /** The `--help` line. */
  readonly help: string;
  /** The docs table's line. */
  readonly doc: string;
  /** The docs table's default where the value alone would not say it (a computed default). */
  readonly docDefault: string | undefined;
  /** False for `--config` itself: a config file cannot name another. */
  readonly inFile: boolean;
}

interface RowText {
  help: string;
  doc: string;
  docDefault?: string;
}

function value<T>(row: RowText & { arg: string; parse: Parser<T>; default: NoInfer<T> }): OptionRow<T>;
function value<T>(row: RowText & { arg: string; parse: Parser<T> }): OptionRow<T | undefined>;
function value<T>(row: RowText & { arg: string; parse: Parser<T>; default?: T }): OptionRow<T | undefined> {
  return {
    kind: "value",
    arg: row.arg,
    parse: row.parse,
    default: row.default,
    help: row.help,
    doc: row.doc,
    docDefault: row.docDefault,
    inFile: true,
  };
}

function list<T>(row: RowText & { arg: string; parse: Parser<T> }): OptionRow<T[] | undefined> {
  return {
    kind: "list",
    arg: row.arg,
    parse: row.parse,
    default: undefined,
    help: row.help,
    doc: row.doc,
    docDefault: row.docDefault,
    inFile: true,
  };
}

function toggle(row: RowText): OptionRow<boolean> {
  return {
    kind: "switch",
    arg: undefined,
    parse: textArg,
    default: false,
    help: row.help,
    doc: row.doc,
    docDefault: row.docDefault,
    inFile: true,
  };
}

/** A switch that is on unless turned off: `--no-<flag>` beside `--<flag>`, `false` in YAML or the environment. */
function toggleOn(row: RowText): OptionRow<boolean> {
  return { ...toggle(row), default: true };
}

export const GATEWAY_OPTIONS = {
  worker_urls: list({
    arg: "<url...>",
    parse: urlArg,
    help: "worker base URLs",
    doc: "worker base URLs",
    docDefault: "(required, or `worker_urls`/`workers` in `--config`)",
  }),
  host: value({
    arg: "<host>",
    parse: textArg,
    default: "127.0.0.1",
    help: "address to listen on",
    doc: "listen address",
  }),
  port: value({
    arg: "<port>",
    parse: intArg(0),
    default: 30000,
    help: "port to listen on",
    doc: "listen port",
  }),
  policy: value({
    arg: "<policy>",
    parse: choiceArg(POLICY_NAMES),
    default: DEFAULT_ROUTING.policy,
    help: `worker choice: ${POLICY_NAMES.join(" | ")} (docs/routing.md)`,
    doc: "worker choice inside the request's pool: `cache_aware` (where the prompt's prefix is cached, unless overloaded), `prefix_hash`, `session`, `power_of_two` (less loaded of two random workers), `round_robin`, `random`, `least_tokens` (fewest prompt + predicted output tokens outstanding) (docs/routing.md)",
  }),
  session_header: value({
    arg: "<name>",
    parse: (raw) => {
      if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(raw)) throw new InvalidArgumentError("must be a header name");
      return raw.toLowerCase();
    },
    default: DEFAULT_ROUTING.sessionHeader,
    help: "session policy: the header whose value is hashed onto a worker",
    doc: "`session`: the header hashed onto a worker",
  }),
  cache_threshold: value({
    arg: "<ratio>",
    parse: ratioArg,
    default: DEFAULT_ROUTING.cacheThreshold,
    help: "cache_aware: smallest matched share of the prompt (0..1) that pins a request to a worker",
    doc: "`cache_aware`: smallest matched share of the prompt that sends it to a worker holding its prefix",
  }),
  balance_abs_threshold: value({
    arg: "<n>",
    parse: intArg(0),
    default: DEFAULT_ROUTING.balanceAbsThreshold,
    help: "cache_aware, prefix_hash: a worker more than this many requests above the mean (and past the relative threshold) is overloaded",
    doc: "`cache_aware`, `prefix_hash`: overloaded = more than this many requests above the mean...",
  }),
  balance_rel_threshold: value({
    arg: "<ratio>",
    parse: numArg("a number >= 1", (n) => n >= 1),
    default: DEFAULT_ROUTING.balanceRelThreshold,
    help: "cache_aware, prefix_hash: a worker above this multiple of the mean load (and past the absolute threshold) is overloaded",
    doc: "...and more than this multiple of the mean",
  }),
  cache_aware_max_tree_size: value({
    arg: "<chars>",
    parse: intArg(1),
    default: DEFAULT_ROUTING.cacheAwareMaxTreeSize,
    help: "cache_aware: characters the prefix tree of a pool holds at most (least recently used go first)",
    doc: "`cache_aware`: characters one pool's prefix tree holds at most (least recently used go first)",
  }),
  breaker_failures: value({
    arg: "<n>",
    parse: intArg(0),
    default: DEFAULT_BREAKER.failures,
    help: "circuit breaker: consecutive failed requests that open a worker's circuit (0 = rule off)",
    doc: "circuit breaker: consecutive failed requests that open a worker's circuit (0: off)",
  }),
  breaker_error_ratio: value({
    arg: "<ratio>",
    parse: ratioArg,
    default: DEFAULT_BREAKER.errorRatio,
    help: "circuit breaker: failed share of the window's requests that opens the circuit (0 = rule off)",
    doc: "circuit breaker: failed share of the window's requests that opens it (0: off)",
  }),
  breaker_window_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: DEFAULT_BREAKER.windowSecs,
    help: "circuit breaker: the error ratio's window",
    doc: "circuit breaker: the error ratio's window",
  }),
  breaker_min_requests: value({
    arg: "<n>",
    parse: intArg(1),
    default: DEFAULT_BREAKER.minRequests,
    help: "circuit breaker: requests the window must hold before the error ratio counts",
    doc: "circuit breaker: requests the window must hold before the ratio counts",
  }),
  breaker_cooldown_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: DEFAULT_BREAKER.cooldownSecs,
    help: "circuit breaker: time an open circuit waits before trial requests (half-open)",
    doc: "circuit breaker: time open before trial requests (half-open)",
  }),
  breaker_half_open_requests: value({
    arg: "<n>",
    parse: intArg(1),
    default: DEFAULT_BREAKER.halfOpenRequests,
    help: "circuit breaker: trial requests a half-open circuit lets through at once; one success closes it",
    doc: "circuit breaker: trial requests in flight at once while half-open; one success closes it",
  }),
  max_retries: value({
    arg: "<n>",
    parse: intArg(0),
    default: DEFAULT_MAX_RETRIES,
    help: "retries of a request whose worker failed before any byte was sent, each on another worker of its pool (0 = none)",
    doc: 'retries of a request whose worker refused, reset or answered 502/503 before any byte reached the client, each on an untried worker of its pool, inside `--request-timeout-secs` (0: none; docs/routing.md "Retries")',
  }),
  default_model: value({
    arg: "<model>",
    parse: checkedArg((raw) => (raw.trim() === "" || raw.length > 256 ? "must be a model name" : undefined)),
    help: "the model of a request whose body names none (with several model pools; else such a request gets 400)",
    doc: 'the model of a request whose body names none; without it, such a request goes to the only pool, and gets 400 (`param: "model"`) when there are several',
  }),
  priority_scheduler_enabled: toggle({
    help: "enable the priority scheduler (otherwise legacy admission)",
    doc: "master switch; off = legacy admission",
  }),
  priority_scheduler_strict: toggle({
    help: "make a priority-scheduler fallback to legacy admission a startup error (exit 2)",
    doc: 'a bad or missing scheduler YAML, or reservations that do not fit the fleet, stop the start (exit 2) instead of falling back to legacy admission ("Priority scheduler fallback")',
  }),
  priority_scheduler_default_max_class: value({
    arg: "<class>",
    parse: classArg,
    default: "default",
    help: `max class for tenants not in the YAML (${[...PRIORITY_CLASSES].reverse().join(" | ")})`,
    doc: "ceiling for tenants not in the YAML; parsed like the header (unknown -> `default`)",
  }),
  priority_scheduler_config: value({
    arg: "<path>",
    parse: textArg,
    help: "priority-scheduler YAML (classes, tenant_policies)",
    doc: "the scheduler YAML (`classes`, `tenant_policies`)",
  }),
  priority_scheduler_tenant_metric_top_n: value({
    arg: "<n>",
    parse: intArg(0),
    default: 32,
    help: "tenants that keep their own metric label; the rest share 'other'",
    doc: "tenants that keep their own metric label (enforced; the rest are `other`)",
  }),
  max_concurrent_requests: value({
    arg: "<n>",
    parse: (raw) => {
      const n = Number(raw);
      if (raw.trim() === "" || !Number.isInteger(n) || (n !== -1 && n < 1)) {
        throw new InvalidArgumentError("must be -1 (unlimited) or an integer >= 1");
      }
      return n;
    },
    default: -1,
    help: "legacy admission: concurrent requests (-1 = unlimited)",
    doc: "legacy: concurrency limit (-1 unlimited); also the capacity a model pool's startup check uses while none of its workers is healthy (1024 if -1)",
  }),
  queue_size: value({
    arg: "<n>",
    parse: intArg(0),
    default: 100,
    help: "legacy admission: queue size",
    doc: "legacy: waiters beyond the limit",
  }),
  queue_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 60,
    help: "legacy admission: queue timeout",
    doc: "legacy: queue timeout",
  }),
  rate_limit_tokens_per_second: value({
    arg: "<n>",
    parse: positiveNumArg,
    help: "legacy admission: request rate (token bucket)",
    doc: "legacy: request-rate token bucket",
  }),
  require_auth: toggle({
    help: "answer 401 to requests without a known API key",
    doc: "401 for requests without a known API key",
  }),
  max_payload_size: value({
    arg: "<bytes>",
    parse: intArg(1),
    default: 32 * 1024 * 1024,
    help: "largest request body accepted (413 past it)",
    doc: "request body limit in bytes (413 past it)",
  }),
  request_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 1800,
    help: "upstream headers and body timeout",
    doc: "upstream timeout: for the response headers, and for each silence in the response body (504 `upstream_timeout` before the first byte; the stream is cut after it)",
  }),
  drain_timeout_secs: value({
    arg: "<secs>",
    parse: numArg("a number >= 0", (n) => n >= 0),
    default: 25,
    help: "on SIGTERM or SIGINT, how long requests already received may finish before they are cut (0: none)",
    doc: "on SIGTERM or SIGINT: stop accepting connections, answer `/readiness` with 503 `draining`, and let the requests already received (running or queued) finish for at most this long; then cut the rest and flush the ledger. A second signal cuts at once. Keep it below the orchestrator's grace period (Kubernetes: 30 s)",
  }),
  upstream_connect_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 10,
    help: "time to open a connection to a worker (502 upstream_unavailable past it)",
    doc: "time to open a connection to a worker (502 `upstream_unavailable` past it)",
  }),
  worker_api_key: value({
    arg: "<key>",
    parse: textArg,
    help: "API key sent to workers as Authorization: Bearer (else SLUICE_WORKER_API_KEY; workers[].api_key wins)",
    doc: "sent to workers as `Authorization: Bearer KEY`; `workers[].api_key` in `--config` wins per worker",
  }),
  max_cost_tokens: value({
    arg: "<n>",
    parse: intArg(1),
    help: "ceiling of a request's estimated cost (default: the workers' context length, else 131072)",
    doc: "ceiling of one request's estimated cost in tokens (fair share and budgets)",
    docDefault: "the largest context a worker reports, else 131072",
  }),
  default_output_tokens: value({
    arg: "<n>",
    parse: intArg(1),
    help: "output tokens a budgeted request without max_tokens reserves until its tenant or model has a history (default: the model's context)",
    doc: 'output tokens a budgeted request without `max_tokens` holds until its tenant or model has a recent history of output lengths (then their p95); docs/tenants.md, "Token accounting"',
    docDefault: "unset (the model's context)",
  }),
  capacity_mode: value({
    arg: "<mode>",
    parse: choiceArg(CAPACITY_MODES),
    default: "static",
    help: "static (the workers' reported capacity) | adaptive (follows time per token and TTFT)",
    doc: "`static`: capacity from the workers' reports; `adaptive`: a controller following time per token and TTFT (docs/adaptive.md)",
  }),
  adaptive_min_capacity: value({
    arg: "<n>",
    parse: intArg(1),
    default: 1,
    help: "adaptive mode: lowest capacity the controller may set",
    doc: "adaptive: lowest capacity",
  }),
  adaptive_max_capacity: value({
    arg: "<n>",
    parse: intArg(1),
    help: "adaptive mode: highest capacity the controller may set (default: the workers' reported capacity)",
    doc: "adaptive: highest capacity",
    docDefault: "unset (the discovered capacity bounds it)",
  }),
  tpot_slo_ms: value({
    arg: "<ms>",
    parse: positiveNumArg,
    help: "adaptive mode: time per output token ceiling; above it capacity shrinks",
    doc: "adaptive: time-per-output-token ceiling; above it capacity shrinks and the baseline freezes",
  }),
  ttft_slo_ms: value({
    arg: "<ms>",
    parse: positiveNumArg,
    help: "adaptive mode: time to first token ceiling; above it capacity shrinks",
    doc: "adaptive: time-to-first-token ceiling, same rule",
  }),
  client_headers_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 10,
    help: "time a client has to send its request headers (408 past it)",
    doc: "time a client has to send the request line and headers (408 `request_header_timeout`)",
  }),
  client_body_idle_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 30,
    help: "longest silence while a request body arrives (408 past it)",
    doc: "longest silence while a request body arrives (408 `request_body_timeout`)",
  }),
  client_body_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 60,
    help: "time a client has to send its whole request body, from the end of its headers (408 past it)",
    doc: "time a client has to send its whole request body, from the end of its headers, however steadily it trickles (408 `request_body_too_slow`, then closed); raise it for large uploads over slow links",
  }),
  client_keep_alive_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 65,
    help: "idle time before a keep-alive client connection is closed",
    doc: "idle time before a keep-alive client connection is closed (above common load balancers' 60 s)",
  }),
  max_client_connections: value({
    arg: "<n>",
    parse: intArg(1),
    default: 8192,
    help: "open client connections; past it new ones get 503 too_many_connections",
    doc: "open client connections; past it a new one gets 503 `too_many_connections` and is closed",
  }),
  health_check_interval_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 10,
    help: "worker health check period",
    doc: "worker health period",
  }),
  health_check_timeout_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: 5,
    help: "worker health check timeout",
    doc: "one probe's timeout",
  }),
  health_failure_threshold: value({
    arg: "<n>",
    parse: intArg(1),
    default: 3,
    help: "failed checks before a worker leaves",
    doc: "failed probes before a worker leaves the pool",
  }),
  health_success_threshold: value({
    arg: "<n>",
    parse: intArg(1),
    default: 2,
    help: "passed checks before a worker returns",
    doc: "passed probes before a worker that failed returns (a worker that never passed one joins at its first)",
  }),
  health_check_endpoint: value({
    arg: "<path>",
    parse: textArg,
    default: "/health",
    help: "worker health path",
    doc: "probe path",
  }),
  log_level: value({
    arg: "<level>",
    parse: choiceArg(LOG_LEVELS),
    default: "info",
    help: LOG_LEVELS.join(" | "),
    doc: "`trace` … `fatal`, `silent` (JSON lines on stdout, pino)",
  }),
  admin_port: value({
    arg: "<port>",
    parse: intArg(0),
    help: "admin API port (off unless given); token from --admin-token-file or SLUICE_ADMIN_TOKEN",
    doc: 'the admin listener\'s port (tenants, reload, the dashboard: "The admin listener and the dashboard" below, docs/dashboard.md); without it there is no admin API. It needs a token: `--admin-token-file`, else `SLUICE_ADMIN_TOKEN`',
    docDefault: "unset (off)",
  }),
  admin_host: value({
    arg: "<host>",
    parse: textArg,
    default: "127.0.0.1",
    help: "address the admin API listens on",
    doc: "the admin listener's address",
  }),
  admin_token_file: value({
    arg: "<path>",
    parse: textArg,
    help: "file holding the admin API bearer token (else SLUICE_ADMIN_TOKEN)",
    doc: "file holding the admin API's bearer token (surrounding whitespace ignored); else the token is `SLUICE_ADMIN_TOKEN` itself",
  }),
  ledger: value({
    arg: "<target>",
    parse: ledgerArg,
    default: DEFAULT_LEDGER,
    help: "usage ledger: duckdb:PATH (embedded) | postgres://USER@HOST:PORT/DB (shared) | off",
    doc: "the usage ledger, one row per request: `duckdb:PATH` (embedded; one process per file), `postgres://USER@HOST:PORT/DB` (shared by replicas) or `off` (docs/ledger.md)",
  }),
  ledger_retention_days: value({
    arg: "<days>",
    parse: positiveNumArg,
    default: DEFAULT_RETENTION_DAYS,
    help: "ledger rows older than this are deleted (both tables), checked hourly",
    doc: "ledger rows older than this are deleted (both tables), checked hourly",
  }),
  state_url: value({
    arg: "<url>",
    parse: checkedArg(stateUrlProblem),
    help: "shared state for several replicas: redis://[:PASSWORD@]HOST:PORT/DB or rediss:// (docs/replicas.md); without it state stays in process",
    doc: "shared state for several replicas: `redis://[:PASSWORD@]HOST:PORT/DB` or `rediss://` (TLS), Redis or Valkey. Without it admission and budgets stay in process (docs/replicas.md)",
  }),
  otlp_endpoint: value({
    arg: "<url>",
    parse: checkedArg(otlpEndpointProblem),
    help: "OpenTelemetry traces over OTLP/HTTP to <url>/v1/traces, e.g. http://collector:4318 (docs/tracing.md); without it tracing is off",
    doc: "OpenTelemetry traces over OTLP/HTTP (JSON) to `URL/v1/traces`, e.g. `http://collector:4318`: a span per request with children for the queue wait, each upstream attempt and the stream; the worker's `traceparent` names the attempt's span (docs/tracing.md). With it, GenAI metrics go to `URL/v1/metrics` too unless `--otlp-metrics off` (docs/genai-telemetry.md). Off: nothing is traced and a client's `traceparent` reaches the worker as sent",
    docDefault: "unset (off)",
  }),
  otlp_metrics: value({
    arg: "<mode>",
    parse: choiceArg(["on", "off"] as const),
    default: "on",
    help: "on|off; with --otlp-endpoint: GenAI metrics (request duration, TTFT, TPOT, tokens, queue wait) to <url>/v1/metrics too; off = traces only",
    doc: "`on` or `off`; with `--otlp-endpoint`: OpenTelemetry GenAI metrics over OTLP/HTTP to `URL/v1/metrics` (`gen_ai.server.request.duration`, `gen_ai.server.time_to_first_token`, `gen_ai.server.time_per_output_token`, `gen_ai.client.token.usage`, `sluice.queue.wait`; docs/genai-telemetry.md). `off` exports traces only and never loads the metrics SDK",
  }),
  state_key_prefix: value({
    arg: "<prefix>",
    parse: checkedArg((raw) =>
      raw === "" || /\s/.test(raw) ? "must be a non-empty prefix without spaces" : undefined,
    ),
    default: DEFAULT_STATE_KEY_PREFIX,
    help: "prefix of every shared-state key (one hash tag, so Redis Cluster works)",
    doc: "prefix of every shared-state key; all keys share one hash tag (Redis Cluster)",
  }),
  replica_id: value({
    arg: "<id>",
    parse: checkedArg((raw) =>
      REPLICA_ID_PATTERN.test(raw) ? undefined : "must be 1 to 128 letters, digits or . _ : @ -",
    ),
    help: "this replica's name in the shared state (default: hostname-pid)",
    doc: "this replica's name in the shared state (status, leases)",
    docDefault: "hostname-pid",
  }),
  state_fail_mode: value({
    arg: "<mode>",
    parse: choiceArg(STATE_FAIL_MODES),
    default: "local",
    help: "when Redis is unreachable: local (admit on capacity / N replicas, local budgets) | closed (503 scheduler_unavailable)",
    doc: "Redis unreachable: `local` admits on capacity / N replicas with local budgets; `closed` answers 503 `scheduler_unavailable`",
  }),
  lease_ttl_secs: value({
    arg: "<secs>",
    parse: positiveNumArg,
    default: DEFAULT_LEASE_TTL_SECS,
    help: "shared state: a dead replica's slots come back within this time (renewed while requests run)",
    doc: "a slot is a lease renewed while its request runs; a replica killed with SIGKILL has its slots back within this time",
  }),
  inference_gateway_headers: toggle({
    help: "trust a Gateway API inference gateway in front: x-gateway-inference-fairness-id names the tenant, x-gateway-inference-objective the class (docs/kubernetes.md)",
    doc: "trust `x-gateway-inference-fairness-id` (tenant `fairness:<id>`) and `x-gateway-inference-objective` (class by `inference_objective_classes`); off: both are removed (docs/kubernetes.md)",
  }),
  worker_engine: value({
    arg: "<engine>",
    parse: choiceArg(ENGINE_CHOICES),
    default: DEFAULT_ENGINE_SIGNALS.engine,
    help: `engine of workers that name none (workers[].engine): ${ENGINE_CHOICES.join(" | ")} (docs/capacity.md)`,
    doc: "engine of the workers that name none (`workers[].engine` wins): `auto` recognises vLLM and SGLang from their routes, `vllm`, `sglang`, or `openai` (no load signals) (docs/capacity.md)",
  }),
  engine_scrape_interval_ms: value({
    arg: "<ms>",
    parse: intArg(0),
    default: DEFAULT_ENGINE_SIGNALS.scrapeIntervalMs,
    help: "period of the scrapes of each vLLM/SGLang worker's /metrics (running, waiting, KV use); 0 = off",
    doc: "period of the scrapes of each vLLM/SGLang worker's `/metrics`; the load other clients put on a worker narrows its room (0: off; docs/capacity.md)",
  }),
  engine_scrape_timeout_ms: value({
    arg: "<ms>",
    parse: intArg(1),
    default: DEFAULT_ENGINE_SIGNALS.scrapeTimeoutMs,
    help: "timeout of one /metrics scrape (a late one keeps the last reading)",
    doc: "timeout of one `/metrics` scrape; a failed scrape keeps the last reading (its age shows in the status)",
  }),
  capacity_unit: value({
    arg: "<unit>",
    parse: choiceArg(CAPACITY_UNITS),
    default: "requests",
    help: `what a worker's capacity counts, for pools that set none (pools.<model>.capacity_unit): ${CAPACITY_UNITS.join(" | ")} (docs/capacity.md)`,
    doc: "`requests`: a worker takes up to its max running requests; `kv_tokens`: up to its KV capacity x `kv_target_utilization` in request footprints (prompt + predicted output), max running still bounding the count; `pools.<model>.capacity_unit` sets it per pool (docs/capacity.md)",
  }),
  kv_target_utilization: value({
    arg: "<x>",
    parse: numArg("a number > 0 and <= 1", validTargetUtilization),
    default: DEFAULT_KV_TARGET_UTILIZATION,
    help: "kv_tokens: the share of each worker's KV cache its request footprints may fill (0 < x <= 1)",
    doc: "`kv_tokens`: the share of each worker's KV capacity its requests' footprints may fill; the rest is slack for the output prediction's error and the engine's own blocks (`pools.<model>.kv_target_utilization` per pool; docs/capacity.md)",
  }),
  rate_limit_headers: toggleOn({
    help: "send x-ratelimit-* and x-sluice-budget-* headers to identified tenants (--no-rate-limit-headers: off; Retry-After stays)",
    doc: "`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` and `x-sluice-budget-remaining-{tokens,usd}` on every answer to a tenant with such limits (docs/rate-limit-headers.md); `--no-rate-limit-headers` turns them off, Retry-After stays",
  }),
  config: {
    ...value({
      arg: "<path>",
      parse: textArg,
      help: "gateway YAML: any flag by its snake_case name, plus workers, api_keys, trusted_tenant_header",
      doc: "the gateway YAML (below)",
    }),
    inFile: false,
  },
};

export type OptionKey = keyof typeof GATEWAY_OPTIONS;
export const OPTION_KEYS = Object.keys(GATEWAY_OPTIONS) as OptionKey[];

/** Every option's value, typed by its row. */
export type OptionValues = {
  [K in OptionKey]: (typeof GATEWAY_OPTIONS)[K] extends OptionRow<infer T> ? T : never;
};

/** `--state-url` for `state_url`. */
export function flagOf(key: OptionKey): string {
  return `--${key.replaceAll("_", "-")}`;
}

/** `SLUICE_STATE_URL` for `state_url`. */
export function envOf(key: OptionKey): string {
  return `SLUICE_${key.toUpperCase()}`;
}
