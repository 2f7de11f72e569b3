/**
 * Heap bytes per queued waiter alone (the core bench's (f) measurement, quickly): for trying
 * changes to the waiter's shape. `node --import tsx --expose-gc bench/waiter-memory.ts`
 */
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { createScheduler } from "../src/index.js";
import { settleHeap } from "./lib/stats.js";
import { CLASS_NAMES, makeWorkload, sluiceClasses, TENANTS, tenantPolicies } from "./lib/workload.js";

const WAITERS = 100_000;
const CAPACITY = 256;

async function once(): Promise<number> {
  const s = createScheduler({
    capacity: CAPACITY,
    classes: sluiceClasses(),
    tenantPolicies: tenantPolicies(),
    defaultMaxClass: "system",
    clock: new ManualClock(),
  });
  const held = await Promise.all(
    Array.from({ length: CAPACITY }, () => s.acquire({ priority: "system", tenant: TENANTS[0] })),
  );
  const w = makeWorkload(WAITERS, 1);
  const promises: unknown[] = new Array(WAITERS).fill(null);
  await settleHeap();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < WAITERS; i++) {
    promises[i] = s.acquire({
      priority: CLASS_NAMES[w.cls[i]!],
      tenant: TENANTS[w.tenant[i]!],
      cost: w.cost[i]!,
    });
  }
  await settleHeap();
  const after = process.memoryUsage().heapUsed;
  if (s.queued !== WAITERS || held.length !== CAPACITY) throw new Error(`${s.queued} queued`);
  promises.fill(null);
  return (after - before) / WAITERS;
}

const samples: number[] = [];
for (let i = 0; i < 3; i++) samples.push(await once());
console.log(`bytes per queued waiter: ${samples.map((b) => b.toFixed(1)).join(", ")}`);
