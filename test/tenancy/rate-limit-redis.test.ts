/**
 * requests_per_minute and the rate-limit headers in Redis mode, across two replicas started as the
 * `sluice` command: the request bucket holds fleet-wide (the fifth request in the minute is refused
 * on whichever replica it lands, with the bucket's refill as Retry-After), a used-up term budget's
 * 403 says when the period ends, and `--no-rate-limit-headers` turns the headers off on its replica
 * only, Retry-After staying.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { startRedisFleet } from "../admission/fleet.js";
import { chat, redisOrSkip } from "../admission/services.js";
import { assertError, authFor, keyOf, type Reply, smallSchedulerYaml } from "../helpers/harness.js";

function reply(r: Reply | Error): Reply {
  assert.ok(!(r instanceof Error), `transport error: ${r instanceof Error ? r.message : ""}`);
  return r;
}

test("requests_per_minute holds across replicas; 429 and 403 carry Retry-After; the flag turns headers off", {
  timeout: 60_000,
}, async (t) => {
  const url = await redisOrSkip(t);
  if (url === undefined) return;
  const f = await startRedisFleet(t, {
    redisUrl: url,
    workers: [{ maxRunningRequests: 16, ttftMs: 2, tokenDelayMs: 1, batchSlowdown: 0 }],
    replicas: 2,
    schedulerYaml: smallSchedulerYaml({
      tenant_policies: {
        "auth:acme": { requests_per_minute: 4 },
        "auth:thrifty": { budget_tokens: 10, budget_period: "day" },
      },
    }),
    apiKeys: { acme: keyOf("acme"), thrifty: keyOf("thrifty") },
    // The second replica sends no rate-limit headers.
    replicaFlags: (i) => (i === 1 ? ["--no-rate-limit-headers"] : []),
  });
  const [first, second] = f.replicas as [(typeof f.replicas)[0], (typeof f.replicas)[0]];

  // Four requests, alternating replicas, fill the one fleet-wide bucket.
  for (let i = 0; i < 4; i++) {
    const r = reply(await chat(i % 2 === 0 ? first : second, authFor("acme")));
    assert.equal(r.status, 200, r.text);
    if (i % 2 === 0) {
      assert.equal(r.headers["x-ratelimit-limit-requests"], "4");
      // The replica counts its own reservation at once; the other replica's by its next refresh.
      assert.match(String(r.headers["x-ratelimit-remaining-requests"]), i === 0 ? /^3$/ : /^[12]$/);
      assert.match(String(r.headers["x-ratelimit-reset-requests"]), /^(0s|\d+ms|[\d.]+s)$/);
      // No tokens_per_minute: no tokens pair.
      assert.equal(r.headers["x-ratelimit-limit-tokens"], undefined);
    } else {
      assert.equal(r.headers["x-ratelimit-limit-requests"], undefined);
    }
    assert.equal(r.headers["x-sluice-class"], "default");
  }
  for (const replica of [first, second]) {
    const refused = reply(await chat(replica, authFor("acme")));
    assertError(refused, 429, "request_rate_exceeded", "rate_limit_error");
    // Less than one request left at 4 a minute: at most 15 s to the next.
    const after = Number(refused.headers["retry-after"]);
    assert.ok(after >= 1 && after <= 15, `Retry-After ${refused.headers["retry-after"]}`);
    assert.equal(
      refused.headers["x-ratelimit-limit-requests"],
      replica === first ? "4" : undefined,
      "headers only where they are on",
    );
  }

  // A daily term budget of 10 tokens: the first request (3 + 4 tokens) fits, the second does not.
  assert.equal(reply(await chat(first, authFor("thrifty"))).status, 200);
  const spent = reply(await chat(first, authFor("thrifty")));
  assertError(spent, 403, "tenant_budget_exhausted", "permission_error");
  const now = new Date();
  const midnight = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  const expected = Math.ceil((midnight - Date.now()) / 1000);
  const after = Number(spent.headers["retry-after"]);
  // The period's end, give or take the second the answer took.
  assert.ok(Math.abs(after - expected) <= 2, `Retry-After ${after}, midnight is ${expected} s away`);
});
