/**
 * The environment layer of the gateway's options: `SLUICE_<KEY>` for every option, read after the
 * command line and before the `--config` file; an empty variable is unset, and a bad value names
 * the variable.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import {
  envOf,
  flagOf,
  GATEWAY_OPTIONS,
  OPTION_KEYS,
  type OptionKey,
} from "../../src/config/gateway-option-table.js";
import { resolveOptionValues } from "../../src/config/option-layers.js";
import { runCli } from "../helpers/cli-process.js";
import { writeTempFile } from "../helpers/harness.js";

const W = ["--worker-urls", "http://127.0.0.1:1"];

/** A valid value for every option, other than its default, as text and as the value it parses to. */
const SAMPLES: Record<OptionKey, [string, unknown]> = {
  worker_urls: ["http://a:1, http://b:2/x", ["http://a:1", "http://b:2"]],
  host: ["0.0.0.0", "0.0.0.0"],
  port: ["8080", 8080],
  policy: ["round_robin", "round_robin"],
  session_header: ["X-Conversation", "x-conversation"],
  cache_threshold: ["0.7", 0.7],
  balance_abs_threshold: ["9", 9],
  balance_rel_threshold: ["2.5", 2.5],
  cache_aware_max_tree_size: ["1000", 1000],
  breaker_failures: ["0", 0],
  breaker_error_ratio: ["0.25", 0.25],
  breaker_window_secs: ["30", 30],
  breaker_min_requests: ["5", 5],
  breaker_cooldown_secs: ["15", 15],
  breaker_half_open_requests: ["1", 1],
  max_retries: ["0", 0],
  default_model: ["llama", "llama"],
  priority_scheduler_strict: ["1", true],
  priority_scheduler_enabled: ["true", true],
  priority_scheduler_default_max_class: ["bulk", "bulk"],
  priority_scheduler_config: ["/etc/p.yaml", "/etc/p.yaml"],
  priority_scheduler_tenant_metric_top_n: ["4", 4],
  max_concurrent_requests: ["16", 16],
  queue_size: ["7", 7],
  queue_timeout_secs: ["2.5", 2.5],
  rate_limit_tokens_per_second: ["50", 50],
  require_auth: ["1", true],
  max_payload_size: ["1024", 1024],
  request_timeout_secs: ["90", 90],
  drain_timeout_secs: ["0", 0],
  upstream_connect_timeout_secs: ["3", 3],
  worker_api_key: ["secret", "secret"],
  max_cost_tokens: ["4096", 4096],
  default_output_tokens: ["256", 256],
  capacity_mode: ["adaptive", "adaptive"],
  adaptive_min_capacity: ["2", 2],
  adaptive_max_capacity: ["64", 64],
  tpot_slo_ms: ["40", 40],
  ttft_slo_ms: ["900", 900],
  client_headers_timeout_secs: ["4", 4],
  client_body_idle_timeout_secs: ["8", 8],
  client_body_timeout_secs: ["12.5", 12.5],
  client_keep_alive_timeout_secs: ["70", 70],
  max_client_connections: ["100", 100],
  health_check_interval_secs: ["3", 3],
  health_check_timeout_secs: ["1", 1],
  health_failure_threshold: ["5", 5],
  health_success_threshold: ["4", 4],
  health_check_endpoint: ["/ready", "/ready"],
  log_level: ["warn", "warn"],
  admin_port: ["9180", 9180],
  admin_host: ["0.0.0.0", "0.0.0.0"],
  admin_token_file: ["/run/token", "/run/token"],
  ledger: ["off", "off"],
  ledger_retention_days: ["7", 7],
  state_url: ["redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2"],
  otlp_endpoint: ["http://collector:4318", "http://collector:4318"],
  otlp_metrics: ["off", "off"],
  state_key_prefix: ["{gw}:", "{gw}:"],
  replica_id: ["replica-1", "replica-1"],
  state_fail_mode: ["closed", "closed"],
  lease_ttl_secs: ["20", 20],
  inference_gateway_headers: ["1", true],
  worker_engine: ["vllm", "vllm"],
  engine_scrape_interval_ms: ["500", 500],
  engine_scrape_timeout_ms: ["250", 250],
  capacity_unit: ["kv_tokens", "kv_tokens"],
  kv_target_utilization: ["0.8", 0.8],
  rate_limit_headers: ["false", false],
  config: ["/etc/sluice.yaml", "/etc/sluice.yaml"],
};

function fromEnv(key: OptionKey, raw: string): unknown {
  return resolveOptionValues({ commandLine: {}, env: { [envOf(key)]: raw }, file: {}, filePath: undefined })[
    key
  ];
}

describe("gateway options from the environment", () => {
  test("every option reads its SLUICE_ variable through its own parser", () => {
    for (const key of OPTION_KEYS) {
      const [raw, parsed] = SAMPLES[key];
      assert.notDeepEqual(
        parsed,
        GATEWAY_OPTIONS[key].default,
        `${key}: the sample differs from the default`,
      );
      assert.deepEqual(fromEnv(key, raw), parsed, envOf(key));
    }
  });

  test("every variable is SLUICE_ and the flag's name in upper snake case", () => {
    for (const key of OPTION_KEYS) {
      assert.equal(envOf(key), `SLUICE_${flagOf(key).slice(2).replaceAll("-", "_").toUpperCase()}`);
    }
    assert.equal(envOf("state_url"), "SLUICE_STATE_URL");
    assert.equal(envOf("worker_api_key"), "SLUICE_WORKER_API_KEY");
  });

  test("the command line wins over the environment, the environment over the file, the file over the default", async (t) => {
    const file = await writeTempFile(
      t,
      "gw.yaml",
      "worker_urls: [http://127.0.0.1:1]\nport: 7000\nqueue_size: 5\n",
    );
    const env = { SLUICE_PORT: "8000", SLUICE_QUEUE_SIZE: "6", SLUICE_HOST: "0.0.0.0" };
    const s = parseGatewayArgs(["--config", file, "--port", "9000"], env);
    assert.equal(s.port, 9000); // command line
    assert.equal(s.legacy.queueSize, 6); // environment over file
    assert.equal(s.host, "0.0.0.0"); // environment over default
    assert.equal(parseGatewayArgs(["--config", file], {}).legacy.queueSize, 5); // file
    assert.equal(parseGatewayArgs(W, {}).legacy.queueSize, 100); // default
  });

  test("an empty variable counts as unset", async (t) => {
    const file = await writeTempFile(t, "gw.yaml", "worker_urls: [http://127.0.0.1:1]\nport: 7000\n");
    assert.equal(parseGatewayArgs(["--config", file], { SLUICE_PORT: "" }).port, 7000);
    assert.equal(parseGatewayArgs(W, { SLUICE_PORT: "", SLUICE_REQUIRE_AUTH: "" }).port, 30000);
    assert.equal(parseGatewayArgs(W, { SLUICE_WORKER_API_KEY: "" }).workerApiKey, undefined);
  });

  test("a bad value names the variable", () => {
    assert.throws(() => parseGatewayArgs(W, { SLUICE_PORT: "abc" }), {
      name: "ConfigError",
      message: "SLUICE_PORT: must be an integer >= 0",
    });
    assert.throws(() => parseGatewayArgs(W, { SLUICE_POLICY: "fastest" }), {
      message: /^SLUICE_POLICY: must be one of /,
    });
    assert.throws(() => parseGatewayArgs(W, { SLUICE_REQUIRE_AUTH: "yes" }), {
      message: "SLUICE_REQUIRE_AUTH: must be true, false, 1 or 0",
    });
    assert.throws(() => parseGatewayArgs([], { SLUICE_WORKER_URLS: "http://a:1,ftp://b" }), {
      message: 'SLUICE_WORKER_URLS: "ftp://b" must be an http:// or https:// URL',
    });
  });

  test("a variable the command line overrides is not parsed", () => {
    assert.equal(parseGatewayArgs([...W, "--port", "1"], { SLUICE_PORT: "abc" }).port, 1);
  });

  test("SLUICE_WORKER_URLS alone names the workers", () => {
    const s = parseGatewayArgs([], { SLUICE_WORKER_URLS: "http://a:1 http://b:2" });
    assert.deepEqual(s.workerUrls, ["http://a:1", "http://b:2"]);
  });

  test("SLUICE_WORKER_API_KEY keeps working, below --worker-api-key and above the file", async (t) => {
    const env = { SLUICE_WORKER_API_KEY: "from-env" };
    assert.equal(parseGatewayArgs(W, env).workerApiKey, "from-env");
    assert.equal(parseGatewayArgs([...W, "--worker-api-key", "from-flag"], env).workerApiKey, "from-flag");
    const file = await writeTempFile(
      t,
      "gw.yaml",
      "worker_urls: [http://127.0.0.1:1]\nworker_api_key: from-file\n",
    );
    assert.equal(parseGatewayArgs(["--config", file], env).workerApiKey, "from-env");
    assert.equal(parseGatewayArgs(["--config", file], {}).workerApiKey, "from-file");
  });

  test("SLUICE_CONFIG names the --config file, and --config wins over it", async (t) => {
    const a = await writeTempFile(t, "a.yaml", "worker_urls: [http://127.0.0.1:1]\nport: 1111\n");
    const b = await writeTempFile(t, "b.yaml", "worker_urls: [http://127.0.0.1:1]\nport: 2222\n");
    const fromEnvFile = parseGatewayArgs([], { SLUICE_CONFIG: a });
    assert.equal(fromEnvFile.port, 1111);
    assert.equal(fromEnvFile.configPath, a);
    assert.equal(parseGatewayArgs(["--config", b], { SLUICE_CONFIG: a }).port, 2222);
  });

  test("the admin token still comes from SLUICE_ADMIN_TOKEN", () => {
    const s = parseGatewayArgs(W, { SLUICE_ADMIN_PORT: "9180", SLUICE_ADMIN_TOKEN: " t0k " });
    assert.deepEqual(s.admin, { host: "127.0.0.1", port: 9180, token: "t0k" });
    assert.throws(() => parseGatewayArgs(W, { SLUICE_ADMIN_PORT: "9180" }), {
      message: "--admin-token-file: the admin API needs a token: --admin-token-file or SLUICE_ADMIN_TOKEN",
    });
  });

  test("the sluice command exits 2 with one line naming a bad variable", async () => {
    process.env.SLUICE_PORT = "abc"; // the child inherits it
    try {
      const run = await runCli([...W, "--ledger", "off"]);
      assert.equal(run.code, 2);
      assert.equal(run.stderr, "sluice: SLUICE_PORT: must be an integer >= 0\n");
    } finally {
      delete process.env.SLUICE_PORT;
    }
  });
});
