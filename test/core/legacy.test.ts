import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  createLegacyLimiter,
  type LegacyLimiterOptions,
  type LegacyPermit,
  LegacyQueueFullError,
  LegacyQueueTimeoutError,
} from "@sluice/scheduler/core/legacy.js";
import { ClientCancelledError, ConfigError, ManualClock } from "../../src/index.js";
import { errorOf, flush, GuardedClock, permitOf, type Tracked, track } from "./helpers.js";

function make(options: Omit<LegacyLimiterOptions, "clock">) {
  const clock = new ManualClock();
  const limiter = createLegacyLimiter({ ...options, clock });
  return { clock, limiter };
}

describe("legacy limiter: concurrency", () => {
  test("-1 is unlimited: everything is admitted at once", async () => {
    const { limiter } = make({ maxConcurrentRequests: -1, queueSize: 0 });
    const permits = await Promise.all(Array.from({ length: 5000 }, () => limiter.acquire()));
    assert.equal(limiter.inflight, 5000);
    assert.equal(limiter.queued, 0);
    assert.ok(permits.every((p) => p.admission === "fast" && p.queueWaitMs === 0));
    for (const p of permits) p.release();
    assert.equal(limiter.inflight, 0);
    assert.equal(limiter.counters().admitted, 5000);
  });

  test("max concurrent is enforced and waiters are admitted in FIFO order", async () => {
    const { clock, limiter } = make({ maxConcurrentRequests: 2, queueSize: 10 });
    const a = await limiter.acquire();
    const b = await limiter.acquire();
    const order: number[] = [];
    const waiters: Tracked<LegacyPermit>[] = [];
    for (let i = 0; i < 5; i++) {
      const t = track(limiter.acquire());
      t.promise.then(() => order.push(i));
      waiters.push(t);
      clock.advance(100);
    }
    await flush();
    assert.equal(limiter.inflight, 2);
    assert.equal(limiter.queued, 5);
    assert.deepEqual(order, []);
    a.release();
    await flush();
    assert.deepEqual(order, [0]);
    const w0 = permitOf(waiters[0]!);
    assert.equal(w0.admission, "queued");
    assert.equal(w0.queueWaitMs, 500);
    b.release();
    w0.release();
    await flush();
    assert.deepEqual(order, [0, 1, 2]);
    assert.equal(limiter.inflight, 2);
    assert.equal(limiter.queued, 2);
    permitOf(waiters[1]!).release();
    permitOf(waiters[2]!).release();
    await flush();
    assert.deepEqual(order, [0, 1, 2, 3, 4]);
    assert.equal(limiter.queued, 0);
  });

  test("release is idempotent", async () => {
    const { limiter } = make({ maxConcurrentRequests: 1, queueSize: 5 });
    const a = await limiter.acquire();
    const w1 = track(limiter.acquire());
    const w2 = track(limiter.acquire());
    a.release();
    a.release();
    await flush();
    assert.equal(w1.state, "resolved");
    assert.equal(w2.state, "pending");
    assert.equal(limiter.inflight, 1);
  });

  test("a full queue rejects with 429 admission_queue_full and Retry-After", async () => {
    const { limiter } = make({ maxConcurrentRequests: 1, queueSize: 2 });
    const holder = await limiter.acquire();
    const w1 = track(limiter.acquire());
    track(limiter.acquire());
    const w3 = track(limiter.acquire());
    await flush();
    const err = errorOf(w3);
    assert.ok(err instanceof LegacyQueueFullError);
    assert.equal(err.code, "admission_queue_full");
    assert.equal("status" in err, false, "a core error carries a reason, not an HTTP status");
    assert.equal(err.retryAfterSecs, 1);
    assert.equal(limiter.queued, 2);
    assert.equal(limiter.counters().rejectedQueueFull, 1);
    holder.release();
    await flush();
    assert.equal(w1.state, "resolved");
    // w1 left the queue: one place is free.
    const w4 = track(limiter.acquire());
    await flush();
    assert.equal(w4.state, "pending");
    assert.equal(limiter.queued, 2);
  });

  test("the default queue holds 100 waiters", async () => {
    const { limiter } = make({ maxConcurrentRequests: 1 });
    await limiter.acquire();
    const waiters = Array.from({ length: 101 }, () => track(limiter.acquire()));
    await flush();
    assert.equal(limiter.queued, 100);
    assert.equal(errorOf(waiters[100]!).code, "admission_queue_full");
  });

  test("a waiter times out with 408 admission_queue_timeout at exactly queueTimeoutSecs", async () => {
    const { clock, limiter } = make({ maxConcurrentRequests: 1, queueSize: 5, queueTimeoutSecs: 5 });
    await limiter.acquire();
    const w1 = track(limiter.acquire());
    clock.advance(2000);
    const w2 = track(limiter.acquire());
    clock.advance(2999); // t = 4999
    await flush();
    assert.equal(w1.state, "pending");
    clock.advance(1); // t = 5000
    await flush();
    const err = errorOf(w1);
    assert.ok(err instanceof LegacyQueueTimeoutError);
    assert.equal(err.code, "admission_queue_timeout");
    assert.equal(err.retryAfterSecs, 1);
    assert.equal(w2.state, "pending");
    assert.equal(limiter.queued, 1);
    clock.advance(1999); // t = 6999
    await flush();
    assert.equal(w2.state, "pending");
    clock.advance(1); // t = 7000
    await flush();
    assert.equal(errorOf(w2).code, "admission_queue_timeout");
    assert.equal(limiter.queued, 0);
    assert.equal(limiter.counters().rejectedQueueTimeout, 2);
  });

  test("the default queue timeout is 60 s", async () => {
    const { clock, limiter } = make({ maxConcurrentRequests: 1 });
    await limiter.acquire();
    const w = track(limiter.acquire());
    clock.advance(59_999);
    await flush();
    assert.equal(w.state, "pending");
    clock.advance(1);
    await flush();
    assert.equal(errorOf(w).code, "admission_queue_timeout");
  });

  test("an aborted waiter leaves the queue at once with 499 and is skipped", async () => {
    const { limiter } = make({ maxConcurrentRequests: 1, queueSize: 2 });
    const holder = await limiter.acquire();
    const ac = new AbortController();
    const w1 = track(limiter.acquire({ signal: ac.signal }));
    const w2 = track(limiter.acquire());
    ac.abort();
    assert.equal(limiter.queued, 1);
    const w3 = track(limiter.acquire()); // the freed place
    await flush();
    const err = errorOf(w1);
    assert.ok(err instanceof ClientCancelledError);
    assert.equal(err.code, "admission_client_cancelled");
    assert.equal(w3.state, "pending");
    assert.equal(limiter.counters().clientCancelled, 1);
    holder.release();
    await flush();
    assert.equal(w2.state, "resolved");
    assert.equal(w3.state, "pending");
  });

  test("an already-aborted signal rejects at once", async () => {
    const { limiter } = make({ maxConcurrentRequests: 4 });
    const ac = new AbortController();
    ac.abort();
    await assert.rejects(limiter.acquire({ signal: ac.signal }), {
      code: "admission_client_cancelled",
    });
    assert.equal(limiter.inflight, 0);
  });
});

describe("legacy limiter: token bucket", () => {
  test("waiters are admitted as tokens arrive, without any release", async () => {
    // 2 tokens/s, burst = max concurrent = 4.
    const { clock, limiter } = make({ maxConcurrentRequests: 4, rateLimitTokensPerSecond: 2, queueSize: 10 });
    const first = await Promise.all([limiter.acquire(), limiter.acquire()]);
    assert.equal(first.length, 2);
    const more = [track(limiter.acquire()), track(limiter.acquire())];
    await flush();
    assert.deepEqual(
      more.map((t) => t.state),
      ["resolved", "resolved"],
    );
    // The bucket is empty; concurrency allows 4 but release nothing: only tokens gate now.
    for (const p of first) p.release();
    const w1 = track(limiter.acquire());
    const w2 = track(limiter.acquire());
    await flush();
    assert.deepEqual([w1.state, w2.state], ["pending", "pending"]);
    clock.advance(499);
    await flush();
    assert.equal(w1.state, "pending");
    clock.advance(1); // one token at 500 ms
    await flush();
    assert.deepEqual([w1.state, w2.state], ["resolved", "pending"]);
    clock.advance(500);
    await flush();
    assert.equal(w2.state, "resolved");
    assert.equal(permitOf(w2).queueWaitMs, 1000);
    assert.equal(limiter.inflight, 4);
  });

  test("the bucket refills up to the burst only", async () => {
    // Unlimited concurrency, 2 tokens/s: the burst is 2.
    const { clock, limiter } = make({
      maxConcurrentRequests: -1,
      rateLimitTokensPerSecond: 2,
      queueSize: 10,
    });
    await Promise.all([limiter.acquire(), limiter.acquire()]);
    const blocked = track(limiter.acquire());
    await flush();
    assert.equal(blocked.state, "pending");
    clock.advance(500);
    await flush();
    assert.equal(blocked.state, "resolved");
    clock.advance(60_000); // far more than the burst's worth of time
    const again = Array.from({ length: 3 }, () => track(limiter.acquire()));
    await flush();
    assert.deepEqual(
      again.map((t) => t.state),
      ["resolved", "resolved", "pending"],
    );
    clock.advance(499);
    await flush();
    assert.equal(again[2]!.state, "pending");
    clock.advance(1);
    await flush();
    assert.equal(again[2]!.state, "resolved");
    assert.equal(limiter.inflight, 6);
  });

  test("with unlimited concurrency the burst is the rate", async () => {
    const { clock, limiter } = make({
      maxConcurrentRequests: -1,
      rateLimitTokensPerSecond: 3,
      queueSize: 10,
    });
    const ts = Array.from({ length: 5 }, () => track(limiter.acquire()));
    await flush();
    assert.deepEqual(
      ts.map((t) => t.state),
      ["resolved", "resolved", "resolved", "pending", "pending"],
    );
    clock.advance(1000);
    await flush();
    assert.deepEqual(
      ts.map((t) => t.state),
      ["resolved", "resolved", "resolved", "resolved", "resolved"],
    );
  });

  test("a rate-limited waiter still times out when no token arrives in time", async () => {
    const { clock, limiter } = make({
      maxConcurrentRequests: 1,
      rateLimitTokensPerSecond: 0.1, // one token per 10 s
      queueSize: 10,
      queueTimeoutSecs: 2,
    });
    const p = await limiter.acquire();
    p.release();
    const w = track(limiter.acquire());
    clock.advance(2000);
    await flush();
    assert.equal(errorOf(w).code, "admission_queue_timeout");
  });
});

describe("legacy limiter: configuration errors name the key", () => {
  function configError(options: LegacyLimiterOptions): string {
    try {
      createLegacyLimiter(options);
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      return err.message;
    }
    assert.fail("expected a ConfigError");
  }

  test("each invalid value is reported with its key", () => {
    assert.equal(
      configError({ maxConcurrentRequests: 0 }),
      "max_concurrent_requests: must be -1 (unlimited) or an integer >= 1, got 0",
    );
    assert.match(configError({ maxConcurrentRequests: -2 }), /^max_concurrent_requests: /);
    assert.match(configError({ maxConcurrentRequests: 1.5 }), /^max_concurrent_requests: /);
    assert.equal(
      configError({ maxConcurrentRequests: 1, queueSize: -1 }),
      "queue_size: must be an integer >= 0, got -1",
    );
    assert.equal(
      configError({ maxConcurrentRequests: 1, queueTimeoutSecs: 0 }),
      "queue_timeout_secs: must be > 0, got 0",
    );
    for (const rate of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.match(
        configError({ maxConcurrentRequests: 1, rateLimitTokensPerSecond: rate }),
        /^rate_limit_tokens_per_second: must be a number > 0/,
      );
    }
  });
});

describe("legacy queue timeout on a fractional instant", () => {
  test("a deadline whose float sum rounds down fires once, not forever", async () => {
    const clock = new GuardedClock();
    const limiter = createLegacyLimiter({ maxConcurrentRequests: 1, queueTimeoutSecs: 2, clock });
    const holder = await limiter.acquire();
    clock.advance(48.2); // (48.2 + 2000) - 48.2 === 1999.9999999999998 < 2000
    const w = track(limiter.acquire());
    clock.advance(2000);
    await flush();
    assert.equal(w.state, "rejected");
    assert.ok(clock.fired <= 2, `fired ${clock.fired} timers`);
    holder.release();
  });
});

describe("legacy limiter: a capacity bound (adaptive capacity with the scheduler off)", () => {
  test("the bound and max_concurrent_requests: the lower binds; a lower bound drains, a higher one admits", async () => {
    const { limiter } = make({ maxConcurrentRequests: -1, queueSize: 10 });
    limiter.setBound(3);
    assert.equal(limiter.limit, 3);
    const running = await Promise.all([limiter.acquire(), limiter.acquire(), limiter.acquire()]);
    const fourth = track(limiter.acquire());
    await flush();
    assert.equal(fourth.state, "pending", "the bound holds the fourth in the queue");
    assert.equal(limiter.queued, 1);
    // Lowered under what runs: nothing is cut, and the queue waits until the count is under it.
    limiter.setBound(1);
    running[0]!.release();
    running[1]!.release();
    await flush();
    assert.equal(fourth.state, "pending", "1 running, bound 1");
    running[2]!.release();
    await flush();
    assert.equal(fourth.state, "resolved");
    // Raised: waiters go in at once, up to the new bound.
    const more = Array.from({ length: 3 }, () => track(limiter.acquire()));
    await flush();
    assert.deepEqual(
      more.map((m) => m.state),
      ["pending", "pending", "pending"],
    );
    limiter.setBound(3);
    await flush();
    assert.deepEqual(
      more.map((m) => m.state),
      ["resolved", "resolved", "pending"],
    );
    // Under max_concurrent_requests the lower of the two binds; undefined lifts the bound.
    const capped = make({ maxConcurrentRequests: 2, queueSize: 10 }).limiter;
    capped.setBound(5);
    assert.equal(capped.limit, 2);
    capped.setBound(1);
    assert.equal(capped.limit, 1);
    capped.setBound(undefined);
    assert.equal(capped.limit, 2);
    limiter.setBound(undefined);
    await flush();
    assert.equal(more[2]!.state, "resolved");
    assert.equal(limiter.limit, Number.POSITIVE_INFINITY);
  });
});
