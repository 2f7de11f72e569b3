/**
 * The `sluice` command: --help lists the contract's flags, bad values and bad config keys fail with
 * one line naming them, a --config file works and a CLI flag overrides it. parseGatewayArgs is
 * unit-tested for the merge rules (flag > file > default).
 */
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { describe, test } from "node:test";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import { startMockWorker } from "../../src/mock-worker/index.js";
import { exited, listeningPort, type Run, runCli, startCli } from "../helpers/cli-process.js";
import { sendTo, writeTempFile } from "../helpers/harness.js";

/** The contract's flags (reference, "CLI flags" and "Enabling the scheduler"). */
const CONTRACT_FLAGS = [
  "--worker-urls",
  "--host",
  "--port",
  "--priority-scheduler-enabled",
  "--priority-scheduler-default-max-class",
  "--priority-scheduler-config",
  "--priority-scheduler-tenant-metric-top-n",
  "--max-concurrent-requests",
  "--queue-size",
  "--queue-timeout-secs",
  "--rate-limit-tokens-per-second",
  "--config",
  "--log-level",
];

/** The gateway's CLI default writes a DuckDB ledger in the working directory (the repository
 * here): these tests are about flags, so they run without one unless they choose a ledger. */
function withoutLedger(args: string[]): string[] {
  const gatewayRun = args.length === 0 || args[0]!.startsWith("--");
  return gatewayRun && !args.includes("--ledger") ? [...args, "--ledger", "off"] : args;
}

function startSluice(args: string[]) {
  return startCli(withoutLedger(args));
}

function runSluice(args: string[], timeoutMs = 20_000): Promise<Run> {
  return runCli(withoutLedger(args), timeoutMs);
}

function oneLine(stderr: string): string {
  const lines = stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one stderr line, got: ${JSON.stringify(stderr)}`);
  return lines[0]!;
}

describe("sluice command line", () => {
  test("--help lists every flag of the contract and exits 0", async () => {
    const run = await runSluice(["--help"]);
    assert.equal(run.code, 0, run.stderr);
    for (const flag of CONTRACT_FLAGS) {
      assert.match(run.stdout, new RegExp(`(^|[\\s,])${flag}(?![\\w-])`), `--help lists ${flag}`);
    }
    assert.equal(run.stderr, "");
  });

  test("a bad flag value exits non-zero with one stderr line naming the flag", async () => {
    const run = await runSluice(["--worker-urls", "http://127.0.0.1:1", "--port", "abc"]);
    assert.notEqual(run.code, 0);
    assert.match(oneLine(run.stderr), /--port/);
  });

  test("a --config YAML with an unknown key exits non-zero naming the key", async (t) => {
    const file = await writeTempFile(
      t,
      "gateway.yaml",
      "worker_urls: [http://127.0.0.1:1]\nfrobnicate_level: 3\n",
    );
    const run = await runSluice(["--config", file]);
    assert.notEqual(run.code, 0);
    assert.match(oneLine(run.stderr), /frobnicate_level/);
  });

  test("a --config YAML with worker_urls and port works, and a CLI flag overrides the file", async (t) => {
    const worker = await startMockWorker({});
    t.after(() => worker.close());
    // The file's port is taken: if the file won over the flag, the gateway could not start.
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
    const takenPort = (blocker.address() as { port: number }).port;
    const file = await writeTempFile(
      t,
      "gateway.yaml",
      `worker_urls:\n  - ${worker.url}\nport: ${takenPort}\nhost: 127.0.0.1\nlog_level: info\n`,
    );

    const { child, out } = startSluice(["--config", file, "--port", "0"]);
    t.after(async () => {
      if (child.exitCode === null) {
        child.kill("SIGKILL");
        await exited(child);
      }
    });
    const port = await listeningPort(child, out);
    assert.notEqual(port, takenPort);
    const ready = await sendTo(`http://127.0.0.1:${port}`, "/readiness");
    assert.equal(ready.status, 200);
    assert.equal(JSON.parse(ready.text).healthy_workers, 1);

    child.kill("SIGTERM");
    assert.equal(await exited(child), 0);
  });
});

describe("parseGatewayArgs: merge rules", () => {
  test("defaults follow the contract", () => {
    const f = parseGatewayArgs(["--worker-urls", "http://w1:8000", "http://w2:8000/ignored-path"]);
    assert.deepEqual(f.workerUrls, ["http://w1:8000", "http://w2:8000"]);
    assert.deepEqual(f.workers, [{ url: "http://w1:8000" }, { url: "http://w2:8000" }]);
    assert.equal(f.host, "127.0.0.1");
    assert.equal(f.port, 30000);
    assert.deepEqual(f.priorityScheduler, {
      enabled: false,
      strict: false,
      defaultMaxClass: "default",
      configPath: undefined,
      tenantMetricTopN: 32,
    });
    assert.deepEqual(f.legacy, {
      maxConcurrentRequests: -1,
      queueSize: 100,
      queueTimeoutSecs: 60,
      rateLimitTokensPerSecond: undefined,
    });
    assert.equal(f.logLevel, "info");
    assert.equal(f.requireAuth, false);
    assert.deepEqual(f.apiKeys, []);
    assert.equal(f.trustedTenantHeader, null);
  });

  test("the file wins over defaults, a command-line flag wins over the file", async (t) => {
    const file = await writeTempFile(
      t,
      "gateway.yaml",
      [
        "worker_urls: [http://file-w1:8000, http://file-w2:8000]",
        "port: 4000",
        "queue_size: 7",
        "queue_timeout_secs: 2.5",
        "priority_scheduler_enabled: true",
        "priority_scheduler_default_max_class: interactive",
        "priority_scheduler_config: /etc/sluice/priority.yaml",
        "rate_limit_tokens_per_second: 50",
        "log_level: warn",
        "workers:",
        "  - {url: 'http://file-w1:8000', capacity: 12}",
        "  - {url: 'http://extra:9000', capacity: 3}",
        "api_keys:",
        "  - {sha256: '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', tenant: acme}",
        "trusted_tenant_header: x-tenant-id",
        "",
      ].join("\n"),
    );
    const fromFile = parseGatewayArgs(["--config", file]);
    assert.equal(fromFile.port, 4000);
    assert.equal(fromFile.legacy.queueSize, 7);
    assert.equal(fromFile.legacy.queueTimeoutSecs, 2.5);
    assert.equal(fromFile.legacy.rateLimitTokensPerSecond, 50);
    assert.equal(fromFile.priorityScheduler.enabled, true);
    assert.equal(fromFile.priorityScheduler.defaultMaxClass, "interactive");
    assert.equal(fromFile.priorityScheduler.configPath, "/etc/sluice/priority.yaml");
    assert.equal(fromFile.logLevel, "warn");
    assert.equal(fromFile.host, "127.0.0.1", "not in the file: the default");
    assert.deepEqual(fromFile.workers, [
      { url: "http://file-w1:8000", capacity: 12 },
      { url: "http://file-w2:8000" },
      { url: "http://extra:9000", capacity: 3 },
    ]);
    assert.deepEqual(fromFile.apiKeys, [
      { sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", tenant: "acme" },
    ]);
    assert.equal(fromFile.trustedTenantHeader, "x-tenant-id");

    const overridden = parseGatewayArgs([
      "--config",
      file,
      "--port",
      "5000",
      "--queue-size",
      "0",
      "--worker-urls",
      "http://cli-w:8000",
      "--priority-scheduler-default-max-class",
      "bulk",
      "--log-level",
      "error",
    ]);
    assert.equal(overridden.port, 5000);
    assert.equal(overridden.legacy.queueSize, 0);
    assert.equal(overridden.priorityScheduler.defaultMaxClass, "bulk");
    assert.equal(overridden.logLevel, "error");
    assert.equal(overridden.legacy.queueTimeoutSecs, 2.5, "still from the file");
    // The flag's worker list replaces the file's; the file's per-worker entries still add theirs.
    assert.deepEqual(overridden.workerUrls, [
      "http://cli-w:8000",
      "http://file-w1:8000",
      "http://extra:9000",
    ]);
  });

  test("model pools in the gateway YAML: workers[].models, default_model, pools.<model>.classes", async (t) => {
    const file = await writeTempFile(
      t,
      "pools.yaml",
      [
        "workers:",
        "  - {url: 'http://w1:8000', models: [llama-3-70b]}",
        "  - {url: 'http://w2:8000'}",
        "default_model: llama-3-8b",
        "pools:",
        "  llama-3-70b:",
        "    classes:",
        "      bulk: {queue_size: 16, queue_timeout_secs: 60}",
      ].join("\n"),
    );
    const flags = parseGatewayArgs(["--config", file]);
    assert.deepEqual(
      flags.workers.map((w) => [w.url, w.models]),
      [
        ["http://w1:8000", ["llama-3-70b"]],
        ["http://w2:8000", undefined],
      ],
    );
    assert.equal(flags.defaultModel, "llama-3-8b");
    assert.deepEqual(flags.pools, { "llama-3-70b": { bulk: { queue_size: 16, queue_timeout_secs: 60 } } });
    assert.equal(parseGatewayArgs(["--worker-urls", "http://w:1", "--default-model", "m"]).defaultModel, "m");
  });

  test("file values go through the flag's own parser; errors name the file key", async (t) => {
    const bad = async (yaml: string, pattern: RegExp) => {
      const file = await writeTempFile(t, "gateway.yaml", `worker_urls: [http://w:1]\n${yaml}\n`);
      assert.throws(() => parseGatewayArgs(["--config", file]), pattern);
    };
    await bad("port: abc", /port: must be an integer/);
    await bad("queue_timeout_secs: 0", /queue_timeout_secs: must be a number > 0/);
    await bad("priority_scheduler_enabled: yes-please", /priority_scheduler_enabled: must be true or false/);
    await bad("log_level: loud", /log_level: must be one of/);
    await bad("mystery: 1", /mystery: unknown key/);
    await bad("config: other.yaml", /config: a config file cannot name another config file/);
    await bad("workers: [{url: 'http://w:1', capacity: 0}]", /workers\.0\.capacity/);
    await bad("api_keys: [{sha256: abc}]", /api_keys\.0\.tenant/);
    await bad(
      "workers: [{url: 'http://w:1', models: []}]",
      /workers\.0\.models: must name at least one model/,
    );
    await bad(
      "workers: [{url: 'http://w:1', models: llama}]",
      /workers\.0\.models: must be a list of model names/,
    );
    await bad("pools: {llama: {classes: {urgent: {queue_size: 1}}}}", /pools\.llama\.classes/);
    await bad("pools: {llama: {queue_size: 1}}", /pools\.llama/);
    await bad(
      "pools: {llama: {classes: {bulk: {queue_size: -1}}}}",
      /pools\.llama\.classes\.bulk\.queue_size/,
    );
    await bad("default_model: ''", /default_model: must be a model name/);

    // The class flag is parsed like the header: an unknown value falls back to default.
    const lenient = await writeTempFile(
      t,
      "ok.yaml",
      "worker_urls: [http://w:1]\npriority_scheduler_default_max_class: Urgent\n",
    );
    assert.equal(parseGatewayArgs(["--config", lenient]).priorityScheduler.defaultMaxClass, "default");
    assert.equal(
      parseGatewayArgs(["--worker-urls", "http://w:1", "--priority-scheduler-default-max-class", " SYSTEM "])
        .priorityScheduler.defaultMaxClass,
      "system",
    );
  });

  test("command-line errors: no worker, bad URL, bad number", () => {
    assert.throws(() => parseGatewayArgs([]), /--worker-urls: at least one worker URL is required/);
    assert.throws(
      () => parseGatewayArgs(["--worker-urls", "ftp://w:1"]),
      /must be an http:\/\/ or https:\/\/ URL/,
    );
    assert.throws(
      () => parseGatewayArgs(["--worker-urls", "http://w:1", "--max-concurrent-requests", "0"]),
      /-1/,
    );
    assert.throws(
      () => parseGatewayArgs(["--worker-urls", "http://w:1", "--config", "/nonexistent/sluice.yaml"]),
      /--config/,
    );
  });
});
