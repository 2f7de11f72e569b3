/**
 * Property test of the priority scheduler against a small model: random interleavings of acquire,
 * release, abort, first byte, capacity changes and clock advances (past timeouts and starvation
 * thresholds). After every step the scheduler's counts must equal the model's and its invariants
 * must hold; at the end everything drains with no leaked slot, waiter or timer.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { SchedulerPermit } from "@sluice/scheduler/core/inflight.js";
import fc from "fast-check";
import {
  type AdmissionError,
  type AdmissionOutcome,
  type ClassOverrides,
  ManualClock,
  PRIORITY_CLASSES,
  type PriorityClass,
} from "../../src/index.js";
import { createTestScheduler, flush, type TestScheduler, type Tracked, track } from "./helpers.js";

const RANK: Record<PriorityClass, number> = { bulk: 0, default: 1, interactive: 2, system: 3 };
const TENANTS = ["t-system", "t-interactive", "t-plain"] as const;
const TENANT_MAX: Record<string, number> = { "t-system": 3, "t-interactive": 2, "t-plain": 1 };
const RAW_PRIORITIES = [
  "system",
  "interactive",
  "default",
  "bulk",
  " BULK ",
  "Interactive",
  "nope",
  "",
] as const;

interface ClassGen {
  queue_size: number;
  queue_timeout_secs: number;
  starvation_threshold_secs: number;
  can_preempt: boolean;
  preempt_after_secs: number;
  reserved_floor: number;
}

type Op =
  | { kind: "acquire"; raw: number | null; tenant: number; cost: number; signal: "none" | "live" | "aborted" }
  | { kind: "release"; pick: number }
  | { kind: "abort"; pick: number }
  | { kind: "firstByte"; pick: number }
  | { kind: "capacity"; value: number }
  | { kind: "advance"; ms: number };

const classGen = (floorMax: number): fc.Arbitrary<ClassGen> =>
  fc.record({
    queue_size: fc.integer({ min: 0, max: 3 }),
    queue_timeout_secs: fc.integer({ min: 1, max: 6 }),
    starvation_threshold_secs: fc.integer({ min: 1, max: 4 }),
    can_preempt: fc.boolean(),
    // At once on arrival (the contract's mechanics), or after a wait target the clock reaches.
    preempt_after_secs: fc.constantFrom(0, 0, 0.5),
    reserved_floor: fc.integer({ min: 0, max: floorMax }),
  });

const opGen: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("acquire" as const),
      raw: fc.option(fc.integer({ min: 0, max: RAW_PRIORITIES.length - 1 }), { freq: 8 }),
      tenant: fc.integer({ min: 0, max: TENANTS.length - 1 }),
      cost: fc.integer({ min: 1, max: 5 }),
      signal: fc.constantFrom(
        "none" as const,
        "none" as const,
        "live" as const,
        "live" as const,
        "aborted" as const,
      ),
    }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("release" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("abort" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("firstByte" as const), pick: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("capacity" as const), value: fc.integer({ min: 0, max: 8 }) }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("advance" as const),
      ms: fc.oneof(
        fc.integer({ min: 0, max: 6000 }),
        fc.constantFrom(1, 500, 999, 1000, 2000, 3000, 4000, 5000),
      ),
    }),
  },
);

interface Req {
  id: number;
  rank: number;
  tenant: string;
  requestedAt: number;
  controller: AbortController | undefined;
  tracked: Tracked<SchedulerPermit>;
  /** Queue length of its class just before it arrived (model). */
  queuedBefore: number;
  aborted: boolean;
  released: boolean;
  firstByte: boolean;
  /** Admission order, assigned when the permit is seen. */
  admitSeq: number;
  preemptSeen: boolean;
}

function expectedRank(raw: string | null, tenant: string): number {
  const requested = raw === null ? 1 : (RANK[raw.trim().toLowerCase() as PriorityClass] ?? 1);
  return Math.min(requested, TENANT_MAX[tenant]!);
}

async function runScenario(classes: Record<PriorityClass, ClassGen>, startCapacity: number, ops: Op[]) {
  const clock = new ManualClock();
  const overrides: ClassOverrides = {};
  for (const cls of PRIORITY_CLASSES) overrides[cls] = { ...classes[cls], reserved_per_slot: 0 };
  // Interactive also reserves a share of capacity, so reservations move with setCapacity.
  overrides.interactive = { ...overrides.interactive, reserved_per_slot: 0.25 };
  const floors = classes.system.reserved_floor + classes.interactive.reserved_floor;
  let capacity = Math.max(startCapacity, floors);
  while (floors + Math.ceil(0.25 * capacity) > capacity) capacity++;

  // Observer checks made at the instant of each event.
  let preempting = false;
  let sched: TestScheduler | undefined;
  const violations: string[] = [];
  const timeoutWaits: Array<[PriorityClass, number]> = [];
  const preemptions: Array<[PriorityClass, PriorityClass]> = [];
  const outcomeCounts = new Map<AdmissionOutcome, number>();
  const s = createTestScheduler({
    capacity,
    clock,
    classes: overrides,
    defaultMaxClass: "default",
    tenantPolicies: {
      "t-system": { max_class: "system" },
      "t-interactive": { max_class: "interactive", weight: 2 },
    },
    observer: {
      admission(_cls, outcome) {
        outcomeCounts.set(outcome, (outcomeCounts.get(outcome) ?? 0) + 1);
        if (outcome !== "admitted") return;
        if (preempting) {
          preempting = false; // the slot was handed over: the total did not grow
        } else if (sched!.inflight > sched!.capacity) {
          violations.push(`admitted at inflight ${sched!.inflight} > capacity ${sched!.capacity}`);
        }
      },
      preemption(victim, by) {
        preempting = true;
        preemptions.push([victim, by]);
        if (RANK[victim] >= RANK[by]) violations.push(`preempted ${victim} for ${by}`);
      },
      queueWait(cls, seconds, outcome) {
        if (outcome === "rejected_queue_timeout") timeoutWaits.push([cls, seconds]);
      },
    },
  });
  sched = s;

  const reqs: Req[] = [];
  let admitSeq = 0;
  const pending = () => reqs.filter((r) => r.tracked.state === "pending");
  const held = () =>
    reqs.filter((r) => r.tracked.state === "resolved" && !r.released && !r.tracked.value!.preempted);
  const preemptible = () => held().filter((r) => !r.firstByte);

  /** Records admission order: reactions to the acquire promises run in the order they were granted. */
  const noteAdmission = (r: Req) => {
    r.tracked.promise.then(
      () => {
        r.admitSeq = admitSeq++;
      },
      () => {},
    );
  };

  const checkInvariants = (step: string) => {
    assert.deepEqual(violations, [], step);
    const snap = s.snapshot();
    const now = clock.now();
    const h = held();
    const p = pending();
    assert.equal(snap.inflight, h.length, `${step}: inflight`);
    assert.equal(snap.queued, p.length, `${step}: queued`);
    for (const cls of PRIORITY_CLASSES) {
      const rank = RANK[cls];
      const c = snap.classes[cls];
      const waiting = p.filter((r) => r.rank === rank);
      assert.equal(c.inflight, h.filter((r) => r.rank === rank).length, `${step}: ${cls} inflight`);
      assert.equal(c.queued, waiting.length, `${step}: ${cls} queued`);
      assert.ok(c.queued <= classes[cls].queue_size, `${step}: ${cls} queue over its limit`);
      assert.ok(c.capacityPressure >= 0 && c.capacityPressure <= 1, `${step}: ${cls} pressure`);
      if (waiting.length > 0) {
        // Work conserving: nobody waits while its class could run.
        assert.ok(
          c.headroom <= 0,
          `${step}: ${cls} has ${waiting.length} waiting with headroom ${c.headroom}`,
        );
        const oldest = Math.min(...waiting.map((r) => r.requestedAt));
        assert.ok(
          now - oldest < classes[cls].queue_timeout_secs * 1000,
          `${step}: ${cls} waiter past its timeout`,
        );
        // A starving waiter may see a free slot only while a higher class waits (its promotion
        // credit spent: starvation_max_share).
        const higherWaits = PRIORITY_CLASSES.some((c, r) => r > rank && snap.classes[c].queued > 0);
        if (now - oldest >= classes[cls].starvation_threshold_secs * 1000 && !higherWaits) {
          assert.ok(snap.inflight >= snap.capacity, `${step}: ${cls} waiter starving with a free slot`);
        }
      }
    }
    for (const r of h)
      assert.equal(r.tracked.value!.class, PRIORITY_CLASSES[r.rank], `${step}: permit class`);
    for (const [cls, seconds] of timeoutWaits) {
      assert.equal(seconds, classes[cls].queue_timeout_secs, `${step}: ${cls} timed out after ${seconds}s`);
    }
  };

  for (const [i, op] of ops.entries()) {
    const step = `step ${i} ${JSON.stringify(op)}`;
    const preemptedBefore = reqs.filter((r) => r.tracked.value?.preempted).length;
    const pendingBefore = reqs.filter((r) => r.tracked.state === "pending");
    let arrival: Req | undefined;
    let candidates: Req[] = [];
    switch (op.kind) {
      case "acquire": {
        const tenant = TENANTS[op.tenant]!;
        const raw = op.raw === null ? null : RAW_PRIORITIES[op.raw]!;
        const rank = expectedRank(raw, tenant);
        const controller = op.signal === "none" ? undefined : new AbortController();
        if (op.signal === "aborted") controller!.abort();
        candidates = preemptible().filter((r) => r.rank < rank);
        const queuedBefore = pending().filter((r) => r.rank === rank).length;
        const tracked = track(
          s.acquire({ priority: raw, tenant, cost: op.cost, signal: controller?.signal }),
        );
        arrival = {
          id: reqs.length,
          rank,
          tenant,
          requestedAt: clock.now(),
          controller,
          tracked,
          queuedBefore,
          aborted: op.signal === "aborted",
          released: false,
          firstByte: false,
          admitSeq: -1,
          preemptSeen: false,
        };
        reqs.push(arrival);
        noteAdmission(arrival);
        break;
      }
      case "release": {
        // Any permit not yet released, preempted ones included (their release must be a no-op).
        const all = reqs.filter((r) => r.tracked.state === "resolved" && !r.released);
        if (all.length === 0) break;
        const r = all[op.pick % all.length]!;
        r.released = true;
        r.tracked.value!.release();
        break;
      }
      case "abort": {
        const live = reqs.filter((r) => r.controller !== undefined && !r.aborted);
        if (live.length === 0) break;
        const r = live[op.pick % live.length]!;
        const wasPending = r.tracked.state === "pending";
        const queuedBefore = s.queued;
        r.aborted = true;
        r.controller!.abort();
        // A waiter leaves its queue synchronously; anything else is unaffected.
        assert.equal(s.queued, wasPending ? queuedBefore - 1 : queuedBefore, `${step}: abort`);
        await flush();
        if (wasPending) assert.equal((r.tracked.error as AdmissionError).code, "scheduler_client_cancelled");
        break;
      }
      case "firstByte": {
        const all = reqs.filter((r) => r.tracked.state === "resolved" && !r.released && !r.firstByte);
        if (all.length === 0) break;
        const r = all[op.pick % all.length]!;
        const permit = r.tracked.value!;
        const won = permit.markFirstByte();
        assert.equal(won, !permit.preempted, `${step}: markFirstByte`);
        if (won) r.firstByte = true;
        break;
      }
      case "capacity":
        s.setCapacity(op.value);
        break;
      case "advance":
        clock.advance(op.ms);
        break;
    }
    await flush();

    // Preemption: only an arrival preempts, exactly one victim, chosen by the rule.
    const nowPreempted = reqs.filter((r) => r.tracked.value?.preempted && !r.preemptSeen);
    assert.equal(
      reqs.filter((r) => r.tracked.value?.preempted).length - preemptedBefore,
      nowPreempted.length,
      step,
    );
    const atOnce = (rank: number) => {
      const c = classes[PRIORITY_CLASSES[rank]!];
      return c.preempt_after_secs === 0 || c.queue_size === 0;
    };
    if (nowPreempted.length > 0 && op.kind === "advance") {
      // Waiters that reached their class's wait target took victims' slots: each victim had no
      // first byte (the observer checked the classes), each preemptor waited its target.
      for (const victim of nowPreempted) {
        victim.preemptSeen = true;
        assert.equal(victim.firstByte, false, `${step}: victim past its first byte`);
        assert.equal(victim.tracked.value!.markFirstByte(), false);
      }
      // Every victim's slot went to a waiter admitted in this step that reached its target.
      const overdue = pendingBefore.filter((r) => {
        if (r.tracked.state !== "resolved") return false;
        const c = classes[PRIORITY_CLASSES[r.rank]!];
        return c.can_preempt && r.tracked.value!.queueWaitMs >= c.preempt_after_secs * 1000;
      });
      assert.ok(overdue.length >= nowPreempted.length, `${step}: a preemption for no overdue waiter`);
    } else if (nowPreempted.length > 0) {
      assert.equal(op.kind, "acquire", `${step}: preemption outside an arrival or a wait target`);
      assert.ok(
        arrival !== undefined && atOnce(arrival.rank),
        `${step}: an arrival preempted before its wait target`,
      );
      assert.equal(nowPreempted.length, 1, `${step}: more than one victim`);
      const victim = nowPreempted[0]!;
      victim.preemptSeen = true;
      assert.ok(
        arrival !== undefined && arrival.tracked.state === "resolved",
        `${step}: preemptor not admitted`,
      );
      assert.equal(victim.firstByte, false, `${step}: victim past its first byte`);
      const lowest = Math.min(...candidates.map((r) => r.rank));
      assert.equal(victim.rank, lowest, `${step}: victim not of the lowest class`);
      const newest = Math.max(...candidates.filter((r) => r.rank === lowest).map((r) => r.admitSeq));
      assert.equal(victim.admitSeq, newest, `${step}: victim not the most recently admitted`);
      assert.equal(victim.tracked.value!.signal.aborted, true);
      assert.equal(victim.tracked.value!.markFirstByte(), false);
    }
    if (arrival !== undefined) {
      const a = arrival;
      if (a.aborted) {
        assert.equal((a.tracked.error as AdmissionError).code, "scheduler_client_cancelled", step);
      } else if (a.tracked.state === "rejected") {
        // Only a full queue rejects an arrival on the spot.
        assert.equal((a.tracked.error as AdmissionError).code, "scheduler_queue_full", step);
        assert.equal(
          a.queuedBefore,
          classes[PRIORITY_CLASSES[a.rank]!].queue_size,
          `${step}: queue not full`,
        );
      } else if (a.tracked.state === "pending") {
        assert.ok(a.queuedBefore < classes[PRIORITY_CLASSES[a.rank]!].queue_size, step);
      }
    }
    checkInvariants(step);
  }

  // Drain: release everything, then let every waiter be admitted or time out.
  for (let round = 0; round < 200; round++) {
    for (const r of reqs) {
      if (r.tracked.state === "resolved" && !r.released) {
        r.released = true;
        r.tracked.value!.release();
      }
    }
    await flush();
    if (pending().length === 0 && held().length === 0) break;
    if (s.capacity === 0) s.setCapacity(1);
    clock.advance(5000);
    await flush();
  }
  clock.advance(10_000);
  await flush();
  checkInvariants("drained");
  for (const r of reqs)
    assert.equal(r.tracked.settles, 1, `request ${r.id} settled ${r.tracked.settles} times`);
  assert.equal(s.inflight, 0);
  assert.equal(s.queued, 0);
  for (const cls of PRIORITY_CLASSES) assert.equal(s.snapshot().classes[cls].inflight, 0);
  assert.equal(clock.pendingTimers(), 0, "a timer is still armed with nobody waiting");

  // Counters agree with what the callers saw.
  const c = s.counters();
  const sum = (o: AdmissionOutcome) => PRIORITY_CLASSES.reduce((acc, cls) => acc + c.admissions[cls][o], 0);
  const codes = (code: string) =>
    reqs.filter((r) => (r.tracked.error as AdmissionError | undefined)?.code === code);
  assert.equal(sum("admitted"), reqs.filter((r) => r.tracked.state === "resolved").length);
  assert.equal(sum("preempted"), reqs.filter((r) => r.tracked.value?.preempted).length);
  assert.equal(sum("preempted"), preemptions.length);
  assert.equal(sum("rejected_queue_full"), codes("scheduler_queue_full").length);
  assert.equal(sum("rejected_queue_timeout"), codes("scheduler_queue_timeout").length);
  assert.equal(sum("client_cancelled"), codes("scheduler_client_cancelled").length);
  for (const o of ["admitted", "preempted", "rejected_queue_full"] as const) {
    assert.equal(sum(o), outcomeCounts.get(o) ?? 0);
  }
  return reqs.length;
}

describe("scheduler model (fast-check)", () => {
  test("random interleavings keep counts, capacity and queue invariants, and drain without leaks", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          system: classGen(2),
          interactive: classGen(1),
          default: classGen(0),
          bulk: classGen(0),
        }),
        fc.integer({ min: 2, max: 6 }),
        fc.array(opGen, { minLength: 30, maxLength: 80 }),
        async (classes, capacity, ops) => {
          await runScenario(classes, capacity, ops);
        },
      ),
      { numRuns: 250, seed: 20_240_611 },
    );
  });

  test("random interleavings, longer op lists", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          system: classGen(2),
          interactive: classGen(1),
          default: classGen(0),
          bulk: classGen(0),
        }),
        fc.integer({ min: 2, max: 6 }),
        fc.array(opGen, { minLength: 10, maxLength: 60, size: "max" }),
        async (classes, capacity, ops) => {
          await runScenario(classes, capacity, ops);
        },
      ),
      { numRuns: 100, seed: 424_242 },
    );
  });

  test("timing-focused interleavings: small clock steps, reservations that block lower classes", async () => {
    const focusedOp: fc.Arbitrary<Op> = fc.oneof(
      {
        weight: 4,
        arbitrary: fc.record({
          kind: fc.constant("acquire" as const),
          raw: fc.constantFrom(0, 3, 2),
          tenant: fc.constant(0),
          cost: fc.constant(1),
          signal: fc.constantFrom("none" as const, "live" as const),
        }),
      },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant("release" as const), pick: fc.nat() }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant("abort" as const), pick: fc.nat() }) },
      {
        weight: 4,
        arbitrary: fc.record({
          kind: fc.constant("advance" as const),
          ms: fc.integer({ min: 100, max: 1500 }),
        }),
      },
    );
    const focusedClass = (floor: fc.Arbitrary<number>): fc.Arbitrary<ClassGen> =>
      fc.record({
        queue_size: fc.integer({ min: 1, max: 3 }),
        queue_timeout_secs: fc.integer({ min: 4, max: 6 }),
        starvation_threshold_secs: fc.integer({ min: 1, max: 2 }),
        can_preempt: fc.constant(false),
        preempt_after_secs: fc.constant(0),
        reserved_floor: floor,
      });
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          system: focusedClass(fc.integer({ min: 1, max: 2 })),
          interactive: focusedClass(fc.constant(0)),
          default: focusedClass(fc.constant(0)),
          bulk: focusedClass(fc.constant(0)),
        }),
        fc.integer({ min: 2, max: 4 }),
        fc.array(focusedOp, { minLength: 10, maxLength: 40, size: "max" }),
        async (classes, capacity, ops) => {
          await runScenario(classes, capacity, ops);
        },
      ),
      { numRuns: 300, seed: 7 },
    );
  });
});
