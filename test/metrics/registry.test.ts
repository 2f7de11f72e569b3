import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ADMISSION_OUTCOMES } from "@sluice/scheduler/core/events.js";
import type { SchedulerPermit } from "@sluice/scheduler/core/inflight.js";
import {
  ClientCancelledError,
  createScheduler,
  ManualClock,
  type Permit,
  PRIORITY_CLASSES,
  QueueFullError,
  QueueTimeoutError,
  type Scheduler,
} from "../../src/index.js";
import {
  createMetrics,
  GATEWAY_METRIC_NAMES,
  QUEUE_WAIT_BUCKETS,
  SCHEDULER_METRIC_NAMES,
  type SluiceMetrics,
} from "../../src/metrics/index.js";
import { labelNames, metric, type Scrape, scrape } from "../helpers/harness.js";
import { CONTRACT_METRICS } from "./contract-metrics.js";

/**
 * Small, reservation-free classes so a capacity of 2 is valid; bulk's queue holds one waiter; the
 * preempting classes preempt on arrival (preempt_after_secs 0), as the scenario below expects.
 */
const CLASSES = {
  system: { reserved_floor: 0, reserved_per_slot: 0, preempt_after_secs: 0 },
  interactive: { reserved_floor: 0, reserved_per_slot: 0, preempt_after_secs: 0 },
  default: { reserved_floor: 0, reserved_per_slot: 0 },
  bulk: { reserved_floor: 0, reserved_per_slot: 0, queue_size: 1 },
};

function admitted(s: Scrape, cls: string, outcome: string): number | undefined {
  return metric(s, SCHEDULER_METRIC_NAMES.admit, { class: cls, outcome });
}

function gauge(s: Scrape, name: string, cls: string): number | undefined {
  return metric(s, name, { class: cls });
}

/** Asserts the promise rejects with `type` (and keeps the rejection handled). */
async function rejectsWith(promise: Promise<unknown>, type: new (...args: never[]) => Error): Promise<void> {
  await assert.rejects(promise, (error: unknown) => error instanceof type);
}

interface Driven {
  metrics: SluiceMetrics;
  scheduler: Scheduler;
  clock: ManualClock;
  interactive: Permit;
  waiterD: Promise<Permit>;
}

/**
 * Drives one of every event (capacity 2, all times in seconds from 0):
 *   t=0    A bulk (auth:a), B bulk (auth:b) admitted at once; P interactive (auth:a) preempts B;
 *          Q1 bulk (auth:b) queues; Q2 bulk (auth:b) -> queue full; C default (auth:c) queues, cancelled;
 *          U "urgent" (auth:u) -> unknown priority, queues in default;
 *          CL system by auth:capped (max_class default) -> clamped to default, queues.
 *   t=60   U and CL time out (default queue_timeout 60).
 *   t=100  D default (auth:d) queues.
 *   t=121  A released: Q1 (waited 121 s > bulk starvation 120 s) is promoted ahead of D.
 */
async function drive(): Promise<Driven> {
  const clock = new ManualClock();
  const metrics = createMetrics();
  const scheduler = createScheduler({
    capacity: 2,
    classes: CLASSES,
    clock,
    observer: metrics.observer,
    defaultMaxClass: "system",
    tenantPolicies: { "auth:capped": { max_class: "default" } },
  });
  metrics.bindScheduler(() => scheduler.snapshot());

  const a = await scheduler.acquire({ priority: "bulk", tenant: "auth:a" });
  const b = await scheduler.acquire({ priority: "bulk", tenant: "auth:b" });
  const interactive = await scheduler.acquire({ priority: "interactive", tenant: "auth:a" });
  assert.equal((b as SchedulerPermit).preempted, true);
  b.release();

  const q1 = scheduler.acquire({ priority: "bulk", tenant: "auth:b" });
  await rejectsWith(scheduler.acquire({ priority: "bulk", tenant: "auth:b" }), QueueFullError);

  const controller = new AbortController();
  const c = scheduler.acquire({ priority: "default", tenant: "auth:c", signal: controller.signal });
  controller.abort();
  await rejectsWith(c, ClientCancelledError);

  const u = scheduler.acquire({ priority: "urgent", tenant: "auth:u" });
  const cl = scheduler.acquire({ priority: "system", tenant: "auth:capped" });
  assert.equal(scheduler.queued, 3);

  clock.advance(60_000);
  await rejectsWith(u, QueueTimeoutError);
  await rejectsWith(cl, QueueTimeoutError);

  clock.advance(40_000);
  const waiterD = scheduler.acquire({ priority: "default", tenant: "auth:d" });
  clock.advance(21_000);
  a.release();
  const promoted = await q1;
  assert.equal((promoted as SchedulerPermit).promoted, true);
  assert.equal(scheduler.queued, 1);
  return { metrics, scheduler, clock, interactive, waiterD };
}

describe("createMetrics: the reference's metrics", () => {
  test("every metric of the seed's table is present with its type and exact label names", async () => {
    const { metrics } = await drive();
    const s = await scrape(metrics);
    for (const [name, type, labels] of CONTRACT_METRICS) {
      const family = s.families.get(name);
      assert.ok(family, `${name} is exported`);
      assert.equal(family.type, type, `${name} type`);
      assert.ok(family.help.length > 0, `${name} has help`);
      assert.deepEqual(labelNames(s, name), [...labels].sort(), `${name} labels`);
    }
    assert.deepEqual(Object.values(SCHEDULER_METRIC_NAMES).sort(), CONTRACT_METRICS.map(([n]) => n).sort());
  });

  test("every class x outcome series and class series exists, at 0, from the first scrape", async () => {
    const metrics = createMetrics({ collectProcessMetrics: false });
    const s = await scrape(metrics);
    for (const cls of PRIORITY_CLASSES) {
      for (const outcome of ADMISSION_OUTCOMES)
        assert.equal(admitted(s, cls, outcome), 0, `${cls}/${outcome}`);
      assert.equal(metric(s, SCHEDULER_METRIC_NAMES.starvationPromotion, { class: cls }), 0);
      assert.equal(metric(s, `${SCHEDULER_METRIC_NAMES.queueWait}_count`, { class: cls }), 0);
      assert.equal(metric(s, `${SCHEDULER_METRIC_NAMES.queueWait}_sum`, { class: cls }), 0);
      for (const name of [
        SCHEDULER_METRIC_NAMES.inflight,
        SCHEDULER_METRIC_NAMES.queueDepth,
        SCHEDULER_METRIC_NAMES.queueSizeLimit,
        SCHEDULER_METRIC_NAMES.classCapacityPressure,
      ]) {
        assert.equal(gauge(s, name, cls), 0, `${name}{class=${cls}} unbound`);
      }
    }
    assert.equal(metric(s, SCHEDULER_METRIC_NAMES.utilization), 0);
    // Only strictly lower victims can be preempted: the 6 possible pairs are pre-initialised.
    assert.equal(s.samples.get(SCHEDULER_METRIC_NAMES.preemption)?.length, 6);
    assert.equal(
      metric(s, SCHEDULER_METRIC_NAMES.preemption, { victim_class: "bulk", by_class: "system" }),
      0,
    );
    // No process metrics when disabled.
    assert.equal(s.families.has("process_cpu_user_seconds_total"), false);
  });

  test("counter and histogram values match the driven events", async () => {
    const { metrics, scheduler } = await drive();
    const s = await scrape(metrics);
    const expected: Record<string, Record<string, number>> = {
      bulk: {
        admitted: 3,
        preempted: 1,
        rejected_queue_full: 1,
        rejected_queue_timeout: 0,
        client_cancelled: 0,
      },
      interactive: {
        admitted: 1,
        preempted: 0,
        rejected_queue_full: 0,
        rejected_queue_timeout: 0,
        client_cancelled: 0,
      },
      default: {
        admitted: 0,
        preempted: 0,
        rejected_queue_full: 0,
        rejected_queue_timeout: 2,
        client_cancelled: 1,
      },
      system: {
        admitted: 0,
        preempted: 0,
        rejected_queue_full: 0,
        rejected_queue_timeout: 0,
        client_cancelled: 0,
      },
    };
    for (const cls of PRIORITY_CLASSES) {
      for (const outcome of ADMISSION_OUTCOMES) {
        assert.equal(admitted(s, cls, outcome), expected[cls]![outcome], `admit ${cls}/${outcome}`);
        // The exported counters agree with the scheduler's own.
        assert.equal(admitted(s, cls, outcome), scheduler.counters().admissions[cls][outcome]);
      }
    }

    assert.equal(
      metric(s, SCHEDULER_METRIC_NAMES.preemption, { victim_class: "bulk", by_class: "interactive" }),
      1,
    );
    const preemptions = s.samples.get(SCHEDULER_METRIC_NAMES.preemption)!;
    assert.equal(
      preemptions.reduce((sum, m) => sum + m.value, 0),
      1,
    );

    assert.deepEqual(s.samples.get(SCHEDULER_METRIC_NAMES.clamp), [
      { labels: { tenant: "auth:capped", requested_class: "system", effective_class: "default" }, value: 1 },
    ]);
    assert.deepEqual(s.samples.get(SCHEDULER_METRIC_NAMES.unknownPriority), [
      { labels: { tenant: "auth:u" }, value: 1 },
    ]);
    for (const cls of PRIORITY_CLASSES) {
      assert.equal(
        metric(s, SCHEDULER_METRIC_NAMES.starvationPromotion, { class: cls }),
        cls === "bulk" ? 1 : 0,
      );
    }

    // Queue waits: bulk A, B at once, Q1 after 121 s; interactive P at once; default C cancelled at
    // once, U and CL timed out at 60 s.
    const wait = SCHEDULER_METRIC_NAMES.queueWait;
    const count = (cls: string) => metric(s, `${wait}_count`, { class: cls });
    const sum = (cls: string) => metric(s, `${wait}_sum`, { class: cls });
    const bucket = (cls: string, le: string) => metric(s, `${wait}_bucket`, { class: cls, le });
    assert.deepEqual([count("bulk"), sum("bulk")], [3, 121]);
    assert.deepEqual([count("interactive"), sum("interactive")], [1, 0]);
    assert.deepEqual([count("default"), sum("default")], [3, 120]);
    assert.deepEqual([count("system"), sum("system")], [0, 0]);
    assert.equal(bucket("bulk", "0.001"), 2);
    assert.equal(bucket("bulk", "120"), 2);
    assert.equal(bucket("bulk", "300"), 3);
    assert.equal(bucket("default", "30"), 1);
    assert.equal(bucket("default", "60"), 3, "a wait of exactly the class timeout falls in its bucket");
    assert.equal(bucket("default", "+Inf"), 3);
    const les = s.samples
      .get(`${wait}_bucket`)!
      .filter((m) => m.labels["class"] === "bulk")
      .map((m) => m.labels["le"]);
    assert.deepEqual(les, [...QUEUE_WAIT_BUCKETS.map(String), "+Inf"]);
    for (const timeout of ["5", "30", "60", "120", "300"])
      assert.ok(les.includes(timeout), `bucket le=${timeout}`);
    assert.equal(les[0], "0.001");
  });

  test("gauges are computed from the live snapshot at scrape time", async () => {
    const { metrics, scheduler, interactive, waiterD } = await drive();
    const check = (s: Scrape) => {
      const snap = scheduler.snapshot();
      for (const cls of PRIORITY_CLASSES) {
        const c = snap.classes[cls];
        assert.equal(gauge(s, SCHEDULER_METRIC_NAMES.inflight, cls), c.inflight, `inflight ${cls}`);
        assert.equal(gauge(s, SCHEDULER_METRIC_NAMES.queueDepth, cls), c.queued, `queue_depth ${cls}`);
        assert.equal(gauge(s, SCHEDULER_METRIC_NAMES.queueSizeLimit, cls), c.queueLimit, `limit ${cls}`);
        const pressure = gauge(s, SCHEDULER_METRIC_NAMES.classCapacityPressure, cls)!;
        assert.ok(Math.abs(pressure - c.capacityPressure) < 1e-12, `pressure ${cls}`);
      }
      assert.equal(metric(s, SCHEDULER_METRIC_NAMES.utilization), snap.utilization);
    };

    const before = await scrape(metrics);
    check(before);
    assert.equal(gauge(before, SCHEDULER_METRIC_NAMES.inflight, "interactive"), 1);
    assert.equal(gauge(before, SCHEDULER_METRIC_NAMES.inflight, "bulk"), 1);
    assert.equal(gauge(before, SCHEDULER_METRIC_NAMES.queueDepth, "default"), 1);
    assert.equal(gauge(before, SCHEDULER_METRIC_NAMES.queueSizeLimit, "bulk"), 1);
    assert.equal(gauge(before, SCHEDULER_METRIC_NAMES.queueSizeLimit, "default"), 512);
    assert.equal(gauge(before, SCHEDULER_METRIC_NAMES.classCapacityPressure, "default"), 1);
    assert.equal(metric(before, SCHEDULER_METRIC_NAMES.utilization), 1);

    // Change the state: P finishes, D is admitted in its place; capacity doubles.
    interactive.release();
    const d = await waiterD;
    scheduler.setCapacity(4);
    const after = await scrape(metrics);
    check(after);
    assert.equal(gauge(after, SCHEDULER_METRIC_NAMES.inflight, "interactive"), 0);
    assert.equal(gauge(after, SCHEDULER_METRIC_NAMES.inflight, "default"), 1);
    assert.equal(gauge(after, SCHEDULER_METRIC_NAMES.queueDepth, "default"), 0);
    assert.equal(metric(after, SCHEDULER_METRIC_NAMES.utilization), 0.5);
    assert.equal(admitted(after, "default", "admitted"), 1);
    assert.equal(metric(after, `${SCHEDULER_METRIC_NAMES.queueWait}_sum`, { class: "default" }), 141);

    d.release();
    // Unbinding (e.g. the gateway fell back to legacy admission) reports 0.
    metrics.bindScheduler(() => undefined);
    const unbound = await scrape(metrics);
    assert.equal(metric(unbound, SCHEDULER_METRIC_NAMES.utilization), 0);
    assert.equal(gauge(unbound, SCHEDULER_METRIC_NAMES.inflight, "bulk"), 0);
    assert.equal(gauge(unbound, SCHEDULER_METRIC_NAMES.queueSizeLimit, "bulk"), 0);
  });

  test("process metrics are collected into the metrics' own registry", async () => {
    const metrics = createMetrics();
    const s = await scrape(metrics);
    assert.equal(s.families.get("process_cpu_user_seconds_total")?.type, "COUNTER");
    assert.ok(s.families.has("nodejs_heap_size_used_bytes"));
    assert.match(metrics.contentType, /^text\/plain; version=0\.0\.4/);
    // Two instances coexist (each has its own registry, not prom-client's global one).
    const other = createMetrics();
    assert.notEqual(other.registry, metrics.registry);
    assert.ok((await other.metricsText()).includes("process_cpu_user_seconds_total"));
  });
});

describe("createMetrics: gateway metrics", () => {
  test("http requests, upstream errors and the bound gauges", async () => {
    const metrics = createMetrics({ collectProcessMetrics: false });
    const unbound = await scrape(metrics);
    assert.equal(metric(unbound, GATEWAY_METRIC_NAMES.capacity), 0);
    assert.equal(metric(unbound, GATEWAY_METRIC_NAMES.workersHealthy), 0);
    assert.equal(metric(unbound, GATEWAY_METRIC_NAMES.admissionMode, { mode: "scheduler" }), 0);
    assert.equal(metric(unbound, GATEWAY_METRIC_NAMES.admissionMode, { mode: "legacy" }), 0);
    for (const kind of ["connect", "reset", "timeout", "status_5xx"]) {
      assert.equal(metric(unbound, GATEWAY_METRIC_NAMES.upstreamErrors, { kind }), 0);
    }

    metrics.httpRequests.inc({ status: "200" });
    metrics.httpRequests.inc({ status: "200" });
    metrics.httpRequests.inc({ status: "429" });
    metrics.upstreamErrors.inc({ kind: "timeout" });
    let capacity = 64;
    let mode: "scheduler" | "legacy" = "legacy";
    let healthy = 2;
    metrics.bindCapacity(() => capacity);
    metrics.bindAdmissionMode(() => mode);
    metrics.bindWorkersHealthy(() => healthy);

    const s = await scrape(metrics);
    for (const [name, type, labels] of [
      [GATEWAY_METRIC_NAMES.httpRequests, "COUNTER", ["status"]],
      [GATEWAY_METRIC_NAMES.upstreamErrors, "COUNTER", ["kind"]],
      [GATEWAY_METRIC_NAMES.capacity, "GAUGE", []],
      [GATEWAY_METRIC_NAMES.admissionMode, "GAUGE", ["mode"]],
      [GATEWAY_METRIC_NAMES.workersHealthy, "GAUGE", []],
    ] as const) {
      assert.equal(s.families.get(name)?.type, type, name);
      assert.deepEqual(labelNames(s, name), [...labels], name);
    }
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.httpRequests, { status: "200" }), 2);
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.httpRequests, { status: "429" }), 1);
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.upstreamErrors, { kind: "timeout" }), 1);
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.capacity), 64);
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.workersHealthy), 2);
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.admissionMode, { mode: "legacy" }), 1);
    assert.equal(metric(s, GATEWAY_METRIC_NAMES.admissionMode, { mode: "scheduler" }), 0);

    capacity = 128;
    mode = "scheduler";
    healthy = 3;
    const later = await scrape(metrics);
    assert.equal(metric(later, GATEWAY_METRIC_NAMES.capacity), 128);
    assert.equal(metric(later, GATEWAY_METRIC_NAMES.workersHealthy), 3);
    assert.equal(metric(later, GATEWAY_METRIC_NAMES.admissionMode, { mode: "scheduler" }), 1);
    assert.equal(metric(later, GATEWAY_METRIC_NAMES.admissionMode, { mode: "legacy" }), 0);
  });
});
