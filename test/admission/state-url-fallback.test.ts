/**
 * A --state-url nobody answers on (a mistyped port): the replica admits on its local share, and
 * says so as docs/replicas.md promises: one WARN, `sluice_state_local_fallback` 1 and
 * `sluice_state_redis_up` 0 (issue #38 item 3) — with the scheduler on, and with legacy admission.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  assertOk,
  type FleetOptions,
  LEVEL_WARN,
  metric,
  smallSchedulerYaml,
  startFleet,
} from "../helpers/harness.js";

const NOBODY = "redis://127.0.0.1:1/0";

function state(prefix: string) {
  return { url: NOBODY, keyPrefix: prefix, replicaId: "r1", failMode: "local" as const, leaseTtlSecs: 5 };
}

describe("--state-url that does not answer", () => {
  const cases: Array<[string, FleetOptions]> = [
    ["scheduler", { workers: [{ maxRunningRequests: 8 }], schedulerYaml: smallSchedulerYaml() }],
    ["legacy", { priorityScheduler: { enabled: false } }],
  ];
  for (const [name, options] of cases) {
    test(`${name} admission: a WARN naming the state URL, local fallback 1, redis up 0`, async (t) => {
      const fleet = await startFleet(t, { ...options, gateway: { state: state(`sluice-test-${name}`) } });
      assertOk(await fleet.chat());
      const warns = fleet.logs.filter((l) => l.level === LEVEL_WARN && /shared state/.test(l.msg));
      assert.ok(
        warns.some((l) => l.msg.includes("redis://127.0.0.1:1/0") && l.msg.includes("--state-url")),
        JSON.stringify(warns.map((l) => l.msg)),
      );
      const s = await fleet.scrape();
      assert.equal(metric(s, "sluice_state_redis_up"), 0);
      assert.equal(metric(s, "sluice_state_local_fallback"), 1);
    });
  }
});
