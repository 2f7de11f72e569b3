/**
 * The worker's per-request engine figures (issue 39): time queued inside the worker, from arrival
 * to the running batch plus every stretch back in the queue after a KV preemption, and the
 * preemptions themselves, against hand-computed timings.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { EventQueue, SimClock } from "../../src/sim/clock.js";
import type { WorkerProfile } from "../../src/sim/profiles.js";
import { Job, Worker } from "../../src/sim/worker.js";

const base: WorkerProfile = {
  beta0: 1000, // 1 ms per iteration
  beta1: 10, // 0.01 ms per prefill token
  beta2: 100, // 0.1 ms per decode token
  maxRunning: 8,
  kvTokens: 100_000,
  maxBatchedTokens: 1000,
  kvPolicy: "recompute",
};

function harness(profile: Partial<WorkerProfile> = {}) {
  const queue = new EventQueue();
  const clock = new SimClock(queue, 0);
  const done = new Map<string, number>();
  const worker = new Worker(0, "w0", { ...base, ...profile }, clock, {
    firstToken: () => {},
    finished: (job, t) => done.set(job.ref as string, t),
    failed: () => {},
  });
  const run = (until = Number.POSITIVE_INFINITY) => {
    for (let ev = queue.pop(); ev !== undefined; ev = queue.pop()) {
      if (ev.t > until) {
        queue.schedule(ev.t, ev.fn);
        break;
      }
      clock.current = ev.t;
      ev.fn();
    }
  };
  const at = (t: number, fn: () => void) => queue.schedule(t, fn);
  return { worker, clock, done, run, at };
}

const close = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-6, `${a} != ${b}`);

test("a request reaching an idle worker is scheduled at once: no engine queue time", () => {
  const h = harness();
  const a = new Job(500, 10, 10, "a");
  h.worker.submit(a);
  h.run();
  close(a.engineQueueMs(h.clock.now()), 0);
  assert.equal(a.preemptions, 0);
});

test("a request arriving mid-iteration waits for the iteration in progress", () => {
  const h = harness();
  const a = new Job(100, 100, 100, "a"); // prefill 2 ms, then 1.1 ms decode steps
  const b = new Job(100, 2, 2, "b");
  h.worker.submit(a);
  h.at(2.5, () => h.worker.submit(b));
  h.run();
  // a's first decode iteration runs 2 .. 3.1; b joins the batch at its end
  close(b.engineQueueMs(h.clock.now()), 0.6);
  close(a.engineQueueMs(h.clock.now()), 0);
});

test("past max_running the rest waits in the worker until a place frees", () => {
  const h = harness({ maxRunning: 1 });
  const a = new Job(100, 3, 3, "a");
  const b = new Job(100, 3, 3, "b");
  h.worker.submit(a);
  h.worker.submit(b);
  h.run(3);
  // still waiting: the open stretch counts up to the time asked about
  close(b.engineQueueMs(3), 3);
  h.run();
  // a: prefill 2 ms, two decode steps of 1.1 ms; b joins when it leaves
  close(h.done.get("a")!, 4.2);
  close(b.engineQueueMs(h.clock.now()), 4.2);
  close(a.engineQueueMs(h.clock.now()), 0);
});

test("a request taken off the worker while queued stops counting then", () => {
  const h = harness({ maxRunning: 1 });
  const a = new Job(100, 50, 50, "a");
  const b = new Job(100, 3, 3, "b");
  h.worker.submit(a);
  h.worker.submit(b);
  h.at(1.5, () => h.worker.abort(b));
  h.run();
  close(b.engineQueueMs(h.clock.now()), 1.5);
});

test("a KV preemption sends the request back to the queue: its time there and the preemption count", () => {
  const h = harness({ kvTokens: 250 });
  const a = new Job(100, 60, 60, "a");
  const b = new Job(100, 60, 60, "b");
  h.worker.submit(a);
  h.worker.submit(b);
  h.run();
  assert.equal(h.done.size, 2);
  // the newest (b) is the victim; a keeps its place
  assert.equal(a.preemptions, 0);
  close(a.engineQueueMs(h.clock.now()), 0);
  // b reached the worker during a's first iteration (a 2 ms prefill) and waited for its end; it
  // is the victim of every preemption, and its stretches back in the queue count too
  assert.equal(b.preemptions, h.worker.stats.kvPreemptions);
  assert.ok(b.preemptions >= 1);
  const queued = b.engineQueueMs(h.clock.now());
  assert.ok(queued > 2, `${queued}`);
  // it never waits past a's end: a's KV leaving makes room for it
  assert.ok(queued - 2 < h.done.get("a")!);
});
