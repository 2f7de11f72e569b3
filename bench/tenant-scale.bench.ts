/**
 * Admissions per second against the number of distinct tenants: the core bench's oversubscribed
 * closed loop (256 slots, 1,024 outstanding, every task released at once), with tasks drawn from 16
 * tenants and from 100,000. Each tenant is a flow in its class's fair queue, so many tenants means
 * many flows: more memory touched per admission, and flows created and pruned as tenants come and go.
 * `node --import tsx --expose-gc bench/tenant-scale.bench.ts` (BENCH_TENANT_COUNTS=16,100000,
 * BENCH_ROUNDS, BENCH_TASKS, BENCH_POLICIES=0 for tenants without policies).
 * Besides admissions per wall-clock second it prints admissions per CPU second of the process
 * (garbage collector threads included): on a shared, busy host the wall clock also counts the time
 * the process waited for a core, the CPU time does not.
 */
import { createScheduler, type Permit, type PriorityClass } from "../src/index.js";
import { settleHeap } from "./lib/stats.js";
import { mulberry32, sluiceClasses, tenantNames, tenantPolicies } from "./lib/workload.js";

const CAPACITY = 256;
const OUTSTANDING = 4 * CAPACITY;
const TASKS = Number(process.env.BENCH_TASKS ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
/** BENCH_POLICIES=0: no tenant has a policy (every one gets the default's weight and class). */
const WITH_POLICIES = process.env.BENCH_POLICIES !== "0";
const CLASSES: readonly PriorityClass[] = ["bulk", "default", "interactive", "system"];

interface Timing {
  wallS: number;
  cpuS: number;
}

function run(tenants: readonly string[], n: number, seed: number): Promise<Timing> {
  const s = createScheduler({
    capacity: CAPACITY,
    classes: sluiceClasses(),
    // Every tenant with a policy (weights 1..4), as when tenants come from API keys; or none.
    tenantPolicies: WITH_POLICIES ? tenantPolicies(tenants) : {},
    defaultMaxClass: "system",
  });
  const rand = mulberry32(seed);
  let submitted = 0;
  let completed = 0;
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const onAdmit = (permit: Permit) => {
      permit.release();
      completed++;
      if (submitted < n) submit();
      else if (completed === n) {
        const cpu = process.cpuUsage(cpu0);
        resolve({ wallS: (performance.now() - t0) / 1000, cpuS: (cpu.user + cpu.system) / 1e6 });
      }
    };
    const submit = () => {
      submitted++;
      const cls = CLASSES[Math.floor(rand() * 4)]!;
      const tenant = tenants[Math.floor(rand() * tenants.length)]!;
      s.acquire({ priority: cls, tenant, cost: 1 + Math.floor(rand() * 512) }).then(onAdmit, reject);
    };
    while (submitted < OUTSTANDING) submit();
  });
}

const COUNTS = (process.env.BENCH_TENANT_COUNTS ?? "16,100000").split(",").map(Number);
const shapes = COUNTS.map((count) => ({
  count,
  tenants: tenantNames(count),
  rates: [] as number[],
  cpuRates: [] as number[],
}));
for (const shape of shapes) await run(shape.tenants, TASKS / 5, 1); // warm-up
for (let round = 0; round < ROUNDS; round++) {
  // Interleaved, so a busy moment of the machine falls on both shapes alike.
  for (const shape of shapes) {
    await settleHeap();
    const t = await run(shape.tenants, TASKS, round + 2);
    shape.rates.push(TASKS / t.wallS);
    shape.cpuRates.push(TASKS / t.cpuS);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const s of shapes) {
  const rounds = s.rates.map((r) => Math.round(r / 1000)).join(", ");
  console.log(
    `${String(s.count).padStart(7)} tenants: ${Math.round(median(s.rates)).toLocaleString("en")} admissions/s (rounds ${rounds} k), ${Math.round(median(s.cpuRates)).toLocaleString("en")} per CPU second`,
  );
}
if (shapes.length === 2) {
  const [few, many] = shapes.map((s) => median(s.rates));
  const [fewCpu, manyCpu] = shapes.map((s) => median(s.cpuRates));
  console.log(
    `${shapes[0]!.count} / ${shapes[1]!.count} tenants: ${(few! / many!).toFixed(2)}x wall, ${(fewCpu! / manyCpu!).toFixed(2)}x CPU (target <= 1.5x)`,
  );
}
