/**
 * Legacy admission through the gateway: the scheduler disabled, and the fail-safe fallback when the
 * scheduler cannot be built (reservations over capacity, a bad YAML), with an ERROR log saying why.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import {
  assertError,
  assertOk,
  LEVEL_ERROR,
  type LogLine,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

function errorLines(logs: LogLine[]): LogLine[] {
  return logs.filter((l) => l.level === LEVEL_ERROR);
}

describe("gateway legacy admission", () => {
  test("scheduler disabled: 429 admission_queue_full and 408 admission_queue_timeout, both with Retry-After", async (t) => {
    // The legacy limiter's queue timeout runs on the gateway's clock: the test moves it.
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      priorityScheduler: { enabled: false },
      legacy: { maxConcurrentRequests: 1, queueSize: 1, queueTimeoutSecs: 0.3 },
      gateway: { clock },
    });
    const admission = fleet.gateway.admission;
    assert.equal(admission.mode, "legacy");
    assert.equal(admission.snapshot().classes, null);
    assert.equal(admission.fallbackReason, undefined);
    assert.equal(errorLines(fleet.logs).length, 0, "a disabled scheduler is not an error");

    const held = fleet.hold({}, { "x-mock-ttft-ms": "5000" });
    await waitFor(() => admission.snapshot().inflight === 1, "the only legacy slot is taken");
    const queued = fleet.hold();
    await waitFor(() => admission.snapshot().queued === 1, "the second request queued");

    // Priorities mean nothing to the legacy limiter: a system request neither preempts nor jumps.
    const full = await fleet.chat({}, { "x-smg-priority": "system" });
    assertError(full, 429, "admission_queue_full");
    assert.equal(full.headers["retry-after"], "1");

    clock.advance(299);
    assert.equal(admission.snapshot().queued, 1, "still queued 1 ms before its timeout");
    clock.advance(1);
    const timedOut = await queued.result;
    assertError(timedOut, 408, "admission_queue_timeout");
    assert.ok(!(timedOut instanceof Error));
    assert.equal(timedOut.headers["retry-after"], "1");

    await held.cancel();
    await waitFor(() => admission.snapshot().inflight === 0, "the legacy slot freed");
    const ok = await fleet.chat();
    assertOk(ok);
    assert.equal(ok.headers["x-sluice-admission"], "fast");

    const ready = JSON.parse((await fleet.send("/readiness")).text);
    assert.equal(ready.admission_mode, "legacy");
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_admission_mode", { mode: "legacy" }), 1);
    assert.equal(metric(s, "sluice_admission_mode", { mode: "scheduler" }), 0);
    assert.equal(metric(s, "smg_scheduler_inflight", { class: "default" }), 0);
  });

  test("built-in reservations exceeding capacity (a capacity-8 worker) -> legacy with an ERROR log", async (t) => {
    const fleet = await startFleet(t, { workers: [{ maxRunningRequests: 8 }] });
    const admission = fleet.gateway.admission;
    assert.equal(fleet.gateway.capacity.capacity, 8);
    assert.equal(admission.mode, "legacy");
    assert.match(admission.fallbackReason ?? "", /reservations total \d+ exceed capacity 8/);
    const errors = errorLines(fleet.logs);
    assert.equal(errors.length, 1, JSON.stringify(errors));
    assert.match(errors[0]!.msg, /priority scheduler disabled/);
    assert.match(errors[0]!.msg, /reservations/);
    assert.match(errors[0]!.msg, /system 32/);
    // Still serving, through the legacy limiter (unlimited by default).
    assertOk(await fleet.chat({}, { "x-smg-priority": "system" }));
  });

  test("a YAML with an unknown class -> legacy with an ERROR log naming classes.urgent", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: "classes:\n  urgent:\n    reserved_floor: 1\n    queue_size: 4\n",
    });
    assert.equal(fleet.gateway.admission.mode, "legacy");
    const errors = errorLines(fleet.logs);
    assert.equal(errors.length, 1, JSON.stringify(errors));
    assert.match(errors[0]!.msg, /classes\.urgent/);
    assert.match(errors[0]!.msg, /unknown class/);
    assertOk(await fleet.chat());
  });

  test("a YAML with an invalid value or a missing file -> legacy with an ERROR log naming the problem", async (t) => {
    const bad = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml({ classes: { bulk: { queue_timeout_secs: 0 } } }),
    });
    assert.equal(bad.gateway.admission.mode, "legacy");
    assert.match(errorLines(bad.logs)[0]?.msg ?? "", /classes\.bulk\.queue_timeout_secs/);

    const missing = await startFleet(t, {
      priorityScheduler: { configPath: "/nonexistent/sluice-priority.yaml" },
    });
    assert.equal(missing.gateway.admission.mode, "legacy");
    assert.match(errorLines(missing.logs)[0]?.msg ?? "", /sluice-priority\.yaml|ENOENT/);
  });

  test("a valid small YAML -> scheduler mode, no ERROR log", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 8 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    assert.equal(fleet.gateway.admission.mode, "scheduler");
    assert.equal(errorLines(fleet.logs).length, 0);
    assert.ok(fleet.logs.some((l) => l.msg === "priority scheduler enabled"));
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_admission_mode", { mode: "scheduler" }), 1);
  });
});
