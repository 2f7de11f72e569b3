/**
 * The rate-limit headers, Retry-After and X-Sluice-Class over real loopback HTTP: exact names and
 * formats on 200 (JSON and SSE), 429 (request bucket, token bucket, queue full), 408 (queue timeout),
 * 403 (term budget) and 503 (no worker); only the pairs a tenant has; none for an anonymous client;
 * `rate_limit_headers: false` turns them off and leaves Retry-After. Time is the test's ManualClock.
 */
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { request } from "undici";
import { startMockWorker } from "../../src/mock-worker/index.js";
import {
  assertError,
  assertOk,
  closedPort,
  FAST_WORKER,
  type Fleet,
  metric,
  type Reply,
  schedulerDoc,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

/** Monday 20:00 UTC: four hours before a daily budget's period ends. */
const MONDAY_8PM = Date.UTC(2026, 0, 5, 20, 0);

/** 3 prompt tokens + 97 = 100 estimated tokens; the mock reports exactly that. */
const HUNDRED = { max_tokens: 97 };

const POLICIES = {
  "auth:metered": {
    requests_per_minute: 2,
    tokens_per_minute: 1000,
    budget_tokens: 100_000,
    budget_cost_usd: 10,
  },
  "auth:tokens": { tokens_per_minute: 150 },
  "auth:spent": { budget_tokens: 50, budget_period: "day" },
  "auth:plain": { weight: 2 },
};

/** $0.01 a token: a 100-token request costs $1. */
const PRICING = { "mock-llm": { input_per_mtok: 10_000, output_per_mtok: 10_000 } };

/** The headers sluice sets from the tenant's limits and its class, as sent. */
function limitHeaders(reply: Reply): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.headers)) {
    if (name.startsWith("x-ratelimit-") || name.startsWith("x-sluice-budget-")) out[name] = String(value);
  }
  return out;
}

async function stack(t: Parameters<typeof startFleet>[0], clock: ManualClock, rateLimitHeaders = true) {
  return startFleet(t, {
    workers: [{ maxRunningRequests: 1 }],
    schedulerYaml: schedulerDoc({
      classes: { default: { queue_size: 1, queue_timeout_secs: 30 } },
      tenant_policies: POLICIES,
    }),
    tenants: ["metered", "tokens", "spent", "plain"],
    gateway: { requireAuth: false, clock, pricing: PRICING, rateLimitHeaders },
  });
}

describe("rate-limit headers over HTTP", () => {
  test("200 JSON and SSE carry every configured pair with OpenAI's formats; the 429 that follows too", async (t) => {
    const clock = new ManualClock(MONDAY_8PM);
    const fleet = await stack(t, clock);

    const first = await fleet.chatAs("metered", HUNDRED);
    assertOk(first);
    assert.equal(first.status, 200);
    // Read as the answer's head went out: after this request's hold of 100 tokens and 1 request.
    assert.deepEqual(limitHeaders(first), {
      "x-ratelimit-limit-requests": "2",
      "x-ratelimit-remaining-requests": "1",
      "x-ratelimit-reset-requests": "30s",
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "900",
      "x-ratelimit-reset-tokens": "6s",
      "x-sluice-budget-remaining-tokens": "99900",
      "x-sluice-budget-remaining-usd": "9",
    });
    assert.equal(first.headers["x-sluice-class"], "default");
    assert.equal(first.headers["x-sluice-admission"], "fast");
    assert.equal(first.headers["retry-after"], undefined);

    clock.advance(1500);
    const streamed = await fleet.chatAs("metered", { ...HUNDRED, stream: true });
    assertOk(streamed);
    assert.match(String(streamed.headers["content-type"]), /^text\/event-stream/);
    assert.deepEqual(limitHeaders(streamed), {
      "x-ratelimit-limit-requests": "2",
      // 1 + 1.5 s x 2/min = 1.05 left before this one: 0.05 after it, read whole: 0.
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": "58.5s",
      "x-ratelimit-limit-tokens": "1000",
      // 900 + 25 refilled - 100 held.
      "x-ratelimit-remaining-tokens": "825",
      "x-ratelimit-reset-tokens": "10.5s",
      "x-sluice-budget-remaining-tokens": "99800",
      "x-sluice-budget-remaining-usd": "8",
    });
    assert.equal(streamed.headers["x-sluice-class"], "default");

    // The third request in the minute: 429 with the request bucket's refill as Retry-After.
    const refused = await fleet.chatAs("metered", HUNDRED);
    assertError(refused, 429, "request_rate_exceeded", "rate_limit_error");
    // 0.05 left, 0.95 of a request to go at 2 a minute: 28.5 s, whole: 29.
    assert.equal(refused.headers["retry-after"], "29");
    assert.equal(limitHeaders(refused)["x-ratelimit-remaining-requests"], "0");
    assert.equal(limitHeaders(refused)["x-ratelimit-reset-requests"], "58.5s");
    assert.equal(limitHeaders(refused)["x-ratelimit-remaining-tokens"], "825");
    // Refused at the tenant's limits, before classification: no class to name.
    assert.equal(refused.headers["x-sluice-class"], undefined);

    clock.advance(29_000);
    assertOk(await fleet.chatAs("metered", HUNDRED));
    // The request bucket is a budget like the others in the metrics: 1.02 after 29 s, one taken.
    const s = await fleet.scrape();
    const left = metric(s, "sluice_budget_remaining", {
      tenant: "auth:metered",
      budget: "requests_per_minute",
    });
    assert.ok(left !== undefined && left < 1, `requests_per_minute remaining ${left}`);
    assert.equal(
      metric(s, "sluice_budget_rejections_total", {
        tenant: "auth:metered",
        reason: "request_rate_exceeded",
      }),
      1,
    );
  });

  test("429 token bucket, 403 term budget: Retry-After is the refill and the period's end", async (t) => {
    const clock = new ManualClock(MONDAY_8PM);
    const fleet = await stack(t, clock);

    const first = await fleet.chatAs("tokens", HUNDRED);
    assertOk(first);
    // Only the tokens pair: this tenant has no request limit and no term budget.
    assert.deepEqual(limitHeaders(first), {
      "x-ratelimit-limit-tokens": "150",
      "x-ratelimit-remaining-tokens": "50",
      "x-ratelimit-reset-tokens": "40s",
    });
    const over = await fleet.chatAs("tokens", HUNDRED);
    assertError(over, 429, "token_budget_exceeded", "rate_limit_error");
    // 50 tokens short at 150 a minute: 20 s.
    assert.equal(over.headers["retry-after"], "20");
    assert.equal(limitHeaders(over)["x-ratelimit-remaining-tokens"], "50");

    assertOk(await fleet.chatAs("spent", HUNDRED));
    const spent = await fleet.chatAs("spent", HUNDRED);
    assertError(spent, 403, "tenant_budget_exhausted", "permission_error");
    // The daily budget's period ends at midnight UTC, four hours away.
    assert.equal(spent.headers["retry-after"], String(4 * 3600));
    assert.deepEqual(limitHeaders(spent), { "x-sluice-budget-remaining-tokens": "0" });

    // A tenant without such limits, and an anonymous client, get none (but their class).
    const plain = await fleet.chatAs("plain");
    assertOk(plain);
    assert.deepEqual(limitHeaders(plain), {});
    assert.equal(plain.headers["x-sluice-class"], "default");
    const anonymous = await fleet.chat({}, { "x-smg-priority": "interactive" });
    assertOk(anonymous);
    assert.deepEqual(limitHeaders(anonymous), {});
    assert.equal(anonymous.headers["x-sluice-class"], "interactive");
  });

  test("429 queue full and 408 queue timeout: Retry-After from the queue's drain, with the class", async (t) => {
    const clock = new ManualClock(MONDAY_8PM);
    const fleet = await stack(t, clock);
    // One served request that held its slot at least 3 s: the pool's service time per slot.
    assertOk(await fleet.chatAs("plain", {}, { "x-mock-ttft-ms": "3000" }));

    const running = fleet.holdAs("plain", {}, { "x-mock-ttft-ms": "60000" });
    await waitFor(() => fleet.snapshot().inflight === 1, "the only slot is taken");
    const queued = fleet.holdAs("plain");
    await waitFor(() => fleet.snapshot().classes.default.queued === 1, "one request queued");

    const full = await fleet.chatAs("plain");
    assertError(full, 429, "scheduler_queue_full", "rate_limit_error");
    // One queued ahead and itself, at >= 3 s each on one slot: at least 6 s.
    const fullAfter = Number(full.headers["retry-after"]);
    assert.ok(fullAfter >= 6 && fullAfter <= 30, `Retry-After ${full.headers["retry-after"]}`);
    assert.equal(full.headers["x-sluice-class"], "default");

    clock.advance(30_000);
    const timedOut = await queued.result;
    assertError(timedOut, 408, "scheduler_queue_timeout", "timeout_error");
    assert.ok(!(timedOut instanceof Error));
    // Nothing queued ahead any more: itself, at >= 3 s on one slot.
    const timedOutAfter = Number(timedOut.headers["retry-after"]);
    assert.ok(
      timedOutAfter >= 3 && timedOutAfter < fullAfter,
      `Retry-After ${timedOut.headers["retry-after"]}`,
    );
    assert.equal(timedOut.headers["x-sluice-class"], "default");
    await running.cancel();
  });

  test("503 preempted: Retry-After from the drain for its class; both answers name their class", async (t) => {
    const clock = new ManualClock(MONDAY_8PM);
    const fleet = await stack(t, clock);
    // One served request that held its slot at least 2 s.
    assertOk(await fleet.chatAs("plain", {}, { "x-mock-ttft-ms": "2000" }));
    const bulk = fleet.holdAs("plain", {}, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "60000" });
    await waitFor(() => fleet.workers[0]!.stats().running === 1, "bulk reached the worker");
    const interactive = fleet.holdAs("plain", {}, { "x-smg-priority": "interactive" });
    await waitFor(() => fleet.snapshot().classes.interactive.queued === 1, "interactive queued");
    // Past interactive's wait target (preempt_after_secs, 0.25 s): it takes bulk's slot.
    clock.advance(300);
    const victim = await bulk.result;
    assertError(victim, 503, "scheduler_preempted", "service_unavailable");
    assert.ok(!(victim instanceof Error));
    assert.equal(victim.headers["x-sluice-class"], "bulk");
    // Nothing queued ahead of a bulk request now; itself at >= 2 s on one slot.
    const after = Number(victim.headers["retry-after"]);
    assert.ok(after >= 2 && after <= 30, `Retry-After ${victim.headers["retry-after"]}`);
    const winner = await interactive.result;
    assertOk(winner);
    assert.equal(winner.status, 200);
    assert.equal(winner.headers["x-sluice-class"], "interactive");
    assert.equal(winner.headers["x-sluice-admission"], "queued");
  });

  test("rate_limit_headers: false sends none; Retry-After and X-Sluice-Class stay", async (t) => {
    const clock = new ManualClock(MONDAY_8PM);
    const fleet = await stack(t, clock, false);
    const ok = await fleet.chatAs("tokens", HUNDRED);
    assertOk(ok);
    assert.deepEqual(limitHeaders(ok), {});
    assert.equal(ok.headers["x-sluice-class"], "default");
    const over = await fleet.chatAs("tokens", HUNDRED);
    assertError(over, 429, "token_budget_exceeded");
    assert.deepEqual(limitHeaders(over), {});
    assert.equal(over.headers["retry-after"], "20");
  });
});

describe("503 no healthy worker", () => {
  test("Retry-After is the longest until the next health-check round can bring one back", async (t) => {
    const fleet: Fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url: `http://127.0.0.1:${await closedPort()}` }],
      schedulerYaml: schedulerDoc({ tenant_policies: POLICIES }),
      tenants: ["tokens"],
      health: { intervalSecs: 12 },
    });
    const reply = await fleet.chatAs("tokens", HUNDRED);
    assertError(reply, 503, "no_healthy_workers", "service_unavailable");
    assert.equal(reply.headers["retry-after"], "12");
    // Its hold is given back before the answer is written: the headers show the bucket full.
    assert.equal(reply.headers["x-ratelimit-remaining-tokens"], "150");
  });
});

describe("a worker's own rate-limit headers", () => {
  test("give way to the gateway's names for a tenant that gets them, and pass otherwise", async (t) => {
    // A worker that reports limits of its own (an OpenAI-compatible upstream): the mock behind a
    // proxy that adds two x-ratelimit headers to every answer.
    const mock = await startMockWorker(FAST_WORKER);
    t.after(() => mock.close());
    const front = createServer((req, res) => {
      const headers: IncomingHttpHeaders = { ...req.headers };
      delete headers.host;
      delete headers.connection;
      request(`${mock.url}${req.url}`, {
        method: req.method as "GET",
        headers,
        body: req.method === "GET" ? null : req,
      }).then(
        (upstream) => {
          const out: Record<string, string | string[]> = {};
          for (const [name, value] of Object.entries(upstream.headers)) {
            if (value !== undefined && name !== "transfer-encoding" && name !== "connection")
              out[name] = value;
          }
          out["x-ratelimit-limit-tokens"] = "999999";
          out["x-ratelimit-limit-requests"] = "12345";
          res.writeHead(upstream.statusCode, out);
          upstream.body.pipe(res);
        },
        () => res.destroy(),
      );
    });
    await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => front.close(() => resolve())));
    const port = (front.address() as AddressInfo).port;

    const fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url: `http://127.0.0.1:${port}`, capacity: 4 }],
      schedulerYaml: schedulerDoc({ tenant_policies: POLICIES }),
      tenants: ["tokens"],
    });
    const ours = await fleet.chatAs("tokens", HUNDRED);
    assertOk(ours);
    assert.equal(ours.status, 200);
    // One value per name: the gateway's for the pair it sends, the worker's for the one it does not.
    assert.equal(ours.headers["x-ratelimit-limit-tokens"], "150");
    assert.equal(ours.headers["x-ratelimit-limit-requests"], "12345");
    const anonymous = await fleet.chat();
    assertOk(anonymous);
    assert.equal(anonymous.headers["x-ratelimit-limit-tokens"], "999999");
  });
});
