/**
 * Shedding at the door over HTTP: 503 load_shed with Retry-After and the JSON body, the lowest
 * levels first, system never; keyed shedding answering a session the same way for a whole window;
 * the flags and YAML blocks that configure all of it, with errors naming the key.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import { adaptiveSettingsWithoutEffect } from "../../src/gateway/adaptive-settings.js";
import { assertError, metric, schedulerDoc, startFleet } from "../helpers/harness.js";

const SLOW = { maxRunningRequests: 2, ttftMs: 5, tokenDelayMs: 200, batchSlowdown: 0 };
const priority = (cls: string) => ({ "x-smg-priority": cls });

describe("prioritized shedding over HTTP", () => {
  test("with the queue far past its wait bound, bulk is shed with 503 load_shed; default queues; system never sheds", async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 10, 23, 12));
    const fleet = await startFleet(t, {
      workers: [SLOW],
      schedulerYaml: schedulerDoc(),
      gateway: { clock, shedding: { prioritized: { maxQueueWaitMs: 500 } } },
    });
    // Two running interactive requests fill the worker; five bulk ones queue behind them.
    const running = [0, 1].map(() => fleet.hold({ max_tokens: 20 }, priority("interactive")));
    await waitQueued(fleet, 0, 2);
    const queued = Array.from({ length: 5 }, () => fleet.hold({ max_tokens: 20 }, priority("bulk")));
    await waitQueued(fleet, 5, 2);
    // One calibration: nothing completed, five queued: the predicted wait is unbounded.
    clock.advance(1000);
    assert.equal(fleet.gateway.shedding!.status().prioritized!.threshold, 100);

    const shed = await fleet.chat({ max_tokens: 2 }, priority("bulk"));
    const message = assertError(shed, 503, "load_shed");
    assert.match(message, /shedding load/);
    const retryAfter = Number(shed.headers["retry-after"]);
    assert.ok(
      Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60,
      `retry-after ${retryAfter}`,
    );
    assert.ok(shed.headers["x-request-id"]);

    // A default request is above the threshold: it queues (and is cancelled here).
    const waiting = fleet.hold({ max_tokens: 2 }, priority("default"));
    await waitQueued(fleet, 6, 2);
    await waiting.cancel();
    // System is never shed, whatever the threshold.
    const system = fleet.hold({ max_tokens: 2 }, priority("system"));
    await waitQueued(fleet, 6, 2);
    await system.cancel();

    const m = await fleet.scrape();
    assert.equal(metric(m, "sluice_load_shed_total", { class: "bulk", reason: "level" }), 1);
    assert.equal(metric(m, "sluice_load_shed_total", { class: "system", reason: "level" }), 0);
    assert.equal(metric(m, "sluice_shed_threshold_level"), 100);
    const outcome = fleet.outcomes.find((o) => o.errorCode === "load_shed");
    assert.equal(outcome?.admission, "rejected");
    assert.equal(outcome?.status, 503);
    assert.equal(fleet.workers[0]!.stats().totalRequests, 2, "a shed request never reaches a worker");
    for (const h of [...running, ...queued]) await h.cancel();
  });
});

describe("adaptive mode sheds by the classes' queue timeouts unless configured", () => {
  const classes = { bulk: { queue_timeout_secs: 5 } };

  test("a class is refused once its wait would pass its queue_timeout; the classes above still queue", async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 10, 24, 12));
    const fleet = await startFleet(t, {
      workers: [SLOW],
      schedulerYaml: schedulerDoc({ classes }),
      // The floor keeps both of the worker's slots (a cold start would begin at a quarter of them).
      gateway: { clock, capacity: { mode: "adaptive", minCapacity: 2 } },
    });
    const shedding = fleet.gateway.shedding!;
    const status = shedding.status().prioritized!;
    assert.equal(status.maxQueueWaitMs, null);
    assert.deepEqual(status.boundsMs, { bulk: 5000, default: 60_000, interactive: 30_000, system: 30_000 });
    const running = [0, 1].map(() => fleet.hold({ max_tokens: 20 }, priority("interactive")));
    await waitQueued(fleet, 0, 2);
    const queued = [0, 1, 2].map(() => fleet.hold({ max_tokens: 20 }, priority("default")));
    await waitQueued(fleet, 3, 2);
    // Nothing completes: four seconds is under bulk's bound, so a bulk request still queues.
    for (let s = 0; s < 4; s++) clock.advance(1000);
    assert.equal(shedding.status().prioritized!.threshold, 0);
    const early = fleet.hold({ max_tokens: 2 }, priority("bulk"));
    await waitQueued(fleet, 4, 2);
    await early.cancel();
    await waitQueued(fleet, 3, 2);
    // Five seconds without a completion: a bulk request would wait in vain. Default still queues.
    clock.advance(1000);
    assert.equal(shedding.status().prioritized!.threshold, 100);
    const shed = await fleet.chat({ max_tokens: 2 }, priority("bulk"));
    assertError(shed, 503, "load_shed");
    assert.equal(shed.headers["retry-after"], "20");
    const waiting = fleet.hold({ max_tokens: 2 }, priority("default"));
    await waitQueued(fleet, 4, 2);
    await waiting.cancel();
    const m = await fleet.scrape();
    assert.equal(metric(m, "sluice_load_shed_total", { class: "bulk", reason: "level" }), 1);
    for (const h of [...running, ...queued]) await h.cancel();
  });

  test("static mode keeps the contract (no shedding unless configured); load_shedding: false turns it off", async (t) => {
    const plain = await startFleet(t, { workers: [SLOW], schedulerYaml: schedulerDoc({ classes }) });
    assert.equal(plain.gateway.shedding, undefined);
    const off = await startFleet(t, {
      workers: [SLOW],
      schedulerYaml: schedulerDoc({ classes }),
      gateway: { capacity: { mode: "adaptive", minCapacity: 1 }, shedding: { prioritized: false } },
    });
    assert.equal(off.gateway.shedding, undefined);
    // A block without max_queue_wait_ms takes the class timeouts in static mode too.
    const perClass = await startFleet(t, {
      workers: [SLOW],
      schedulerYaml: schedulerDoc({ classes }),
      gateway: { shedding: { prioritized: { usageHalfLifeMs: 30_000 } } },
    });
    assert.equal(perClass.gateway.shedding!.status().prioritized!.boundsMs.bulk, 5000);
    // Legacy admission cannot shed: the default is quietly off, a configured block is warned about.
    const warning = "load shedding needs the priority scheduler; it is off while admission is legacy";
    const legacy = await startFleet(t, {
      workers: [SLOW],
      priorityScheduler: { enabled: false },
      gateway: { capacity: { mode: "adaptive", minCapacity: 1 } },
    });
    assert.equal(legacy.gateway.shedding, undefined);
    assert.ok(!legacy.logs.some((l) => l.msg === warning));
    const legacyConfigured = await startFleet(t, {
      workers: [SLOW],
      priorityScheduler: { enabled: false },
      gateway: { shedding: { prioritized: { maxQueueWaitMs: 1000 } } },
    });
    assert.equal(legacyConfigured.gateway.shedding, undefined);
    assert.ok(legacyConfigured.logs.some((l) => l.msg === warning));
  });
});

describe("keyed shedding over HTTP", () => {
  test("a session is either served or refused for the whole window; other classes untouched", async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 10, 23, 12));
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 64 }],
      schedulerYaml: schedulerDoc(),
      gateway: {
        clock,
        shedding: { keyed: { classes: ["bulk"], targetDelayMs: 100, rotationWindowMs: 3_600_000 } },
      },
    });
    const keyed = fleet.gateway.shedding!.keyed!;
    // Queue delay far above target for eight calibrations: 100 -> ~43 %.
    for (let i = 0; i < 8; i++) {
      keyed.observeDelay(10_000);
      clock.advance(1000);
    }
    const percent = keyed.percent;
    assert.ok(percent > 30 && percent < 60, `percent ${percent}`);

    const sessions = Array.from({ length: 60 }, (_, i) => `session-${i}`);
    const first = new Map<string, number>();
    for (const s of sessions) {
      const r = await fleet.chat({ max_tokens: 1 }, { ...priority("bulk"), "x-session-id": s });
      first.set(s, r.status);
      if (r.status === 503) {
        assertError(r, 503, "load_shed");
        const retryAfter = Number(r.headers["retry-after"]);
        assert.ok(retryAfter >= 1 && retryAfter <= 3600, `retry-after ${retryAfter}`);
      } else assert.equal(r.status, 200);
    }
    const refused = [...first.values()].filter((s) => s === 503).length;
    assert.ok(refused > 10 && refused < 50, `${refused} of 60 sessions refused at ${percent.toFixed(1)} %`);
    // The same sessions again, just before the next calibration: the same answers.
    clock.advance(999);
    for (const s of sessions.slice(0, 20)) {
      const r = await fleet.chat({ max_tokens: 1 }, { ...priority("bulk"), "x-session-id": s });
      assert.equal(r.status, first.get(s), s);
    }
    // Keyed shedding covers bulk only here: the refused sessions' default requests are served.
    const refusedSession = sessions.find((s) => first.get(s) === 503)!;
    const other = await fleet.chat(
      { max_tokens: 1 },
      { ...priority("default"), "x-session-id": refusedSession },
    );
    assert.equal(other.status, 200);
    const m = await fleet.scrape();
    assert.ok((metric(m, "sluice_load_shed_total", { class: "bulk", reason: "keyed" }) ?? 0) >= refused);
    assert.ok(Math.abs((metric(m, "sluice_keyed_admission_percent") ?? 0) - keyed.percent) < 1e-9);
  });
});

describe("both shedders over HTTP (issue 35, item 14)", () => {
  test("in a keyed class the prioritizer's fractional cut goes by session too: every session answered whole", async (t) => {
    const clock = new ManualClock(Date.UTC(2026, 10, 27, 12));
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 64 }],
      schedulerYaml: schedulerDoc(),
      gateway: {
        clock,
        shedding: {
          prioritized: { maxQueueWaitMs: 1000 },
          keyed: { classes: ["default"], targetDelayMs: 1000, rotationWindowMs: 3_600_000 },
        },
      },
    });
    const shedding = fleet.gateway.shedding!;
    const tenant = "anonymous";
    // One second as the shedders see it: 25 of the tenant's default requests queued, 20 served,
    // 30 arrivals, waits of 3 s. The prioritizer then admits a fraction of the tenant's level and
    // the keyed percentage falls.
    shedding.queue("default", tenant, 25);
    for (let s = 0; s < 3; s++) {
      for (let i = 0; i < 20; i++) shedding.prioritizer!.recordCompletion();
      for (let i = 0; i < 30; i++) shedding.check("default", tenant, `warm-${s}-${i}`);
      shedding.queueWait("default", 3000);
      clock.advance(1000);
    }
    shedding.queue("default", tenant, -25);
    const p = shedding.prioritizer!;
    const level = p.level("default", tenant);
    const whole = Math.floor(p.threshold);
    assert.equal(whole, level, `threshold ${p.threshold} at level ${level}`);
    const share = 1 - (p.threshold - whole);
    const keyedShare = shedding.keyed!.percent / 100;
    assert.ok(share > 0.2 && share < 0.9 && keyedShare < 0.95, `prioritizer ${share}, keyed ${keyedShare}`);

    const sessions = Array.from({ length: 40 }, (_, i) => `session-${i}`);
    const answers = new Map<string, number[]>();
    for (let round = 0; round < 3; round++) {
      for (const s of sessions) {
        const r = await fleet.chat({ max_tokens: 1 }, { "x-session-id": s });
        const list = answers.get(s) ?? [];
        list.push(r.status);
        answers.set(s, list);
      }
    }
    const mixed = [...answers].filter(([, v]) => new Set(v).size > 1).map(([s, v]) => `${s}: ${v.join(",")}`);
    assert.deepEqual(mixed, [], "sessions both served and shed");
    const served = [...answers.values()].filter((v) => v[0] === 200).length / sessions.length;
    // The stricter cut, not the product of the two (40 sessions: a few either way).
    const expected = Math.min(share, keyedShare);
    assert.ok(
      Math.abs(served - expected) <= 0.2 && served > share * keyedShare + 0.05,
      `served ${served} of the sessions; min ${expected.toFixed(2)}, product ${(share * keyedShare).toFixed(2)}`,
    );
  });

  test("2x overload for 10 s: the worker stays busy, every request answered within its queue timeout, sessions whole", async (t) => {
    // A worker of 4 slots, 100 ms an answer (no slowdown): 40 a second. 20 sessions send 4 a
    // second each (open loop): twice that. Static capacity (no cold start to wait for), both
    // shedders, the default class's queue timeout 5 s.
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 4, ttftMs: 20, tokenDelayMs: 10, batchSlowdown: 0 }],
      schedulerYaml: schedulerDoc({ classes: { default: { queue_timeout_secs: 5 } } }),
      gateway: {
        shedding: {
          prioritized: {},
          keyed: {
            header: "x-session-id",
            classes: ["default"],
            targetDelayMs: 1000,
            rotationWindowMs: 3_600_000,
          },
        },
      },
    });
    const SESSIONS = 20;
    const RUN_MS = 10_000;
    const results: Array<{ session: number; at: number; status: number; ms: number }> = [];
    const pending: Promise<void>[] = [];
    const start = performance.now();
    await new Promise<void>((done) => {
      let ended = 0;
      for (let s = 0; s < SESSIONS; s++) {
        let n = 0;
        const offset = (s * 250) / SESSIONS;
        const tick = () => {
          const due = offset + n * 250;
          if (due >= RUN_MS) {
            if (++ended === SESSIONS) done();
            return;
          }
          n++;
          const sent = performance.now();
          pending.push(
            fleet.chat({ max_tokens: 8 }, { "x-session-id": `s${s}` }, AbortSignal.timeout(20_000)).then(
              (r) => {
                results.push({
                  session: s,
                  at: sent - start,
                  status: r.status,
                  ms: performance.now() - sent,
                });
              },
              () => {
                results.push({ session: s, at: sent - start, status: 0, ms: performance.now() - sent });
              },
            ),
          );
          setTimeout(tick, Math.max(0, offset + n * 250 - (performance.now() - start)));
        };
        setTimeout(tick, offset);
      }
    });
    await Promise.all(pending);
    const byStatus = new Map<number, number>();
    for (const r of results) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1);
    t.diagnostic(`answers by status: ${[...byStatus].map(([k, n]) => `${k} x${n}`).join(", ")}`);
    const unanswered = results.filter((r) => r.status === 0).length;
    assert.equal(unanswered, 0, "requests without an answer within 20 s");
    // Within the queue timeout, plus an answer's time and room for a loaded machine.
    const slow = results.filter((r) => r.ms > 5000 + 3000);
    assert.deepEqual(slow, [], "answers later than the queue timeout");
    // From the third second on (the first cut made), the worker serves near its 40-50 a second.
    // Measured: 52 a second with 16-24 of the 100 session windows mixed (the percentage's first
    // cuts cross sessions, and a few 408s while it falls); before this change 50-52 with 28-30
    // mixed. The bounds are for a loaded machine: this test guards against a collapse or an
    // answer that never comes; the tests with a manual clock pin the laws.
    const late = results.filter((r) => r.at >= 3000 && r.at < RUN_MS);
    const servedRate = late.filter((r) => r.status === 200).length / ((RUN_MS - 3000) / 1000);
    const worker = fleet.workers[0]!.stats();
    assert.ok(
      servedRate >= 0.6 * 40,
      `served ${servedRate.toFixed(1)} a second (worker completed ${worker.completed})`,
    );
    // Sessions whole: two-second windows with both served and shed answers.
    const windows = new Map<string, Set<number>>();
    for (const r of results) {
      const key = `${r.session}:${Math.floor(r.at / 2000)}`;
      windows.set(key, (windows.get(key) ?? new Set()).add(r.status));
    }
    const mixed = [...windows.values()].filter((w) => w.size > 1).length;
    t.diagnostic(`served ${servedRate.toFixed(1)}/s, mixed ${mixed} of ${windows.size} session windows`);
    assert.ok(mixed <= 0.45 * windows.size, `${mixed} of ${windows.size} session windows mixed`);
  });
});

describe("configuration", () => {
  const base = ["--worker-urls", "http://127.0.0.1:9"];

  test("the adaptive settings in static mode are accepted, and a startup warning names them", async (t) => {
    const f = parseGatewayArgs([
      "--worker-urls",
      "http://127.0.0.1:9",
      "--tpot-slo-ms",
      "20",
      "--adaptive-max-capacity",
      "64",
    ]);
    assert.equal(f.capacity.mode, "static");
    assert.deepEqual(adaptiveSettingsWithoutEffect(f.capacity), ["adaptive_max_capacity", "tpot_slo_ms"]);
    assert.deepEqual(adaptiveSettingsWithoutEffect({ ...f.capacity, mode: "adaptive" }), []);

    const fleet = await startFleet(t, {
      workers: [{}],
      gateway: { capacity: { mode: "static", ttftSloMs: 500 } },
    });
    const warned = fleet.logs.filter((l) => l.level === 40 && l.msg.includes("capacity_mode is static"));
    assert.equal(warned.length, 1, JSON.stringify(fleet.logs.map((l) => l.msg)));
    assert.match(warned[0]!.msg, /^ttft_slo_ms: no effect while capacity_mode is static/);
    const quiet = await startFleet(t, { workers: [{}], gateway: { capacity: { mode: "static" } } });
    assert.ok(!quiet.logs.some((l) => l.msg.includes("capacity_mode is static")));
  });

  test("capacity flags and defaults", () => {
    const defaults = parseGatewayArgs(base);
    assert.equal(defaults.capacity.mode, "static");
    assert.equal(defaults.capacity.minCapacity, 1);
    const f = parseGatewayArgs([
      ...base,
      "--capacity-mode",
      "adaptive",
      "--adaptive-min-capacity",
      "4",
      "--adaptive-max-capacity",
      "48",
      "--tpot-slo-ms",
      "60",
      "--ttft-slo-ms",
      "1500",
    ]);
    assert.deepEqual(f.capacity, {
      mode: "adaptive",
      minCapacity: 4,
      maxCapacity: 48,
      tpotSloMs: 60,
      ttftSloMs: 1500,
    });
  });

  test("bad capacity settings name the flag", () => {
    assert.throws(
      () => parseGatewayArgs([...base, "--capacity-mode", "magic"]),
      /must be one of static, adaptive/,
    );
    assert.throws(() => parseGatewayArgs([...base, "--tpot-slo-ms", "-5"]), /must be a number > 0/);
    assert.throws(
      () => parseGatewayArgs([...base, "--adaptive-min-capacity", "10", "--adaptive-max-capacity", "5"]),
      /--adaptive-min-capacity.*adaptive_min_capacity 10 > adaptive_max_capacity 5/,
    );
  });

  test("the gateway YAML: capacity keys and the shedding blocks; errors name the key", (t) => {
    const dir = t.fullName.length > 0 ? (process.env.TMPDIR ?? "/tmp") : "/tmp";
    const file = join(dir, `sluice-shed-${process.pid}.yaml`);
    const write = (text: string) => writeFileSync(file, text);
    write(
      [
        "worker_urls: [http://127.0.0.1:9]",
        "capacity_mode: adaptive",
        "tpot_slo_ms: 80",
        "load_shedding: {max_queue_wait_ms: 4000, codel_classes: [bulk], codel_target_ms: 300}",
        "keyed_shedding: {header: X-Session-Id, classes: [bulk, default], rotation_window_secs: 120}",
      ].join("\n"),
    );
    const f = parseGatewayArgs(["--config", file]);
    assert.equal(f.capacity.mode, "adaptive");
    assert.equal(f.capacity.tpotSloMs, 80);
    const prioritized = f.shedding.prioritized;
    assert.ok(prioritized);
    assert.equal(prioritized.maxQueueWaitMs, 4000);
    assert.deepEqual(prioritized.codelClasses, ["bulk"]);
    assert.equal(f.shedding.keyed?.rotationWindowMs, 120_000);
    assert.equal(f.shedding.keyed?.header, "X-Session-Id");

    const bad: Array<[string, RegExp]> = [
      ["load_shedding: {max_queue_wait_ms: 0}", /load_shedding\.max_queue_wait_ms: must be > 0/],
      ["load_shedding: true", /load_shedding: /],
      ["load_shedding: [1]", /load_shedding: /],
      [
        "load_shedding: {max_queue_wait_ms: 10, codel_classes: [system]}",
        /load_shedding\.codel_classes\.0: .*system is never shed/,
      ],
      ["load_shedding: {max_queue_wait_ms: 10, surprise: 1}", /load_shedding.*surprise/],
      ["keyed_shedding: {min_percent: 150}", /keyed_shedding\.min_percent: must be <= 100/],
      ["keyed_shedding: {classes: [system]}", /keyed_shedding\.classes\.0/],
      ["capacity_mode: sometimes", /capacity_mode: must be one of static, adaptive/],
      // The latency-only controller's constants are gone: the block's error says what replaced them.
      [
        "adaptive_tuning: {adaptive_window_ms: 500}",
        /adaptive_tuning: removed: the adaptive controller has no tuning constants any more.*kv_target_utilization/,
      ],
      ["adaptive_tuning: [1]", /adaptive_tuning: removed/],
    ];
    for (const [line, pattern] of bad) {
      write(`worker_urls: [http://127.0.0.1:9]\n${line}\n`);
      assert.throws(() => parseGatewayArgs(["--config", file]), pattern, line);
    }

    // Without max_queue_wait_ms each class's queue_timeout bounds its wait; false turns it off.
    write("worker_urls: [http://127.0.0.1:9]\nload_shedding: {usage_half_life_secs: 30}\n");
    const perClass = parseGatewayArgs(["--config", file]).shedding.prioritized;
    assert.ok(perClass);
    assert.equal(perClass.maxQueueWaitMs, undefined);
    assert.equal(perClass.usageHalfLifeMs, 30_000);
    write("worker_urls: [http://127.0.0.1:9]\ncapacity_mode: adaptive\nload_shedding: false\n");
    assert.equal(parseGatewayArgs(["--config", file]).shedding.prioritized, false);
  });
});

async function waitQueued(
  fleet: { snapshot(): { queued: number; inflight: number } },
  queued: number,
  inflight: number,
): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const s = fleet.snapshot();
    if (s.queued === queued && s.inflight === inflight) return;
    if (Date.now() > deadline)
      throw new Error(`queued ${s.queued} in flight ${s.inflight}, wanted ${queued}/${inflight}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
