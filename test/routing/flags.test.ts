/**
 * The routing and circuit-breaker flags and YAML keys: documented defaults, the file, the command
 * line over the file, and bad values refused naming the flag or the key.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import { DEFAULT_BREAKER, DEFAULT_ROUTING } from "../../src/routing/options.js";
import { DEFAULT_MAX_RETRIES } from "../../src/routing/retry.js";
import { writeTempFile } from "../helpers/harness.js";

const W = ["--worker-urls", "http://w:1"];

describe("routing flags", () => {
  test("defaults: cache_aware, x-session-id, the reference's thresholds, the breaker's defaults", () => {
    const f = parseGatewayArgs(W);
    assert.equal(f.policy, "cache_aware");
    assert.deepEqual(f.routing, {
      sessionHeader: "x-session-id",
      cacheThreshold: 0.3,
      balanceAbsThreshold: 4,
      balanceRelThreshold: 1.5,
      cacheAwareMaxTreeSize: 67_108_864,
    });
    const { policy: _, ...knobs } = DEFAULT_ROUTING;
    assert.deepEqual(f.routing, knobs);
    assert.deepEqual(f.breaker, {
      failures: 10,
      errorRatio: 0.5,
      windowSecs: 120,
      minRequests: 20,
      cooldownSecs: 60,
      halfOpenRequests: 3,
    });
    assert.deepEqual(f.breaker, DEFAULT_BREAKER);
  });

  test("flags and YAML keys; a flag wins over the file", async (t) => {
    const file = await writeTempFile(
      t,
      "gateway.yaml",
      [
        "worker_urls: [http://w:1]",
        "policy: session",
        "session_header: X-Conversation-Id",
        "cache_threshold: 0.6",
        "balance_abs_threshold: 16",
        "balance_rel_threshold: 1.25",
        "cache_aware_max_tree_size: 1000000",
        "breaker_failures: 5",
        "breaker_error_ratio: 0.25",
        "breaker_window_secs: 30",
        "breaker_min_requests: 8",
        "breaker_cooldown_secs: 15",
        "breaker_half_open_requests: 2",
        "",
      ].join("\n"),
    );
    const fromFile = parseGatewayArgs(["--config", file]);
    assert.equal(fromFile.policy, "session");
    assert.deepEqual(fromFile.routing, {
      sessionHeader: "x-conversation-id",
      cacheThreshold: 0.6,
      balanceAbsThreshold: 16,
      balanceRelThreshold: 1.25,
      cacheAwareMaxTreeSize: 1_000_000,
    });
    assert.deepEqual(fromFile.breaker, {
      failures: 5,
      errorRatio: 0.25,
      windowSecs: 30,
      minRequests: 8,
      cooldownSecs: 15,
      halfOpenRequests: 2,
    });
    const overridden = parseGatewayArgs([
      "--config",
      file,
      "--policy",
      "prefix_hash",
      "--cache-threshold",
      "0",
      "--breaker-failures",
      "0",
      "--breaker-cooldown-secs",
      "0.5",
    ]);
    assert.equal(overridden.policy, "prefix_hash");
    assert.equal(overridden.routing.cacheThreshold, 0);
    assert.equal(overridden.routing.balanceAbsThreshold, 16);
    assert.equal(overridden.breaker.failures, 0);
    assert.equal(overridden.breaker.cooldownSecs, 0.5);
    for (const policy of ["cache_aware", "prefix_hash", "session", "power_of_two", "round_robin", "random"]) {
      assert.equal(parseGatewayArgs([...W, "--policy", policy]).policy, policy);
    }
  });

  test("bad values are refused naming the flag or the key", async (t) => {
    const badFlag = (args: string[], pattern: RegExp) =>
      assert.throws(() => parseGatewayArgs([...W, ...args]), pattern);
    badFlag(["--policy", "least_load"], /--policy.*must be one of cache_aware, prefix_hash, session/);
    badFlag(["--cache-threshold", "1.5"], /--cache-threshold.*must be a number from 0 to 1/);
    badFlag(["--balance-abs-threshold", "-1"], /--balance-abs-threshold.*must be an integer >= 0/);
    badFlag(["--balance-rel-threshold", "0.5"], /--balance-rel-threshold.*must be a number >= 1/);
    badFlag(["--cache-aware-max-tree-size", "0"], /--cache-aware-max-tree-size.*must be an integer >= 1/);
    badFlag(["--session-header", "x session"], /--session-header.*must be a header name/);
    badFlag(["--breaker-error-ratio", "2"], /--breaker-error-ratio.*must be a number from 0 to 1/);
    badFlag(["--breaker-half-open-requests", "0"], /--breaker-half-open-requests.*must be an integer >= 1/);
    badFlag(["--breaker-cooldown-secs", "0"], /--breaker-cooldown-secs.*must be a number > 0/);
    const badKey = async (yaml: string, pattern: RegExp) => {
      const file = await writeTempFile(t, "gateway.yaml", `worker_urls: [http://w:1]\n${yaml}\n`);
      assert.throws(() => parseGatewayArgs(["--config", file]), pattern);
    };
    await badKey("policy: fastest", /policy: must be one of/);
    await badKey("cache_threshold: -0.1", /cache_threshold: must be a number from 0 to 1/);
    await badKey("breaker_window_secs: 0", /breaker_window_secs: must be a number > 0/);
    await badKey("breaker_min_requests: 1.5", /breaker_min_requests: must be an integer >= 1/);
  });

  test("--max-retries / max_retries: default 2, 0 disables, the flag over the file, bad values named", async (t) => {
    assert.equal(parseGatewayArgs(W).maxRetries, 2);
    assert.equal(parseGatewayArgs(W).maxRetries, DEFAULT_MAX_RETRIES);
    assert.equal(parseGatewayArgs([...W, "--max-retries", "0"]).maxRetries, 0);
    const file = await writeTempFile(t, "gateway.yaml", "worker_urls: [http://w:1]\nmax_retries: 4\n");
    assert.equal(parseGatewayArgs(["--config", file]).maxRetries, 4);
    assert.equal(parseGatewayArgs(["--config", file, "--max-retries", "1"]).maxRetries, 1);
    assert.throws(
      () => parseGatewayArgs([...W, "--max-retries", "-1"]),
      /--max-retries.*must be an integer >= 0/,
    );
    assert.throws(
      () => parseGatewayArgs([...W, "--max-retries", "1.5"]),
      /--max-retries.*must be an integer >= 0/,
    );
    const bad = await writeTempFile(t, "bad.yaml", "worker_urls: [http://w:1]\nmax_retries: two\n");
    assert.throws(() => parseGatewayArgs(["--config", bad]), /max_retries: must be an integer >= 0/);
  });
});
