/**
 * The priority scheduler end to end through the gateway: 429 queue full, 408 queue timeout,
 * 503 preemption before the first byte (never after), 499 client gone (queued and mid-stream),
 * starvation promotion, and x-smg-priority parsing. Queue timeouts and starvation run on a ManualClock
 * the test advances; only the workers' answers take real time.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { request } from "undici";
import {
  assertError,
  assertOk,
  chatBody,
  type Fleet,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

/** One worker with a single running slot: gateway capacity 1. */
const ONE_SLOT = [{ maxRunningRequests: 1 }];

async function holdSlot(fleet: Fleet, headers: Record<string, string> = {}) {
  const held = fleet.hold({}, { "x-mock-ttft-ms": "5000", ...headers });
  await waitFor(() => fleet.snapshot().inflight === 1, "the slot is taken");
  await waitFor(() => fleet.workers[0]!.stats().running === 1, "the held request reached the worker");
  return held;
}

describe("gateway scheduler: rejections", () => {
  test("429 scheduler_queue_full when the class queue is at its depth", async (t) => {
    const fleet = await startFleet(t, {
      workers: ONE_SLOT,
      schedulerYaml: smallSchedulerYaml({ classes: { default: { queue_size: 1 } } }),
    });
    assert.equal(fleet.snapshot().capacity, 1);
    const first = await holdSlot(fleet);
    const second = fleet.hold();
    await waitFor(() => fleet.snapshot().classes.default.queued === 1, "the second request queued");

    const third = await fleet.chat();
    assertError(third, 429, "scheduler_queue_full");
    assert.equal(JSON.parse(third.text).error.type, "rate_limit_error");
    assert.equal(third.headers["x-smg-preempted"], undefined);

    await first.cancel();
    const queued = await second.result;
    assertOk(queued);
    assert.equal(queued.headers["x-sluice-admission"], "queued");
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_admit_total", { class: "default", outcome: "rejected_queue_full" }),
      1,
    );
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "default", outcome: "admitted" }), 2);
    assert.equal(metric(s, "sluice_http_requests_total", { status: "429" }), 1);
  });

  test("408 scheduler_queue_timeout after the class's queue_timeout_secs", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: ONE_SLOT,
      schedulerYaml: smallSchedulerYaml({ classes: { default: { queue_timeout_secs: 0.3 } } }),
      gateway: { clock },
    });
    const held = await holdSlot(fleet);
    const pending = fleet.chat();
    await waitFor(() => fleet.snapshot().queued === 1, "the second request queued");
    clock.advance(299);
    assert.equal(fleet.snapshot().queued, 1, "still queued 1 ms before its timeout");
    clock.advance(1);
    const reply = await pending;
    assertError(reply, 408, "scheduler_queue_timeout");
    assert.equal(JSON.parse(reply.text).error.type, "timeout_error");
    assert.equal(fleet.snapshot().queued, 0);
    assert.equal(fleet.snapshot().inflight, 1, "the holder keeps its slot");
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_admit_total", { class: "default", outcome: "rejected_queue_timeout" }),
      1,
    );
    assert.equal(metric(s, "smg_scheduler_queue_wait_seconds_count", { class: "default" }), 2);
    await held.cancel();
  });
});

describe("gateway scheduler: preemption", () => {
  for (const stream of [false, true]) {
    test(`a ${stream ? "streamed" : "plain"} bulk request before its first byte is preempted by interactive: 503`, async (t) => {
      const fleet = await startFleet(t, { workers: ONE_SLOT, schedulerYaml: smallSchedulerYaml() });
      const bulk = fleet.hold({ stream }, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "5000" });
      await waitFor(() => fleet.snapshot().classes.bulk.inflight === 1, "bulk admitted");
      await waitFor(() => fleet.workers[0]!.stats().running === 1, "bulk reached the worker");

      const started = performance.now();
      const interactive = await fleet.chat({}, { "x-smg-priority": "interactive" });
      assertOk(interactive);
      // It waited its class's wait target (preempt_after_secs, 0.25 s by default) for a slot to
      // free, then took the bulk request's.
      assert.equal(interactive.headers["x-sluice-admission"], "queued");
      assert.ok(Number(interactive.headers["x-sluice-queue-wait-ms"]) >= 250);
      assert.ok(performance.now() - started < 2000, "the interactive request did not wait for the bulk one");

      const victim = await bulk.result;
      assertError(victim, 503, "scheduler_preempted");
      assert.ok(!(victim instanceof Error));
      assert.equal(victim.headers["x-smg-preempted"], "true");
      assert.equal(victim.headers["retry-after"], "1");
      assert.equal(JSON.parse(victim.text).error.type, "service_unavailable");

      await waitFor(() => fleet.workers[0]!.stats().aborted === 1, "the bulk upstream request was aborted");
      assert.equal(fleet.snapshot().inflight, 0);
      const s = await fleet.scrape();
      assert.equal(
        metric(s, "smg_scheduler_preemption_total", { victim_class: "bulk", by_class: "interactive" }),
        1,
      );
      assert.equal(metric(s, "smg_scheduler_admit_total", { class: "bulk", outcome: "preempted" }), 1);
      assert.equal(metric(s, "smg_scheduler_admit_total", { class: "interactive", outcome: "admitted" }), 1);
      assert.equal(metric(s, "sluice_http_requests_total", { status: "503" }), 1);
      // The bulk prompt had reached the worker: its prefill is counted as thrown away.
      assert.ok((metric(s, "sluice_preempted_prefill_tokens_total", { class: "bulk" }) ?? 0) > 0);
      assert.equal(metric(s, "sluice_preempted_prefill_tokens_total", { class: "default" }), 0);
    });
  }

  test("a request past its first byte (stream flowing) is never preempted: the interactive one queues", async (t) => {
    const fleet = await startFleet(t, { workers: ONE_SLOT, schedulerYaml: smallSchedulerYaml() });
    const res = await request(`${fleet.url}/v1/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-smg-priority": "bulk",
        "x-mock-ttft-ms": "0",
        "x-mock-token-delay-ms": "30",
      },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 20 })),
    });
    assert.equal(res.statusCode, 200);
    const chunks = res.body[Symbol.asyncIterator]();
    const first = await chunks.next();
    assert.equal(first.done, false);

    const interactive = fleet.chat({}, { "x-smg-priority": "interactive" });
    await waitFor(
      () => fleet.snapshot().classes.interactive.queued === 1,
      "interactive queued behind the stream",
    );
    assert.equal(fleet.snapshot().classes.bulk.inflight, 1);

    let text = (first.value as Buffer).toString("utf8");
    for (let next = await chunks.next(); !next.done; next = await chunks.next()) {
      text += (next.value as Buffer).toString("utf8");
    }
    assert.ok(text.endsWith("data: [DONE]\n\n"), "the bulk stream completed");
    const reply = await interactive;
    assertOk(reply);
    assert.equal(reply.headers["x-sluice-admission"], "queued");
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_preemption_total", { victim_class: "bulk", by_class: "interactive" }),
      0,
    );
    assert.equal(metric(s, "smg_scheduler_admit_total", { class: "bulk", outcome: "preempted" }), 0);
  });

  test("a class without can_preempt queues instead of preempting", async (t) => {
    const fleet = await startFleet(t, {
      workers: ONE_SLOT,
      schedulerYaml: smallSchedulerYaml({ classes: { interactive: { can_preempt: false } } }),
    });
    const bulk = await holdSlot(fleet, { "x-smg-priority": "bulk" });
    const interactive = fleet.hold({}, { "x-smg-priority": "interactive" });
    await waitFor(() => fleet.snapshot().classes.interactive.queued === 1, "interactive queued");
    assert.equal(fleet.gateway.admission.counters()!.preemptions.bulk.interactive, 0);
    await bulk.cancel();
    const reply = await interactive.result;
    assertOk(reply);
    assert.equal(reply.headers["x-sluice-admission"], "queued");
  });
});

describe("gateway scheduler: client gone (499)", () => {
  test("a client that disconnects while queued leaves the queue at once", async (t) => {
    const fleet = await startFleet(t, { workers: ONE_SLOT, schedulerYaml: smallSchedulerYaml() });
    const held = await holdSlot(fleet);
    const queued = fleet.hold();
    await waitFor(() => fleet.snapshot().queued === 1, "the second request queued");

    const started = performance.now();
    await queued.cancel();
    await waitFor(() => fleet.snapshot().queued === 0, "the queue emptied", {
      timeoutMs: 1000,
      intervalMs: 1,
    });
    const left = performance.now() - started;
    assert.ok(left < 1000, `left the queue promptly (${Math.round(left)} ms; the queue timeout is 60 s)`);

    assert.equal(fleet.snapshot().inflight, 1);
    assert.equal(
      fleet.workers[0]!.stats().totalRequests,
      1,
      "the cancelled request never reached the worker",
    );
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_admit_total", { class: "default", outcome: "client_cancelled" }),
      1,
    );
    await waitFor(async () => {
      const again = await fleet.scrape();
      return metric(again, "sluice_http_requests_total", { status: "499" }) === 1;
    }, "the 499 was counted");
    await held.cancel();
    await waitFor(() => fleet.snapshot().inflight === 0, "the held slot freed");
  });

  test("a client that disconnects mid-stream aborts the upstream request and frees its slot", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    const controller = new AbortController();
    const res = await request(`${fleet.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-mock-ttft-ms": "0", "x-mock-token-delay-ms": "30" },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 200 })),
      signal: controller.signal,
    });
    assert.equal(res.statusCode, 200);
    let chunks = 0;
    await assert.rejects(async () => {
      for await (const _ of res.body) {
        chunks++;
        if (chunks === 2) controller.abort();
      }
    });
    assert.equal(fleet.snapshot().inflight <= 1, true);
    await waitFor(
      () => worker.stats().aborted === 1 && worker.stats().running === 0,
      "upstream request aborted",
    );
    assert.equal(worker.stats().completed, 0);
    await waitFor(() => fleet.snapshot().inflight === 0, "slot freed");
    assert.equal(fleet.snapshot().classes.default.inflight, 0);
    // The freed slot is usable.
    assertOk(await fleet.chat());
  });
});

describe("gateway scheduler: starvation and header parsing", () => {
  test("a starving bulk request is admitted via promotion while interactive traffic keeps the slot busy", async (t) => {
    const clock = new ManualClock();
    const fleet = await startFleet(t, {
      workers: ONE_SLOT,
      schedulerYaml: smallSchedulerYaml({
        classes: {
          bulk: { starvation_threshold_secs: 0.3, queue_timeout_secs: 30 },
          interactive: { can_preempt: false },
        },
      }),
      gateway: { clock },
    });
    let stop = false;
    const deadline = performance.now() + 5000; // never spin forever, even if promotion is broken
    const interactiveLoop = async () => {
      let served = 0;
      while (!stop && performance.now() < deadline) {
        const r = await fleet.chat(
          { max_tokens: 1 },
          { "x-smg-priority": "interactive", "x-mock-ttft-ms": "40" },
        );
        assertOk(r);
        served++;
      }
      return served;
    };
    const loopA = interactiveLoop();
    await waitFor(() => fleet.snapshot().classes.interactive.inflight === 1, "interactive holds the slot");
    const loopB = interactiveLoop();
    await waitFor(
      () => fleet.snapshot().classes.interactive.queued === 1,
      "a second interactive request waits",
    );

    const pending = fleet.chat({ max_tokens: 1 }, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "0" });
    await waitFor(() => fleet.snapshot().classes.bulk.queued === 1, "bulk queued behind interactive");
    const admitted = () => fleet.gateway.admission.counters()!.admissions.interactive.admitted;
    const servedWhileQueued = admitted() + 3;
    await waitFor(() => admitted() >= servedWhileQueued, "interactive traffic passes the queued bulk");
    assert.equal(fleet.snapshot().classes.bulk.queued, 1, "bulk is not served before it starves");
    clock.advance(300);
    const bulk = await pending;
    const servedBeforeStop = fleet.gateway.admission.counters()!.admissions.interactive.admitted;
    stop = true;
    await Promise.all([loopA, loopB]);

    assertOk(bulk);
    assert.equal(bulk.headers["x-sluice-admission"], "queued");
    const waitedMs = Number(bulk.headers["x-sluice-queue-wait-ms"]);
    assert.ok(waitedMs >= 280, `bulk waited about its starvation threshold (${waitedMs} ms)`);
    assert.ok(servedBeforeStop >= 3, `interactive traffic kept flowing meanwhile (${servedBeforeStop})`);
    const s = await fleet.scrape();
    const promoted = metric(s, "smg_scheduler_starvation_promotion_total", { class: "bulk" }) ?? 0;
    assert.ok(promoted >= 1, `bulk promoted (${promoted})`);
    assert.equal(metric(s, "smg_scheduler_starvation_promotion_total", { class: "interactive" }), 0);
  });

  test("x-smg-priority is case-insensitive and trimmed; unknown values degrade to default and are counted", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 8 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    const cases: Array<[string, "system" | "interactive" | "default" | "bulk"]> = [
      ["  INTERACTIVE ", "interactive"],
      ["Bulk", "bulk"],
      ["SyStEm", "system"],
      ["urgent", "default"],
      ["", "default"],
    ];
    const held = [];
    for (const [value, cls] of cases) {
      const before = fleet.snapshot().classes[cls].inflight;
      held.push(fleet.hold({}, { "x-smg-priority": value, "x-mock-ttft-ms": "5000" }));
      await waitFor(
        () => fleet.snapshot().classes[cls].inflight === before + 1,
        `"${value}" admitted as ${cls}`,
      );
    }
    await Promise.all(held.map((h) => h.cancel()));
    const s = await fleet.scrape();
    assert.equal(metric(s, "smg_scheduler_unknown_priority_value_total", { tenant: "anonymous" }), 2);
  });
});
