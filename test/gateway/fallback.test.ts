/**
 * Fallbacks that speak up (issue #38): a scheduler that fails safe to legacy admission says so in
 * its log (with how to fix it), in /readiness and the admin status, and in
 * `sluice_scheduler_fallback{reason}`; a bad priority YAML names its file, line and key.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  assertOk,
  LEVEL_ERROR,
  type LogLine,
  metric,
  smallSchedulerYaml,
  startFleet,
} from "../helpers/harness.js";

function errorLines(logs: LogLine[]): LogLine[] {
  return logs.filter((l) => l.level === LEVEL_ERROR);
}

describe("scheduler fallback: reservations exceed capacity", () => {
  test("two workers of 16: legacy, the log says which key to lower and to what, readiness and metrics say why", async (t) => {
    const fleet = await startFleet(t, { workers: [{ maxRunningRequests: 16 }, { maxRunningRequests: 16 }] });
    assert.equal(fleet.gateway.admission.mode, "legacy");
    const errors = errorLines(fleet.logs);
    assert.equal(errors.length, 1, JSON.stringify(errors));
    // The built-in interactive floor (128) is the largest: lowering it by the excess makes it fit.
    assert.match(
      errors[0]!.msg,
      /lower classes\.interactive\.reserved_floor to at most 0 and classes\.interactive\.reserved_per_slot to at most 0 and classes\.system\.reserved_floor to at most 28 for a fleet of 32/,
    );

    const ready = await fleet.send("/readiness");
    assert.equal(ready.status, 200, "the fail-safe keeps the gateway ready");
    const body = JSON.parse(ready.text);
    assert.equal(body.admission_mode, "legacy");
    assert.equal(body.fallback_code, "reservations_exceed_capacity");
    assert.match(body.fallback_reason, /reservations total \d+ exceed capacity 32/);

    const status = fleet.gateway.status();
    assert.equal(status.fallback_code, "reservations_exceed_capacity");

    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_scheduler_fallback", { reason: "reservations_exceed_capacity" }), 1);
    assert.equal(metric(s, "sluice_scheduler_fallback", { reason: "config_invalid" }), 0);
    assert.equal(metric(s, "sluice_scheduler_fallback", { reason: "config_missing" }), 0);
    assertOk(await fleet.chat());
  });

  test("the suggested floors really fit: the same fleet with them runs the scheduler", async (t) => {
    const workers = [{ maxRunningRequests: 16 }, { maxRunningRequests: 16 }];
    const probe = await startFleet(t, { workers });
    const fixes = [
      ...errorLines(probe.logs)[0]!.msg.matchAll(/classes\.(\w+)\.reserved_floor to at most (\d+)/g),
    ];
    assert.ok(fixes.length > 0, "the log names a floor to lower");
    const yaml = `classes:\n${fixes.map((m) => `  ${m[1]}:\n    reserved_floor: ${m[2]}\n`).join("")}`;
    const fixed = await startFleet(t, { workers, schedulerYaml: yaml });
    assert.equal(fixed.gateway.admission.mode, "scheduler", String(fixed.gateway.admission.fallbackReason));
  });
});

describe("scheduler fallback: the priority YAML", () => {
  const cases = [
    {
      name: "an unknown key with a near miss",
      yaml: "classes:\n  default:\n    queue_sise: 5\n",
      want: /priority\.yaml:3: classes\.default\.queue_sise: unknown key \(did you mean queue_size\?\)/,
    },
    {
      name: "an unknown class with a near miss",
      yaml: "classes:\n  interactiv:\n    queue_size: 5\n",
      want: /priority\.yaml:2: classes\.interactiv: unknown class .*\(did you mean interactive\?\)/,
    },
    {
      name: "a negative size",
      yaml: "classes:\n  bulk:\n    reserved_floor: 0\n    queue_size: -1\n",
      want: /priority\.yaml:4: classes\.bulk\.queue_size: /,
    },
    {
      name: "an unknown max_class",
      yaml: "tenant_policies:\n  acme:\n    weight: 2\n    max_class: interactve\n",
      want: /priority\.yaml:4: tenant_policies\.acme\.max_class: .*\(did you mean interactive\?\)/,
    },
    {
      name: "a YAML syntax error",
      yaml: "classes:\n  default:\n    queue_size: [5\n",
      want: /priority\.yaml:\d+: invalid YAML/,
    },
  ];
  for (const c of cases) {
    test(`${c.name}: legacy, config_invalid, the file, line and key named`, async (t) => {
      const fleet = await startFleet(t, { schedulerYaml: c.yaml });
      assert.equal(fleet.gateway.admission.mode, "legacy");
      assert.equal(fleet.gateway.admission.fallbackCode, "config_invalid");
      assert.match(fleet.gateway.admission.fallbackReason ?? "", c.want);
      assert.match(errorLines(fleet.logs)[0]?.msg ?? "", c.want);
      const body = JSON.parse((await fleet.send("/readiness")).text);
      assert.equal(body.fallback_code, "config_invalid");
      const s = await fleet.scrape();
      assert.equal(metric(s, "sluice_scheduler_fallback", { reason: "config_invalid" }), 1);
    });
  }

  test("a missing file: config_missing, the path named", async (t) => {
    const fleet = await startFleet(t, {
      priorityScheduler: { configPath: "/nonexistent/sluice-priority.yaml" },
    });
    assert.equal(fleet.gateway.admission.fallbackCode, "config_missing");
    assert.match(
      fleet.gateway.admission.fallbackReason ?? "",
      /\/nonexistent\/sluice-priority\.yaml: ENOENT/,
    );
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_scheduler_fallback", { reason: "config_missing" }), 1);
  });

  test("no fallback: readiness and status say null, every fallback gauge 0", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 8 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    const body = JSON.parse((await fleet.send("/readiness")).text);
    assert.equal(body.admission_mode, "scheduler");
    assert.equal(body.fallback_reason, null);
    assert.equal(body.fallback_code, null);
    assert.equal(fleet.gateway.status().fallback_code, null);
    const s = await fleet.scrape();
    for (const reason of ["config_missing", "config_invalid", "reservations_exceed_capacity"])
      assert.equal(metric(s, "sluice_scheduler_fallback", { reason }), 0);
  });

  test("the scheduler disabled is no fallback: every fallback gauge 0", async (t) => {
    const fleet = await startFleet(t, { priorityScheduler: { enabled: false } });
    assert.equal(fleet.gateway.admission.fallbackCode, undefined);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_scheduler_fallback", { reason: "reservations_exceed_capacity" }), 0);
  });
});

describe("docs/examples/small-fleet-priority.yaml", () => {
  test("two mock workers of 16 run it in scheduler mode, no fallback", async (t) => {
    const path = new URL("../../docs/examples/small-fleet-priority.yaml", import.meta.url).pathname;
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 16 }, { maxRunningRequests: 16 }],
      priorityScheduler: { configPath: path },
    });
    assert.equal(fleet.gateway.capacity.capacity, 32);
    assert.equal(fleet.gateway.admission.mode, "scheduler", String(fleet.gateway.admission.fallbackReason));
    assert.equal(fleet.gateway.admission.fallbackCode, undefined);
    assert.equal(errorLines(fleet.logs).length, 0);
    assertOk(await fleet.chat({}, { "x-smg-priority": "interactive" }));
  });
});
