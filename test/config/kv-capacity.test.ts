/**
 * `capacity_unit` and `kv_target_utilization` (docs/capacity.md, "Capacity in KV tokens"): the
 * fleet's default from the flag, the environment or the file, a pool's own in `pools.<model>`, and
 * a bad value refused with the key (or the variable) named.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { resolveGatewaySettings } from "../../src/config/resolve-gateway-settings.js";
import { writeTempFile } from "../helpers/harness.js";

const WORKER = "workers:\n  - url: http://127.0.0.1:9001\n";

describe("capacity_unit and kv_target_utilization", () => {
  test("defaults: requests, 0.9; the fleet's keys and a pool's own entry", async (t) => {
    const none = resolveGatewaySettings({ commandLine: { worker_urls: ["http://127.0.0.1:9001"] }, env: {} });
    assert.deepEqual(none.kvCapacity, { fleet: { unit: "requests", targetUtilization: 0.9 }, pools: {} });

    const file = await writeTempFile(
      t,
      "gw.yaml",
      `${WORKER}capacity_unit: kv_tokens\nkv_target_utilization: 0.8\npools:\n  big-model:\n    capacity_unit: requests\n  small-model:\n    kv_target_utilization: 0.95\n`,
    );
    const s = resolveGatewaySettings({ commandLine: { config: file }, env: {} });
    assert.deepEqual(s.kvCapacity, {
      fleet: { unit: "kv_tokens", targetUtilization: 0.8 },
      pools: { "big-model": { unit: "requests" }, "small-model": { targetUtilization: 0.95 } },
    });
    // The environment over the file, as for every option.
    const env = resolveGatewaySettings({
      commandLine: { config: file },
      env: { SLUICE_CAPACITY_UNIT: "requests", SLUICE_KV_TARGET_UTILIZATION: "1" },
    });
    assert.deepEqual(env.kvCapacity.fleet, { unit: "requests", targetUtilization: 1 });
  });

  test("bad values name the key, the pool entry or the variable", async (t) => {
    const refused = async (yaml: string, pattern: RegExp) => {
      const file = await writeTempFile(t, "bad.yaml", `${WORKER}${yaml}`);
      assert.throws(() => resolveGatewaySettings({ commandLine: { config: file }, env: {} }), pattern);
    };
    await refused("capacity_unit: blocks\n", /capacity_unit.*requests.*kv_tokens/s);
    await refused("kv_target_utilization: 0\n", /kv_target_utilization.*> 0 and <= 1/s);
    await refused("kv_target_utilization: 1.2\n", /kv_target_utilization.*> 0 and <= 1/s);
    await refused(
      "pools:\n  m:\n    capacity_unit: slots\n",
      /pools\.m\.capacity_unit.*must be one of requests, kv_tokens/s,
    );
    await refused(
      "pools:\n  m:\n    kv_target_utilization: -1\n",
      /pools\.m\.kv_target_utilization.*must be a number > 0 and <= 1/s,
    );
    assert.throws(
      () =>
        resolveGatewaySettings({
          commandLine: { worker_urls: ["http://127.0.0.1:9001"] },
          env: { SLUICE_KV_TARGET_UTILIZATION: "0" },
        }),
      /SLUICE_KV_TARGET_UTILIZATION.*> 0 and <= 1/s,
    );
  });
});
