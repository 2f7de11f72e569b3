/**
 * The gateway's settings from the option layers (command line > environment > `--config` file >
 * default) and the file's blocks: the pure assembly the `sluice` command runs before starting.
 */
import { readFileSync } from "node:fs";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { defaultReplicaId } from "../contracts/replica-id.js";
import { parseLedgerTarget } from "../ledger/target.js";
import {
  checkNoAdaptiveTuning,
  filePoolCapacity,
  filePools,
  fileShedding,
  fileTrustedTenantHeader,
  fileWorkers,
  type GatewayFile,
  loadGatewayFile,
  reloadableParts,
} from "./gateway-file.js";
import { envOf, type OptionValues } from "./gateway-option-table.js";
import type {
  CapacityOptions,
  GatewaySettings,
  GatewayStartSettings,
  WorkerSpec,
} from "./gateway-settings.js";
import { fileInferenceGateway } from "./inference-objectives.js";
import { type Environment, envValue, resolveOptionValues } from "./option-layers.js";
import { urlArg } from "./option-parsers.js";

/** The admin token when no --admin-token-file names one (a secret, so no flag carries it). */
const ADMIN_TOKEN_ENV = "SLUICE_ADMIN_TOKEN";

interface SettingsInput {
  /** What the command line gave, already parsed, by option key. */
  commandLine: Partial<OptionValues>;
  env: Environment;
  /** false: no worker is not an error (`sluice check-config`, where the workers come at run time). */
  requireWorkers?: boolean;
}

/** Everything the command line, the environment and the `--config` file say, validated. */
export function resolveGatewaySettings({
  commandLine,
  env,
  requireWorkers = true,
}: SettingsInput): GatewaySettings {
  const configPath = commandLine.config ?? envValue(env, envOf("config"));
  const file: GatewayFile = configPath === undefined ? {} : loadGatewayFile(configPath);
  const values = resolveOptionValues({ commandLine, env, file, filePath: configPath });

  const workers = mergeWorkers(values.worker_urls ?? [], file, configPath, requireWorkers);
  const { apiKeys, pricing } = reloadableParts(file, configPath);
  const trustedTenantHeader = fileTrustedTenantHeader(file, configPath);
  // The tables are checked whatever the switch says, so a bad table fails before it is turned on.
  const inferenceTables = fileInferenceGateway(file, configPath);

  return {
    workerUrls: workers.map((w) => w.url),
    host: values.host,
    port: values.port,
    policy: values.policy,
    priorityScheduler: {
      enabled: values.priority_scheduler_enabled,
      strict: values.priority_scheduler_strict,
      defaultMaxClass: values.priority_scheduler_default_max_class,
      configPath: values.priority_scheduler_config,
      tenantMetricTopN: values.priority_scheduler_tenant_metric_top_n,
    },
    legacy: {
      maxConcurrentRequests: values.max_concurrent_requests,
      queueSize: values.queue_size,
      queueTimeoutSecs: values.queue_timeout_secs,
      rateLimitTokensPerSecond: values.rate_limit_tokens_per_second,
    },
    workers,
    apiKeys,
    trustedTenantHeader,
    inferenceGateway: values.inference_gateway_headers ? inferenceTables : undefined,
    requireAuth: values.require_auth,
    maxPayloadSize: values.max_payload_size,
    requestTimeoutSecs: values.request_timeout_secs,
    drainTimeoutSecs: values.drain_timeout_secs,
    upstreamConnectTimeoutSecs: values.upstream_connect_timeout_secs,
    workerApiKey: values.worker_api_key,
    maxCostTokens: values.max_cost_tokens,
    defaultOutputTokens: values.default_output_tokens,
    rateLimitHeaders: values.rate_limit_headers,
    capacity: capacitySettings(values, file, configPath),
    shedding: fileShedding(file, configPath),
    routing: {
      sessionHeader: values.session_header,
      cacheThreshold: values.cache_threshold,
      balanceAbsThreshold: values.balance_abs_threshold,
      balanceRelThreshold: values.balance_rel_threshold,
      cacheAwareMaxTreeSize: values.cache_aware_max_tree_size,
    },
    breaker: {
      failures: values.breaker_failures,
      errorRatio: values.breaker_error_ratio,
      windowSecs: values.breaker_window_secs,
      minRequests: values.breaker_min_requests,
      cooldownSecs: values.breaker_cooldown_secs,
      halfOpenRequests: values.breaker_half_open_requests,
    },
    maxRetries: values.max_retries,
    defaultModel: values.default_model,
    pools: filePools(file, configPath),
    kvCapacity: {
      fleet: { unit: values.capacity_unit, targetUtilization: values.kv_target_utilization },
      pools: filePoolCapacity(file, configPath),
    },
    clientLimits: {
      headersTimeoutSecs: values.client_headers_timeout_secs,
      bodyIdleTimeoutSecs: values.client_body_idle_timeout_secs,
      bodyTimeoutSecs: values.client_body_timeout_secs,
      keepAliveTimeoutSecs: values.client_keep_alive_timeout_secs,
      maxConnections: values.max_client_connections,
    },
    health: {
      intervalSecs: values.health_check_interval_secs,
      timeoutSecs: values.health_check_timeout_secs,
      failureThreshold: values.health_failure_threshold,
      successThreshold: values.health_success_threshold,
      endpoint: values.health_check_endpoint,
    },
    logLevel: values.log_level,
    pricing,
    admin: adminSettings(values, env),
    ledger: {
      target: parseLedgerTarget(values.ledger),
      retentionDays: values.ledger_retention_days,
      replica: values.replica_id,
    },
    state:
      values.state_url === undefined
        ? undefined
        : {
            url: values.state_url,
            keyPrefix: values.state_key_prefix,
            replicaId: values.replica_id ?? defaultReplicaId(),
            failMode: values.state_fail_mode,
            leaseTtlSecs: values.lease_ttl_secs,
          },
    otlpEndpoint: values.otlp_endpoint,
    otlpMetrics: values.otlp_metrics === "on",
    engineSignals: {
      engine: values.worker_engine,
      scrapeIntervalMs: values.engine_scrape_interval_ms,
      scrapeTimeoutMs: values.engine_scrape_timeout_ms,
    },
    configPath,
  };
}

/** The settings that become startGateway's options as they are (the rest only the command uses). */
export function startSettings(settings: GatewaySettings): GatewayStartSettings {
  const {
    workerUrls: _urls,
    drainTimeoutSecs: _drain,
    logLevel: _level,
    configPath: _path,
    ...start
  } = settings;
  return start;
}

/** `--worker-urls` merged with the file's `workers` (a worker in both takes the file's details). */
function mergeWorkers(
  urls: string[],
  file: GatewayFile,
  configPath: string | undefined,
  required: boolean,
): WorkerSpec[] {
  let workers: WorkerSpec[] = urls.map((url) => ({ url }));
  const byUrl = new Map(workers.map((w) => [w.url, w]));
  fileWorkers(file, configPath).forEach((w, i) => {
    let origin: string;
    try {
      origin = urlArg(w.url);
    } catch (err) {
      throw new ConfigError(`${configPath}: workers.${i}.url`, (err as Error).message);
    }
    const existing = byUrl.get(origin);
    if (existing) {
      existing.capacity = w.capacity;
      if (w.api_key !== undefined) existing.apiKey = w.api_key;
      if (w.models !== undefined) existing.models = w.models;
      if (w.engine !== undefined) existing.engine = w.engine;
    } else {
      const spec: WorkerSpec = { url: origin, capacity: w.capacity };
      if (w.api_key !== undefined) spec.apiKey = w.api_key;
      if (w.models !== undefined) spec.models = w.models;
      if (w.engine !== undefined) spec.engine = w.engine;
      workers.push(spec);
      byUrl.set(origin, spec);
    }
  });
  workers = workers.filter((w, i) => workers.findIndex((x) => x.url === w.url) === i);
  if (workers.length === 0 && required)
    throw new ConfigError("--worker-urls", "at least one worker URL is required");
  return workers;
}

function capacitySettings(
  values: OptionValues,
  file: GatewayFile,
  configPath: string | undefined,
): CapacityOptions {
  const settings: CapacityOptions = {
    mode: values.capacity_mode,
    minCapacity: values.adaptive_min_capacity,
    maxCapacity: values.adaptive_max_capacity,
    tpotSloMs: values.tpot_slo_ms,
    ttftSloMs: values.ttft_slo_ms,
  };
  checkNoAdaptiveTuning(file, configPath);
  if (settings.maxCapacity !== undefined && values.adaptive_min_capacity > settings.maxCapacity) {
    throw new ConfigError(
      "--adaptive-min-capacity",
      `must be <= --adaptive-max-capacity (adaptive_min_capacity ${values.adaptive_min_capacity} > adaptive_max_capacity ${settings.maxCapacity})`,
    );
  }
  return settings;
}

function adminSettings(values: OptionValues, env: Environment): GatewaySettings["admin"] {
  const port = values.admin_port;
  if (port === undefined) return undefined;
  const tokenFile = values.admin_token_file;
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
  } else token = env[ADMIN_TOKEN_ENV]?.trim();
  if (!token) {
    throw new ConfigError(
      "--admin-token-file",
      `the admin API needs a token: --admin-token-file or ${ADMIN_TOKEN_ENV}`,
    );
  }
  return { host: values.admin_host, port, token };
}
