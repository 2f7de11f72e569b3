/**
 * The shared-state flags and YAML keys: `--state-url`, `--state-key-prefix` (default `sluice:`),
 * `--replica-id` (default hostname-pid), `--state-fail-mode local|closed` (default local),
 * `--lease-ttl-secs` (default 10); bad values name the flag or the key.
 */
import assert from "node:assert/strict";
import { hostname } from "node:os";
import { describe, test } from "node:test";
import { StateKeys } from "../../src/admission/redis/keys.js";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import { runCli } from "../helpers/cli-process.js";
import { writeTempFile } from "../helpers/harness.js";

const WORKER = ["--worker-urls", "http://127.0.0.1:1"];

describe("shared-state flags", () => {
  test("without --state-url state stays in process; with it, the defaults", () => {
    assert.equal(parseGatewayArgs(WORKER).state, undefined);
    const state = parseGatewayArgs([...WORKER, "--state-url", "redis://127.0.0.1:6379/2"]).state!;
    assert.equal(state.url, "redis://127.0.0.1:6379/2");
    assert.equal(state.keyPrefix, "sluice:");
    assert.equal(state.failMode, "local");
    assert.equal(state.leaseTtlSecs, 10);
    assert.ok(state.replicaId.startsWith(hostname().replace(/[^A-Za-z0-9._:@-]/g, "-")));
    assert.ok(state.replicaId.endsWith(`-${process.pid}`));
  });

  test("every flag, and the same keys in the --config YAML (a flag wins over the file)", async (t) => {
    const flags = parseGatewayArgs([
      ...WORKER,
      "--state-url",
      "rediss://:secret@redis.example:6380/1",
      "--state-key-prefix",
      "prod:",
      "--replica-id",
      "gw-a",
      "--state-fail-mode",
      "closed",
      "--lease-ttl-secs",
      "3.5",
    ]).state!;
    assert.deepEqual(flags, {
      url: "rediss://:secret@redis.example:6380/1",
      keyPrefix: "prod:",
      replicaId: "gw-a",
      failMode: "closed",
      leaseTtlSecs: 3.5,
    });
    const file = await writeTempFile(
      t,
      "gateway.yaml",
      "worker_urls: [http://127.0.0.1:1]\nstate_url: redis://10.0.0.1:6379/0\nstate_key_prefix: 'fleet:'\nreplica_id: gw-b\nstate_fail_mode: closed\nlease_ttl_secs: 4\n",
    );
    assert.deepEqual(parseGatewayArgs(["--config", file]).state, {
      url: "redis://10.0.0.1:6379/0",
      keyPrefix: "fleet:",
      replicaId: "gw-b",
      failMode: "closed",
      leaseTtlSecs: 4,
    });
    assert.equal(parseGatewayArgs(["--config", file, "--state-fail-mode", "local"]).state!.failMode, "local");
  });

  for (const [flag, value, pattern] of [
    ["--state-url", "http://127.0.0.1:6379", /--state-url.*redis:\/\//],
    ["--state-url", "redis://127.0.0.1:6379/db", /--state-url.*database/],
    ["--state-fail-mode", "open", /--state-fail-mode.*local, closed/],
    ["--lease-ttl-secs", "0", /--lease-ttl-secs.*> 0/],
    ["--replica-id", "a b", /--replica-id/],
    ["--state-key-prefix", "", /--state-key-prefix/],
  ] as const) {
    test(`${flag} ${JSON.stringify(value)} is refused with one line naming it`, async () => {
      const run = await runCli([...WORKER, "--ledger", "off", flag, value]);
      assert.equal(run.code, 2, run.stderr);
      assert.match(run.stderr.trim(), pattern);
      assert.equal(run.stderr.trim().split("\n").length, 1);
    });
  }

  test("a bad state_fail_mode in the YAML names the key", async (t) => {
    const file = await writeTempFile(
      t,
      "gateway.yaml",
      "worker_urls: [http://127.0.0.1:1]\nstate_fail_mode: maybe\n",
    );
    assert.throws(
      () => parseGatewayArgs(["--config", file]),
      /state_fail_mode: must be one of local, closed/,
    );
  });

  test("every key of a deployment shares one hash tag, and a pool's keys carry its name", () => {
    const keys = new StateKeys("sluice:");
    const tags = new Set(
      [
        ...keys.pool("default").all,
        ...keys.pool("llama-3").all,
        keys.budget("auth:a"),
        keys.hold("auth:a", "r1"),
      ].map((k) => /\{([^}]*)\}/.exec(k)![1]),
    );
    assert.deepEqual([...tags], ["sluice"]);
    assert.ok(keys.pool("llama-3").st.startsWith("sluice:{sluice}:pool:llama-3:"));
    assert.ok(new StateKeys("{team}:x:").budget("t").startsWith("{team}:x:budget:"));
  });
});
