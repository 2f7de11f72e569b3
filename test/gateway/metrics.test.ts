/**
 * The gateway's own endpoints: /metrics (every metric of the contract's table, with its type and
 * label names, parsed by parse-prometheus-text-format), /health and /readiness.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { assertOk, labelNames, metric, smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";
import { CONTRACT_METRICS } from "../metrics/contract-metrics.js";

const CLASSES = ["bulk", "default", "interactive", "system"];
const OUTCOMES = [
  "admitted",
  "client_cancelled",
  "preempted",
  "rejected_queue_full",
  "rejected_queue_timeout",
];

describe("gateway endpoints", () => {
  test("/metrics has every metric of the contract with its TYPE and label names", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4 }],
      schedulerYaml: smallSchedulerYaml({ classes: { bulk: { queue_size: 7 } } }),
      priorityScheduler: { defaultMaxClass: "interactive" },
    });
    // A clamp (system -> interactive) and an unknown value, so the tenant-labelled series exist.
    assertOk(await fleet.chat({}, { "x-smg-priority": "system" }));
    assertOk(await fleet.chat({}, { "x-smg-priority": "whatever" }));
    const held = fleet.hold({}, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "5000" });
    await waitFor(() => fleet.snapshot().classes.bulk.inflight === 1, "bulk in flight");

    const reply = await fleet.send("/metrics");
    assert.equal(reply.status, 200);
    assert.match(String(reply.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
    const s = await fleet.scrape();
    for (const [name, type, labels] of CONTRACT_METRICS) {
      const family = s.families.get(name);
      assert.ok(family, `${name} is exported`);
      assert.equal(family.type, type, `${name} TYPE`);
      assert.ok(family.help.length > 0, `${name} HELP`);
      assert.match(s.text, new RegExp(`^# TYPE ${name} ${type.toLowerCase()}$`, "m"));
      assert.deepEqual(labelNames(s, name), [...labels].sort(), `${name} label names`);
    }

    const classValues = (name: string) =>
      [...new Set((s.samples.get(name) ?? []).map((m) => m.labels.class))].sort();
    assert.deepEqual(classValues("smg_scheduler_admit_total"), CLASSES);
    assert.deepEqual(
      [...new Set((s.samples.get("smg_scheduler_admit_total") ?? []).map((m) => m.labels.outcome))].sort(),
      OUTCOMES,
    );
    assert.deepEqual(classValues("smg_scheduler_inflight"), CLASSES);

    // Values follow the live state and the configuration.
    assert.equal(metric(s, "smg_scheduler_inflight", { class: "bulk" }), 1);
    assert.equal(metric(s, "smg_scheduler_queue_size_limit", { class: "bulk" }), 7);
    assert.equal(metric(s, "smg_scheduler_queue_depth", { class: "bulk" }), 0);
    assert.equal(metric(s, "smg_scheduler_utilization"), 0.25);
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "interactive", outcome: "admitted" }), 1);
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "anonymous",
        requested_class: "system",
        effective_class: "interactive",
      }),
      1,
    );
    assert.equal(metric(s, "smg_scheduler_unknown_priority_value_total", { tenant: "anonymous" }), 1);
    assert.equal(metric(s, "smg_scheduler_queue_wait_seconds_count", { class: "default" }), 1);
    const pressure = metric(s, "smg_scheduler_class_capacity_pressure", { class: "bulk" }) ?? -1;
    assert.ok(pressure >= 0 && pressure <= 1);
    await held.cancel();
  });

  test("/health 200; /readiness 200 with a healthy worker", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 6 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    const health = await fleet.send("/health");
    assert.equal(health.status, 200);
    assert.deepEqual(JSON.parse(health.text), { status: "ok" });
    const ready = await fleet.send("/readiness");
    assert.equal(ready.status, 200);
    assert.deepEqual(JSON.parse(ready.text), {
      status: "ready",
      admission_mode: "scheduler",
      fallback_reason: null,
      fallback_code: null,
      healthy_workers: 1,
      capacity: 6,
    });
    // The gateway's own endpoints take no admission slot and never reach a worker.
    assert.equal(fleet.workers[0]!.stats().totalRequests, 0);
    assert.equal(fleet.snapshot().classes.default.inflight, 0);
  });
});
