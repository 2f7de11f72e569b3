/**
 * The circuit breaker, pure, on a manual clock: it opens on consecutive failures and on an error
 * ratio over its window, half-opens after the cooldown with a bounded number of trials, closes on
 * one success and reopens on a failed trial; refused connections and health checks agree with it.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { CircuitBreaker } from "../../src/routing/circuit-breaker.js";
import { type BreakerOptions, DEFAULT_BREAKER } from "../../src/routing/options.js";

function breaker(options: Partial<BreakerOptions> = {}) {
  const clock = new ManualClock(1_000_000);
  return { clock, b: new CircuitBreaker({ ...DEFAULT_BREAKER, ...options }, clock) };
}

describe("circuit breaker", () => {
  test("opens on N consecutive failures; a success in between starts the count again", () => {
    const { b } = breaker({ failures: 3, errorRatio: 0 });
    assert.equal(b.recordFailure(), false);
    assert.equal(b.recordFailure(), false);
    assert.equal(b.recordSuccess(), false);
    assert.equal(b.recordFailure(), false);
    assert.equal(b.recordFailure(), false);
    assert.equal(b.state, "closed");
    assert.equal(b.recordFailure(), true);
    assert.equal(b.state, "open");
    assert.equal(b.openReason, "failures");
    assert.equal(b.admits(0), false);
    assert.equal(b.capacityOf(64), 0);
  });

  test("opens, half-opens after the cooldown with a few trials, closes on one success", () => {
    const { clock, b } = breaker({ failures: 2, errorRatio: 0, cooldownSecs: 30, halfOpenRequests: 2 });
    b.recordFailure();
    b.recordFailure();
    assert.equal(b.state, "open");
    assert.equal(b.cooldownEndsAt, clock.now() + 30_000);
    clock.advance(29_999);
    assert.equal(b.state, "open");
    assert.equal(b.admits(0), false);
    clock.advance(1);
    assert.equal(b.state, "half_open");
    assert.equal(b.cooldownEndsAt, undefined);
    // Two trial requests in flight at most; the worker's capacity is theirs meanwhile.
    assert.equal(b.admits(0), true);
    assert.equal(b.admits(1), true);
    assert.equal(b.admits(2), false);
    assert.equal(b.capacityOf(64), 2);
    assert.equal(b.capacityOf(1), 1);
    assert.equal(b.recordSuccess(), true);
    assert.equal(b.state, "closed");
    assert.equal(b.admits(500), true);
    assert.equal(b.capacityOf(64), 64);
    // Closed afresh: the failures before it do not count.
    assert.equal(b.recordFailure(), false);
    assert.equal(b.state, "closed");
  });

  test("a failed trial opens it again for a new cooldown", () => {
    const { clock, b } = breaker({ failures: 1, errorRatio: 0, cooldownSecs: 10 });
    b.recordFailure();
    clock.advance(10_000);
    assert.equal(b.state, "half_open");
    assert.equal(b.recordFailure(), true);
    assert.equal(b.state, "open");
    assert.equal(b.openReason, "trial_failed");
    clock.advance(9_000);
    assert.equal(b.state, "open");
    clock.advance(1_000);
    assert.equal(b.state, "half_open");
  });

  test("opens on the error ratio over the window, once the window holds enough requests", () => {
    const { clock, b } = breaker({
      failures: 0,
      errorRatio: 0.5,
      windowSecs: 10,
      minRequests: 10,
      cooldownSecs: 10,
    });
    // Alternate: 50% errors, but fewer than 10 requests until the 10th.
    for (let i = 0; i < 4; i++) {
      assert.equal(b.recordSuccess(), false);
      assert.equal(b.recordFailure(), false);
    }
    assert.equal(b.recordSuccess(), false); // 9 requests, 4 failed
    assert.equal(b.recordFailure(), true); // 10 requests, 5 failed: 0.5
    assert.equal(b.openReason, "error_ratio");
    // Closed afresh, old outcomes slide out of the window: 5 failures now, 10 successes 11 s later.
    clock.advance(20_000);
    b.recordSuccess(); // half-open -> closed
    for (let i = 0; i < 5; i++) b.recordFailure();
    clock.advance(11_000);
    for (let i = 0; i < 9; i++) assert.equal(b.recordSuccess(), false);
    assert.equal(b.recordFailure(), false, "1 failure in 10 inside the window");
    assert.equal(b.state, "closed");
  });

  test("both rules off: failures never open it; a refused connection still does", () => {
    const { b } = breaker({ failures: 0, errorRatio: 0 });
    for (let i = 0; i < 100; i++) assert.equal(b.recordFailure(), false);
    assert.equal(b.state, "closed");
    assert.equal(b.tripUnreachable(), true);
    assert.equal(b.state, "open");
    assert.equal(b.tripUnreachable(), false, "already open");
  });

  test("a refused connection opens at once; a passing health check closes it before the cooldown", () => {
    const { clock, b } = breaker({ cooldownSecs: 60 });
    b.tripUnreachable();
    assert.equal(b.openReason, "unreachable");
    clock.advance(1_000);
    assert.equal(b.checkPassed(true), true);
    assert.equal(b.state, "closed");
    // Without a check, the cooldown's trials decide, as for any other opening.
    b.tripUnreachable();
    clock.advance(60_000);
    assert.equal(b.state, "half_open");
    b.recordSuccess();
    assert.equal(b.state, "closed");
  });

  test("health checks hold it open, however long; they close it when they put the worker back", () => {
    const { clock, b } = breaker({ failures: 2, errorRatio: 0, cooldownSecs: 1 });
    assert.equal(b.hold(), true);
    assert.equal(b.hold(), false, "already held");
    assert.equal(b.openReason, "health_check");
    assert.equal(b.cooldownEndsAt, undefined);
    clock.advance(3_600_000);
    assert.equal(b.state, "open", "no cooldown ends a hold");
    assert.equal(b.checkPassed(false), false, "one check passed, the worker not back yet");
    assert.equal(b.state, "open");
    assert.equal(b.checkPassed(true), true);
    assert.equal(b.state, "closed");
  });

  test("failed requests are the breaker's: a passing health check does not cut their cooldown", () => {
    const { clock, b } = breaker({ failures: 1, errorRatio: 0, cooldownSecs: 5 });
    b.recordFailure();
    assert.equal(b.checkPassed(true), false);
    assert.equal(b.state, "open");
    clock.advance(5_000);
    assert.equal(b.state, "half_open");
    assert.equal(b.checkPassed(true), false);
    assert.equal(b.state, "half_open");
    // A success that was under way when the circuit opened says nothing new.
    const c = breaker({ failures: 1, errorRatio: 0 });
    c.b.recordFailure();
    assert.equal(c.b.recordSuccess(), false);
    assert.equal(c.b.state, "open");
  });
});
