/**
 * The snapshot's pure parts, without a gateway or a browser: refusals grouped by code, tenant and
 * model pool (fifty identical ones are one group of fifty, with the first and last time seen, and
 * the groups stay bounded); a pool's row counted as sluice_pool_* counts it, each class busy by its
 * own in flight only; and the last hour, which shows this gateway's own minutes from the first
 * request on and hands over to the ledger's rollups minute by minute without counting twice.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import type { ClassSnapshot } from "@sluice/scheduler/core/events.js";
import type { PoolView } from "../../src/contracts/pool-view.js";
import { lastHour } from "../../src/dashboard/last-hour.js";
import { LiveMinutes } from "../../src/dashboard/live-minutes.js";
import { RejectionLog } from "../../src/dashboard/rejections.js";
import { poolRow } from "../../src/dashboard/snapshot.js";
import { outcome } from "../ledger/services.js";

const MINUTE = 60_000;
const T0 = Date.UTC(2026, 0, 5, 10, 0, 0);

const refusal = (over: Parameters<typeof outcome>[0] = {}) =>
  outcome({
    status: 429,
    errorCode: "scheduler_queue_full",
    admission: "rejected",
    outcome: "rejected",
    inputTokens: undefined,
    outputTokens: undefined,
    costUsd: undefined,
    ...over,
  });

describe("rejection groups", () => {
  const poolOf = (model: string | undefined) =>
    model === "llama-70b" ? "llama-70b" : model === "llama-8b" ? "llama-8b" : null;

  test("fifty identical refusals are one group of fifty; other codes, tenants and pools are groups of their own", () => {
    const log = new RejectionLog(50, poolOf);
    for (let i = 0; i < 50; i++)
      log.record(refusal({ tsMs: T0 + i * 100, requestId: `r-${i}`, model: "llama-70b" }));
    log.record(refusal({ tsMs: T0 + 6000, model: "llama-8b", requestId: "small" }));
    log.record(
      refusal({
        tsMs: T0 + 7000,
        model: "llama-70b",
        tenantId: "auth:etl",
        status: 403,
        errorCode: "tenant_budget_exhausted",
      }),
    );
    log.record(outcome({ tsMs: T0 + 8000, model: "llama-70b" })); // served: no group
    const groups = log.groups();
    assert.deepEqual(
      groups.map((g) => [g.code, g.tenant, g.pool, g.status, g.count, g.first_ms, g.last_ms]),
      [
        ["tenant_budget_exhausted", "auth:etl", "llama-70b", 403, 1, T0 + 7000, T0 + 7000],
        ["scheduler_queue_full", "auth:acme", "llama-8b", 429, 1, T0 + 6000, T0 + 6000],
        ["scheduler_queue_full", "auth:acme", "llama-70b", 429, 50, T0, T0 + 4900],
      ],
      "last seen first",
    );
    assert.equal(groups[2]!.last_request_id, "r-49");
    assert.equal(log.total, 52);
    assert.equal(log.latest().length, 50, "the ring of single rejections is still there");
    assert.equal(log.latest()[0]!.pool, "llama-70b");
  });

  test("a refusal seen again moves its group to the top; past the bound the group seen longest ago goes", () => {
    const log = new RejectionLog(10, poolOf, 3);
    for (const [i, tenant] of ["a", "b", "c"].entries())
      log.record(refusal({ tsMs: T0 + i, tenantId: tenant }));
    log.record(refusal({ tsMs: T0 + 10, tenantId: "a" }));
    assert.deepEqual(
      log.groups().map((g) => [g.tenant, g.count]),
      [
        ["a", 2],
        ["c", 1],
        ["b", 1],
      ],
    );
    log.record(refusal({ tsMs: T0 + 11, tenantId: "d" }));
    assert.deepEqual(
      log.groups().map((g) => g.tenant),
      ["d", "a", "c"],
      "b, seen longest ago, went",
    );
    assert.equal(
      log.codeTotals().get("scheduler_queue_full")?.total,
      5,
      "its count stays in the code's total",
    );
  });
});

function classSnapshot(
  over: Partial<Record<PriorityClass, Partial<ClassSnapshot>>>,
): Record<PriorityClass, ClassSnapshot> {
  const out = {} as Record<PriorityClass, ClassSnapshot>;
  for (const cls of ["system", "interactive", "default", "bulk"] as const) {
    out[cls] = {
      inflight: 0,
      queued: 0,
      queueLimit: 8,
      reserved: 0,
      headroom: 0,
      capacityPressure: 0,
      ...over[cls],
    };
  }
  return out;
}

function pool(name: string, capacity: number, classes: Record<PriorityClass, ClassSnapshot>): PoolView {
  let inflight = 0;
  let queued = 0;
  for (const c of Object.values(classes)) {
    inflight += c.inflight;
    queued += c.queued;
  }
  return {
    name,
    models: [name],
    sharedAdmission: false,
    capacity: { capacity },
    admission: {
      snapshot: () => ({ capacity, inflight, queued, utilization: inflight / capacity, classes }),
      counters: () => undefined,
    },
    workers: {
      members: [{ inflight }],
      healthy: [{}],
      roomWaits: { now: 0, dispatched: 0, timeout: 0, cancelled: 0, noWorker: 0 },
    },
  };
}

describe("pool rows", () => {
  test("each class is busy by its own in flight: a class with none is 0% busy whatever the others hold", () => {
    // default holds 7 of 8 slots: the scheduler's pressure for system is high (little headroom left),
    // but system runs nothing.
    const row = poolRow(
      pool(
        "llama-70b",
        8,
        classSnapshot({
          default: { inflight: 7, headroom: 1, capacityPressure: 0.875 },
          system: { inflight: 0, headroom: 1, capacityPressure: 0.875 },
          bulk: { queued: 3, capacityPressure: 0.875 },
        }),
      ),
    );
    assert.equal(row.name, "llama-70b");
    assert.deepEqual(
      [row.capacity, row.inflight, row.queued, row.workers, row.healthy_workers],
      [8, 7, 3, 1, 1],
    );
    assert.equal(row.utilization, 0.875);
    const byClass = new Map(row.classes!.map((c) => [c.class, c]));
    assert.equal(byClass.get("system")!.busy, 0);
    assert.equal(byClass.get("system")!.pressure, 0.875, "the scheduler's pressure is still reported as is");
    assert.equal(byClass.get("default")!.busy, 0.875);
    assert.equal(byClass.get("bulk")!.busy, 0);
    assert.equal(byClass.get("bulk")!.queued, 3);
  });

  test("a pool with no capacity is 0% busy, not a division by zero", () => {
    const row = poolRow(pool("gone", 0, classSnapshot({})));
    assert.equal(row.utilization, 0);
    assert.ok(row.classes!.every((c) => c.busy === 0));
  });
});

describe("last hour", () => {
  test("without a ledger: the gateway's own minutes from the first request on, the current one included", () => {
    const live = new LiveMinutes();
    live.record(outcome({ tsMs: T0 + 5_000, inputTokens: 3, outputTokens: 4, queueWaitMs: 10 }));
    live.record(outcome({ tsMs: T0 + 6_000, inputTokens: 3, outputTokens: 4, queueWaitMs: 30 }));
    live.record(refusal({ tsMs: T0 + MINUTE + 1_000, tenantId: "auth:etl" }));
    const hour = lastHour(undefined, live, T0 + MINUTE + 2_000);
    assert.equal(hour.from_ledger, false);
    assert.equal(hour.since_ms, T0, "from the first request's minute, not an hour back");
    assert.equal(hour.current_minute_ms, T0 + MINUTE);
    assert.equal(hour.live_from_ms, T0);
    assert.deepEqual(
      hour.minutes.map((m) => [
        m.minute_ms,
        m.source,
        m.requests,
        m.by_outcome,
        m.queue_wait_ms_avg,
        m.queue_wait_ms_max,
      ]),
      [
        [T0, "live", 2, { ok: 2 }, 20, 30],
        [T0 + MINUTE, "live", 1, { rejected: 1 }, 0, 0],
      ],
    );
    assert.deepEqual(hour.totals, {
      requests: 3,
      rejected: 1,
      input_tokens: 6,
      output_tokens: 8,
      cost_usd: 0.000_004,
    });
    assert.deepEqual(
      hour.tenants.map((t) => [t.tenant, t.requests, t.rejected, t.input_tokens + t.output_tokens]),
      [
        ["auth:acme", 2, 0, 14],
        ["auth:etl", 1, 1, 0],
      ],
    );
  });

  test("with rollups: the ledger's minutes, then the gateway's own after the newest rolled-up minute, never both", () => {
    const live = new LiveMinutes();
    for (const ts of [T0 + 1_000, T0 + MINUTE + 1_000, T0 + 2 * MINUTE + 1_000, T0 + 2 * MINUTE + 2_000])
      live.record(outcome({ tsMs: ts }));
    const rolled = (minuteMs: number, requests: number) => ({
      minuteMs,
      requests,
      byOutcome: { ok: requests },
      inputTokens: 3 * requests,
      outputTokens: 4 * requests,
      costUsd: 0,
      queueWaitMsSum: 0,
      queueWaitMsMax: 0,
    });
    // Two replicas write to the ledger: its minutes hold more than this gateway saw.
    const read = {
      usage: {
        sinceMs: T0 - 59 * MINUTE,
        minutes: [rolled(T0, 5), rolled(T0 + MINUTE, 4)],
        tenants: [
          { tenant: "auth:acme", requests: 9, rejected: 0, inputTokens: 27, outputTokens: 36, costUsd: 0 },
        ],
      },
      readAtMs: T0 + 2 * MINUTE + 500,
      error: undefined,
    };
    const hour = lastHour(read, live, T0 + 2 * MINUTE + 3_000);
    assert.equal(hour.from_ledger, true);
    assert.equal(hour.read_at_ms, T0 + 2 * MINUTE + 500);
    assert.deepEqual(
      hour.minutes.map((m) => [m.minute_ms, m.source, m.requests]),
      [
        [T0, "ledger", 5],
        [T0 + MINUTE, "ledger", 4],
        [T0 + 2 * MINUTE, "live", 2],
      ],
    );
    assert.equal(hour.live_from_ms, T0 + 2 * MINUTE);
    assert.equal(hour.totals.requests, 11);
    assert.deepEqual(
      hour.tenants.map((t) => [t.tenant, t.requests, t.input_tokens]),
      [["auth:acme", 11, 33]],
    );
  });

  test("minutes older than the hour are left out, and the tally keeps no more than the hour", () => {
    const live = new LiveMinutes();
    for (let i = 0; i < 90; i++) live.record(outcome({ tsMs: T0 + i * MINUTE }));
    const now = T0 + 89 * MINUTE + 10_000;
    const hour = lastHour(undefined, live, now);
    assert.equal(hour.minutes.length, 60);
    assert.equal(hour.since_ms, T0 + 30 * MINUTE);
    assert.equal(live.from(0).length, 61, "an hour and the current minute are kept");
  });
});
