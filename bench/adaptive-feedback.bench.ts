/**
 * Adaptive capacity's cost per request (`npm run bench:adaptive`): what `capacity_mode: adaptive`
 * adds to each request's path, the feedback calls the gateway makes (queued in and out, in flight
 * in and out, dispatched to a worker, a TTFT sample and a TPOT sample), with one controller per worker for
 * fleets of 1 to 1,024 workers and a window closed every 1,000 requests. The reference, measured
 * in the same run: the core scheduler's uncontended acquire + release (`await` per operation),
 * which every request pays in either capacity mode. Adaptive mode also sheds at the door by
 * default (prioritized, bounded by the classes' queue timeouts), so each request makes the shed
 * stage's calls too: the check, queue in and out with its wait, and its tokens when it ends.
 *
 * Prints a markdown table; BENCH_WRITE=1 also rewrites the adaptive-feedback section of
 * BENCHMARKS.md. Knobs: BENCH_OPS (requests per sample, default 200,000), BENCH_SAMPLES (default 5).
 */
import { fileURLToPath } from "node:url";
import { BUILTIN_CLASS_DEFAULTS } from "@sluice/scheduler/core/config.js";
import { AdaptiveCapacity, type AdaptiveWorker } from "../src/capacity/adaptive.js";
import type { CapacitySource } from "../src/contracts/capacity-source.js";
import { createScheduler, ManualClock } from "../src/index.js";
import { LoadShedding, resolveShedding } from "../src/shedding/load-shedding.js";
import { describeMachine, machine, writeMarkedSection } from "./lib/report.js";
import { fmtFixed, fmtInt, median, settleHeap } from "./lib/stats.js";

const OPS = Number(process.env.BENCH_OPS ?? 200_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 5);
const FLEETS = [1, 4, 32, 256, 1024];
/** Requests per controller window (a window is a second: 1,000 requests/s through the pool). */
const PER_WINDOW = 1000;
const REPORTED = 128;
/** Tenants the requests come from (the shedder's usage levels are per tenant). */
const TENANTS = Array.from({ length: 64 }, (_, i) => `tenant-${i}`);

class BenchWorker implements AdaptiveWorker {
  inflight = 0;
  adaptiveLimit: number | undefined = undefined;
  readonly availableCapacity = REPORTED;
  constructor(readonly url: string) {}
}

interface Fleet {
  capacity: AdaptiveCapacity;
  shedding: LoadShedding;
  clock: ManualClock;
  workers: BenchWorker[];
  /** Requests in flight, oldest first (a ring): each new request retires the oldest. */
  ring: Array<BenchWorker | undefined>;
  at: number;
  served: number;
}

function fleet(size: number): Fleet {
  const clock = new ManualClock();
  const workers = Array.from({ length: size }, (_, i) => new BenchWorker(`http://w${i}:8000`));
  const discovered: CapacitySource = { capacity: size * REPORTED, subscribe: () => {} };
  const capacity = new AdaptiveCapacity(
    discovered,
    { minCapacity: 1, tpotSloMs: 50, workers: () => workers },
    clock,
  );
  const shedding = new LoadShedding(resolveShedding(undefined, BUILTIN_CLASS_DEFAULTS, true)!, clock);
  shedding.start();
  // Half the reported capacity in flight: every controller's limit is in use, none binds.
  const ring = new Array(Math.max(1, (size * REPORTED) >> 1));
  return { capacity, shedding, clock, workers, ring, at: 0, served: 0 };
}

/** One request's feedback, as the gateway's lifecycle gives it (lifecycle.ts, lease.ts). */
function request(f: Fleet, i: number): void {
  const c = f.capacity;
  const sh = f.shedding;
  const w = f.workers[i % f.workers.length]!;
  const tenant = TENANTS[i % TENANTS.length]!;
  if (sh.check("default", tenant, undefined).shed) throw new Error("shed with nothing queued");
  sh.queue("default", tenant, 1);
  c.queued(1);
  c.queued(-1);
  sh.queue("default", tenant, -1);
  sh.queueWait("default", 0);
  c.inflight(1);
  w.inflight++;
  c.dispatched(w.url);
  // Its first token: the TTFT sample (the gateway sends it at a stream's first event).
  c.sample({ kind: "ok", ttftMs: 80 + (i % 7), promptTokens: 900 + (i % 300), spanMs: 80 }, w.url);
  // The oldest request in flight ends: its TPOT sample, then its slot and its worker go back.
  const old = f.ring[f.at];
  f.ring[f.at] = w;
  f.at = f.at + 1 === f.ring.length ? 0 : f.at + 1;
  if (old !== undefined) {
    c.sample({ kind: "ok", tpotMs: 20 + (i % 5), spanMs: 5000 }, old.url);
    old.inflight--;
    c.inflight(-1);
    sh.served("default", TENANTS[(i + 1) % TENANTS.length]!, 250);
  }
  if (++f.served % PER_WINDOW === 0) {
    f.clock.advance(1000);
    c.closeWindow();
  }
}

function nsPerRequest(f: Fleet, n: number): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) request(f, i);
  return ((performance.now() - t0) * 1e6) / n;
}

async function schedulerReference(n: number): Promise<number> {
  const s = createScheduler({ capacity: 1_000_000_000 });
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const p = await s.acquire({ priority: "interactive", tenant: "t" });
    p.release();
  }
  return ((performance.now() - t0) * 1e6) / n;
}

async function main(): Promise<void> {
  const fleets = FLEETS.map((size) => ({ size, f: fleet(size), samples: [] as number[] }));
  const reference: number[] = [];
  for (const x of fleets) nsPerRequest(x.f, OPS / 5); // warm-up
  await schedulerReference(OPS / 5);
  for (let s = 0; s < SAMPLES; s++) {
    await settleHeap();
    reference.push(await schedulerReference(OPS));
    for (const x of fleets) {
      await settleHeap();
      x.samples.push(nsPerRequest(x.f, OPS));
    }
  }
  const ref = median(reference);
  const rows = fleets.map(({ size, f, samples }) => {
    const ns = median(samples);
    const snap = f.capacity.snapshot();
    return `| ${fmtInt(size)} | ${fmtFixed(ns, 0)} | ${fmtFixed(ns / ref, 2)}x | ${fmtInt(snap.limit)} | ${fmtInt(snap.windows)} |`;
  });
  const m = machine();
  const section = [
    "## Adaptive capacity's cost per request (`npm run bench:adaptive`)",
    "",
    `- Date: ${new Date().toISOString()}; machine: ${describeMachine(m)}.`,
    `- Method: ${fmtInt(OPS)} requests per sample, median of ${SAMPLES} samples after a warm-up, interleaved with the reference. Each request makes the gateway's feedback calls (queued in and out, in flight in and out, dispatched to a worker, a TTFT sample at its first token and a TPOT sample at its end) to \`AdaptiveCapacity\` with one controller per worker, and the shed stage's (the check, queue in and out with its wait, its tokens at the end; 64 tenants) to the prioritizer adaptive mode runs by default; a window closes every ${fmtInt(PER_WINDOW)} requests (on a manual clock); half the reported capacity (${REPORTED} per worker) is in flight. Reference, same run: the core scheduler's uncontended \`await acquire()\` + \`release()\`, ${fmtFixed(ref, 0)} ns, which every request pays in either capacity mode.`,
    "",
    "| Workers | ns per request | vs acquire + release | pool limit at the end | windows |",
    "| ---: | ---: | ---: | ---: | ---: |",
    ...rows,
  ].join("\n");
  console.log(section);
  if (process.env.BENCH_WRITE === "1") {
    writeMarkedSection(
      fileURLToPath(new URL("../BENCHMARKS.md", import.meta.url)),
      section,
      "adaptive-feedback",
    );
  }
}

await main();
