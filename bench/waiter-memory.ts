/**
 * Heap bytes per queued waiter alone (the core bench's (f) measurement, quickly): for trying
 * changes to the waiter's shape. `node --import tsx --expose-gc bench/waiter-memory.ts`
 *
 * Two more lines for what the first leaves out: a clock that moves by a fractional millisecond
 * between acquires, as performance.now() does (the manual clock's 0 is a small integer, which V8
 * keeps in the field itself; a fresh fraction each time is a heap number of its own), and
 * an AbortSignal per acquire (its controller kept, as a caller would; the controller's and the
 * signal's own bytes are counted too, so that line is not the waiter's alone).
 */
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { createScheduler } from "../src/index.js";
import { settleHeap } from "./lib/stats.js";
import { CLASS_NAMES, makeWorkload, sluiceClasses, TENANTS, tenantPolicies } from "./lib/workload.js";

const WAITERS = 100_000;
const CAPACITY = 256;

interface Variant {
  /** Clock time when the waiters start queueing. */
  now: number;
  /** Milliseconds the clock moves between two acquires. */
  step: number;
  /** An AbortController per acquire, its signal passed. */
  signal: boolean;
}

async function once(variant: Variant): Promise<number> {
  const clock = new ManualClock(variant.now);
  const s = createScheduler({
    capacity: CAPACITY,
    classes: sluiceClasses(),
    tenantPolicies: tenantPolicies(),
    defaultMaxClass: "system",
    clock,
  });
  const held = await Promise.all(
    Array.from({ length: CAPACITY }, () => s.acquire({ priority: "system", tenant: TENANTS[0] })),
  );
  const w = makeWorkload(WAITERS, 1);
  const promises: unknown[] = new Array(WAITERS).fill(null);
  const controllers: (AbortController | null)[] = new Array(WAITERS).fill(null);
  await settleHeap();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < WAITERS; i++) {
    if (variant.step > 0) clock.advance(variant.step);
    const controller = variant.signal ? new AbortController() : null;
    controllers[i] = controller;
    promises[i] = s.acquire({
      priority: CLASS_NAMES[w.cls[i]!],
      tenant: TENANTS[w.tenant[i]!],
      cost: w.cost[i]!,
      signal: controller?.signal,
    });
  }
  await settleHeap();
  const after = process.memoryUsage().heapUsed;
  if (s.queued !== WAITERS || held.length !== CAPACITY) throw new Error(`${s.queued} queued`);
  promises.fill(null);
  controllers.fill(null);
  return (after - before) / WAITERS;
}

async function measure(label: string, variant: Variant): Promise<void> {
  const samples: number[] = [];
  for (let i = 0; i < 3; i++) samples.push(await once(variant));
  console.log(`${label}: ${samples.map((b) => b.toFixed(1)).join(", ")}`);
}

await measure("bytes per queued waiter", { now: 0, step: 0, signal: false });
await measure("  a clock moving by fractions of a millisecond", { now: 1000, step: 0.001, signal: false });
await measure("  and an AbortSignal each (controller and signal included)", {
  now: 1000,
  step: 0.001,
  signal: true,
});
