/**
 * Fuzz of the two shedders together (issue 35, item 14), on a manual clock: random session counts,
 * rates, service rates, queue timeouts and delay targets, in front of a FIFO queue served at a fixed
 * rate. Whatever the draw: inside one calibration period every session gets one answer (both
 * shedders go by its bucket; before, the prioritizer's own draw split sessions in the first draw),
 * and once settled the shedders let through at least 80% of what the workers can serve.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import fc from "fast-check";
import { LoadShedding } from "../../src/shedding/load-shedding.js";

interface Draw {
  sessions: number;
  perSession: number;
  servePerSec: number;
  timeoutMs: number;
  targetDelayMs: number;
}

/** 90 s of the model; returns the served count per second and the sessions with mixed answers. */
function run(d: Draw): { served: number[]; mixed: string[] } {
  const clock = new ManualClock(Date.UTC(2026, 10, 27, 12));
  const shedding = new LoadShedding(
    {
      prioritized: {
        classWaitMs: { bulk: d.timeoutMs, default: d.timeoutMs, interactive: 30_000, system: 30_000 },
      },
      keyed: { classes: ["default"], targetDelayMs: d.targetDelayMs },
    },
    clock,
  );
  const queue: number[] = [];
  const served: number[] = [];
  const mixed: string[] = [];
  let verdicts = new Map<number, boolean>();
  let credit = 0;
  let servedThisSecond = 0;
  const stepMs = 100;
  const sendEvery = 1000 / d.perSession;
  for (let t = 0; t < 90_000; t += stepMs) {
    for (let s = 0; s < d.sessions; s++) {
      const phase = (s * sendEvery) / d.sessions;
      const sends = Math.floor((t + stepMs - phase) / sendEvery) - Math.floor((t - phase) / sendEvery);
      for (let i = 0; i < sends; i++) {
        const shed = shedding.check("default", "acme", `s${s}`).shed;
        const before = verdicts.get(s);
        if (before !== undefined && before !== shed) mixed.push(`s${s} at ${t} ms`);
        verdicts.set(s, shed);
        if (!shed) {
          queue.push(t);
          shedding.queue("default", "acme", 1);
        }
      }
    }
    while (queue.length > 0 && t - queue[0]! >= d.timeoutMs) {
      shedding.queue("default", "acme", -1);
      shedding.queueWait("default", t - queue.shift()!, false);
    }
    credit += (d.servePerSec * stepMs) / 1000;
    while (credit >= 1 && queue.length > 0) {
      credit--;
      shedding.queue("default", "acme", -1);
      shedding.queueWait("default", t - queue.shift()!, true);
      shedding.served("default", "acme", 100);
      servedThisSecond++;
    }
    if (queue.length === 0) credit = Math.min(credit, 1);
    clock.advance(stepMs);
    if ((t + stepMs) % 1000 === 0) {
      shedding.calibrate();
      // A new calibration may move the cuts: sessions are whole within one.
      verdicts = new Map();
      served.push(servedThisSecond);
      servedThisSecond = 0;
    }
  }
  return { served, mixed };
}

test("fuzz: both shedders keep sessions whole per calibration and the workers near what they serve", () => {
  fc.assert(
    fc.property(
      fc
        .record({
          sessions: fc.integer({ min: 40, max: 120 }),
          perSession: fc.integer({ min: 1, max: 6 }),
          servePerSec: fc.integer({ min: 10, max: 120 }),
          timeoutMs: fc.integer({ min: 2000, max: 10_000 }),
          // At least 5 of the model's 100 ms steps: a wait of one step is no queue.
          targetDelayMs: fc.integer({ min: 500, max: 2000 }),
        })
        // A session is at most a tenth of what is served: the admitted share moves a session at a
        // time, and with coarser sessions the served rate steps by more than the bound below.
        .filter((d) => d.perSession * 10 <= d.servePerSec),
      (d) => {
        const r = run(d);
        assert.deepEqual(r.mixed.slice(0, 5), [], "sessions with two answers inside one calibration");
        const offered = d.sessions * d.perSession;
        const settled = r.served.slice(45);
        const rate = settled.reduce((a, b) => a + b, 0) / settled.length;
        const wanted = Math.min(offered, d.servePerSec);
        assert.ok(rate >= 0.8 * wanted, `served ${rate.toFixed(1)}/s of ${wanted} (${JSON.stringify(d)})`);
      },
    ),
    {
      numRuns: 40,
      seed: 35_14,
    },
  );
});
