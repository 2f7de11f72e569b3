/**
 * Admitted requests say how they were admitted: `X-Sluice-Admission: fast` with
 * `X-Sluice-Queue-Wait-Ms: 0` when a slot was free, `queued` with the milliseconds waited otherwise.
 * Gateway-made rejections carry neither.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { assertError, assertOk, schedulerDoc, startFleet, waitFor } from "../helpers/harness.js";

describe("admission headers", () => {
  test("fast with 0 ms; queued with the time it waited; on JSON and SSE answers alike", async (t) => {
    const stack = await startFleet(t, {
      workers: [{ maxRunningRequests: 1 }],
      schedulerYaml: schedulerDoc({ classes: { default: { queue_size: 1 } } }),
    });

    const fast = await stack.chatAs(undefined);
    assertOk(fast);
    assert.equal(fast.headers["x-sluice-admission"], "fast");
    assert.equal(fast.headers["x-sluice-queue-wait-ms"], "0");
    const fastStream = await stack.chatAs(undefined, { stream: true });
    assertOk(fastStream);
    assert.equal(fastStream.headers["x-sluice-admission"], "fast");
    assert.equal(fastStream.headers["x-sluice-queue-wait-ms"], "0");

    // The only slot is busy for ~300 ms; the next request waits for it.
    const holder = stack.holdAs(undefined, {}, { "x-mock-ttft-ms": "300" });
    await waitFor(() => stack.workers[0]!.stats().running === 1, "the slot is taken");
    const sentAt = performance.now();
    const waiting = stack.chatAs(undefined, { stream: true });
    await waitFor(() => stack.snapshot().classes.default.queued === 1, "the second request queued");
    // A rejection is the gateway's own answer: no admission headers.
    const full = await stack.chatAs(undefined);
    assertError(full, 429, "scheduler_queue_full");
    assert.equal(full.headers["x-sluice-admission"], undefined);
    assert.equal(full.headers["x-sluice-queue-wait-ms"], undefined);

    const first = await holder.result;
    assertOk(first);
    const queued = await waiting;
    assertOk(queued);
    assert.equal(queued.headers["x-sluice-admission"], "queued");
    const waitMs = Number(queued.headers["x-sluice-queue-wait-ms"]);
    assert.ok(Number.isInteger(waitMs), `an integer: ${queued.headers["x-sluice-queue-wait-ms"]}`);
    // It waited from (just after) sentAt until the holder's slot came free, and never longer than it took.
    assert.ok(
      waitMs >= first.endedAt - sentAt - 100,
      `waited ${waitMs} ms; holder ended ${first.endedAt - sentAt}`,
    );
    assert.ok(waitMs <= queued.endedAt - sentAt, `waited ${waitMs} ms of ${queued.endedAt - sentAt}`);
    assert.ok(waitMs >= 150, `waited ${waitMs} ms for a ~300 ms holder`);
  });
});
