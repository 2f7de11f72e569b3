/**
 * Safe retries through the gateway (docs/routing.md "Retries"), with real workers on loopback: a
 * request whose worker refuses, resets, or answers 502/503 before any byte reached the client is
 * tried again on another worker of its pool, holding its one slot; never after the first byte, a
 * 4xx, a cancel, or past --max-retries. Failing workers are small scripted servers (x-mock-fail
 * would make every worker fail alike); the healthy ones are the project's mock worker. A routing
 * policy of the test's own makes the order of workers deterministic: the scripted one first.
 */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, type TestContext, test } from "node:test";
import type {
  RoutingCandidate,
  RoutingPolicy,
  RoutingPolicyFactory,
} from "../../src/contracts/routing-policy.js";
import {
  RETRY_BACKOFF_BASE_MS,
  RETRY_BACKOFF_CAP_MS,
  retryableFailure,
  retryableStatus,
  retryBackoffMs,
} from "../../src/routing/retry.js";
import { type Fleet, type FleetOptions, metric, sseData, startFleet, waitFor } from "../helpers/harness.js";

/** A worker the test scripts: healthy for the gateway's probes, `answer` for inference. */
interface ScriptedWorker {
  url: string;
  /** Inference requests received. */
  received: number;
  /** Stops listening and drops its connections: connections are refused from now on. */
  down(): Promise<void>;
}

type Answer = (req: IncomingMessage, res: ServerResponse, n: number) => void;

async function scriptedWorker(t: TestContext, answer: Answer, capacity = 4): Promise<ScriptedWorker> {
  const json = (res: ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  };
  const state: ScriptedWorker = { url: "", received: 0, down: async () => {} };
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "GET" && req.url === "/health") return json(res, 200, {});
      if (req.method === "GET" && req.url === "/get_server_info")
        return json(res, 200, { max_running_requests: capacity });
      if (req.method === "GET" && req.url === "/v1/models")
        return json(res, 200, { object: "list", data: [{ id: "mock-llm", object: "model" }] });
      if (req.method === "GET") return json(res, 404, {});
      state.received++;
      answer(req, res, state.received);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  let closed = false;
  state.down = async () => {
    if (closed) return;
    closed = true;
    const done = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await done;
  };
  t.after(() => state.down());
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

function errorStatus(status: number): Answer {
  return (_req, res) => {
    const body = JSON.stringify({
      error: { message: `scripted ${status}`, type: "server_error", code: null },
    });
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  };
}

const okAnswer: Answer = (_req, res) => {
  const body = JSON.stringify({
    id: "scripted",
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
  });
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
};

/** Candidates in the order of `order` (by URL), then the rest: the test decides who is tried first. */
function preferring(order: string[]): RoutingPolicyFactory {
  return <W extends RoutingCandidate>(): RoutingPolicy<W> => ({
    name: "test_order",
    choose(candidates) {
      for (const url of order) {
        const w = candidates.find((c) => c.url === url);
        if (w !== undefined) return w;
      }
      return candidates[0];
    },
    onWorkerRemoved() {},
  });
}

/** A fleet: one mock worker (index 0 of `fleet.workers`) plus `scripted`, tried in `order`. */
async function fleetWith(
  t: TestContext,
  scripted: ScriptedWorker[],
  order: string[],
  options: FleetOptions = {},
): Promise<Fleet> {
  return startFleet(t, {
    extraWorkers: scripted.map((s) => ({ url: s.url })),
    ...options,
    gateway: { routingPolicy: preferring(order), ...options.gateway },
  });
}

/** Nothing held after the requests: no slot, no worker in flight. */
function assertNothingHeld(fleet: Fleet): void {
  assert.equal(fleet.gateway.admission.snapshot().inflight, 0, "admission slots in flight");
  for (const w of fleet.gateway.workers.workers) assert.equal(w.inflight, 0, `in flight on ${w.url}`);
}

async function retries(fleet: Fleet, reason: string): Promise<number | undefined> {
  return metric(await fleet.scrape(), "sluice_upstream_retries_total", { reason });
}

describe("retry policy", () => {
  test("retryable: refused, reset, 502 and 503; not a timeout, a bad response, a 4xx or a 500", () => {
    assert.equal(retryableFailure("connect"), "connect");
    assert.equal(retryableFailure("reset"), "reset");
    assert.equal(retryableFailure("timeout"), undefined);
    assert.equal(retryableFailure("bad_response"), undefined);
    assert.equal(retryableFailure("refused_arguments"), undefined);
    assert.equal(retryableStatus(502), "status_502");
    assert.equal(retryableStatus(503), "status_503");
    for (const status of [200, 400, 429, 500, 504]) assert.equal(retryableStatus(status), undefined);
  });

  test("backoff: full jitter under 25 ms doubling, capped at 250 ms", () => {
    const top = () => 0.999_999;
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6].map((retry) => retryBackoffMs(retry, top)),
      [24, 49, 99, 199, 249, 249],
    );
    for (const retry of [1, 3, 9])
      assert.equal(
        retryBackoffMs(retry, () => 0),
        0,
      );
    assert.equal(
      retryBackoffMs(2, () => 0.5),
      25,
    );
    assert.equal(RETRY_BACKOFF_BASE_MS, 25);
    assert.equal(RETRY_BACKOFF_CAP_MS, 250);
  });
});

describe("retries", () => {
  test("a refused connection is retried on another worker, invisibly to the client", async (t) => {
    const dead = await scriptedWorker(t, okAnswer);
    const fleet = await fleetWith(t, [dead], [dead.url]);
    await dead.down();
    const reply = await fleet.chat();
    assert.equal(reply.status, 200, reply.text);
    assert.equal((JSON.parse(reply.text) as { object: string }).object, "chat.completion");
    assert.equal(fleet.workers[0]!.stats().received, 1, "the mock answered once");
    const record = fleet.outcomes.at(-1)!;
    assert.equal(record.outcome, "ok");
    assert.equal(record.attempts, 2);
    assert.equal(record.worker, fleet.workers[0]!.url);
    // The failed attempt reached the breaker: a refused connection opens the circuit at once.
    const worker = fleet.gateway.workers.workers.find((w) => w.url === dead.url)!;
    assert.equal(worker.breaker.state, "open");
    assert.equal(await retries(fleet, "connect"), 1);
    assert.equal(await retries(fleet, "status_503"), 0);
    assertNothingHeld(fleet);
  });

  for (const status of [503, 502]) {
    test(`a ${status} with nothing sent is retried on another worker`, async (t) => {
      const failing = await scriptedWorker(t, errorStatus(status));
      const fleet = await fleetWith(t, [failing], [failing.url], {
        gateway: {
          breaker: {
            failures: 1,
            errorRatio: 0,
            windowSecs: 60,
            minRequests: 20,
            cooldownSecs: 60,
            halfOpenRequests: 1,
          },
        },
      });
      const reply = await fleet.chat();
      assert.equal(reply.status, 200, reply.text);
      assert.equal(failing.received, 1);
      assert.equal(fleet.workers[0]!.stats().received, 1);
      assert.equal(fleet.outcomes.at(-1)!.attempts, 2);
      // The breaker counted the failed attempt (one failure opens it here).
      const worker = fleet.gateway.workers.workers.find((w) => w.url === failing.url)!;
      assert.equal(worker.breaker.state, "open");
      assert.equal(await retries(fleet, `status_${status}`), 1);
      assertNothingHeld(fleet);
    });
  }

  test("no retry after the first byte: a stream cut mid-way stays cut", async (t) => {
    const fleet = await startFleet(t, { workers: [{}, {}] });
    const reply = await fleet
      .chat({ stream: true }, { "x-mock-fail": "die-mid-stream", "x-mock-die-after-tokens": "2" })
      .catch((err: unknown) => err as Error);
    if (!(reply instanceof Error)) {
      assert.equal(reply.status, 200);
      assert.ok(!sseData(reply.text).includes("[DONE]"), "the client sees the cut");
    }
    const total = fleet.workers[0]!.stats().received + fleet.workers[1]!.stats().received;
    assert.equal(total, 1, "one worker saw the request");
    await waitFor(() => fleet.outcomes.length === 1, "fleet.outcomes.length === 1");
    assert.equal(fleet.outcomes[0]!.attempts, 1);
    assert.equal(fleet.outcomes[0]!.errorCode, "upstream_reset");
    assert.equal(await retries(fleet, "reset"), 0);
    assertNothingHeld(fleet);
  });

  test("no retry on a 4xx from the worker", async (t) => {
    const refusing = await scriptedWorker(t, errorStatus(400));
    const fleet = await fleetWith(t, [refusing], [refusing.url]);
    const reply = await fleet.chat();
    assert.equal(reply.status, 400);
    assert.match(reply.text, /scripted 400/);
    assert.equal(fleet.workers[0]!.stats().received, 0);
    assert.equal(fleet.outcomes.at(-1)!.attempts, 1);
    assertNothingHeld(fleet);
  });

  test("no retry when the client cancelled", async (t) => {
    // Holds every request until its client leaves, then the gateway's upstream request is cut.
    const hanging = await scriptedWorker(t, () => {});
    const fleet = await fleetWith(t, [hanging], [hanging.url]);
    const held = fleet.hold();
    await waitFor(() => hanging.received === 1, "hanging.received === 1");
    await held.cancel();
    await waitFor(() => fleet.outcomes.length === 1, "fleet.outcomes.length === 1");
    const record = fleet.outcomes[0]!;
    assert.equal(record.outcome, "cancelled");
    assert.equal(record.attempts, 1);
    assert.equal(fleet.workers[0]!.stats().received, 0, "the other worker never saw it");
    assert.equal(await retries(fleet, "reset"), 0);
    await waitFor(
      () => fleet.gateway.admission.snapshot().inflight === 0,
      "fleet.gateway.admission.snapshot().inflight === 0",
    );
    assertNothingHeld(fleet);
  });

  test("--max-retries 0 disables retries: the worker's own 503 is the answer", async (t) => {
    const failing = await scriptedWorker(t, errorStatus(503));
    const fleet = await fleetWith(t, [failing], [failing.url], { gateway: { maxRetries: 0 } });
    const reply = await fleet.chat();
    assert.equal(reply.status, 503);
    assert.match(reply.text, /scripted 503/);
    assert.equal(fleet.workers[0]!.stats().received, 0);
    assert.equal(fleet.outcomes.at(-1)!.attempts, 1);
    assertNothingHeld(fleet);
  });

  test("past max_retries the last failure is the answer", async (t) => {
    const first = await scriptedWorker(t, errorStatus(503));
    const second = await scriptedWorker(t, errorStatus(502));
    const fleet = await fleetWith(t, [first, second], [first.url, second.url], {
      gateway: { maxRetries: 1 },
    });
    const reply = await fleet.chat();
    assert.equal(reply.status, 502, "the second (last) attempt's answer");
    assert.match(reply.text, /scripted 502/);
    assert.equal(first.received, 1);
    assert.equal(second.received, 1);
    assert.equal(fleet.workers[0]!.stats().received, 0, "a third attempt would have been the mock's");
    assert.equal(fleet.outcomes.at(-1)!.attempts, 2);
    assertNothingHeld(fleet);
  });

  test("retries stay inside the pool; with every worker tried, the last failure stands", async (t) => {
    const a = await scriptedWorker(t, errorStatus(503));
    const b = await scriptedWorker(t, errorStatus(503));
    // Pool m1: the two failing workers; pool mock-llm: the mock worker, listed first.
    const fleet = await startFleet(t, {
      workerModels: [["mock-llm"]],
      extraWorkers: [
        { url: a.url, models: ["m1"] },
        { url: b.url, models: ["m1"] },
      ],
      gateway: { routingPolicy: preferring([a.url, b.url]), maxRetries: 5 },
    });
    const reply = await fleet.chat({ model: "m1" });
    assert.equal(reply.status, 503);
    assert.match(reply.text, /scripted 503/);
    assert.equal(a.received + b.received, 2, "each worker of the pool once");
    assert.equal(fleet.workers[0]!.stats().received, 0, "the other pool's worker never saw it");
    assert.equal(fleet.outcomes.at(-1)!.attempts, 2);
    // The other pool still serves.
    assert.equal((await fleet.chat({ model: "mock-llm" })).status, 200);
    assertNothingHeld(fleet);
  });

  test("the slot is held through the retry: a queued request does not take it", async (t) => {
    let releaseFirst: () => void = () => {};
    let releaseSecond: () => void = () => {};
    // The first attempt's 503 waits for the test; afterwards this worker answers 200.
    const failing = await scriptedWorker(t, (req, res, n) => {
      if (n === 1) releaseFirst = () => errorStatus(503)(req, res, n);
      else okAnswer(req, res, n);
    });
    // The retried attempt waits for the test too, so the slot's holder can be looked at mid-retry.
    const slow = await scriptedWorker(t, (req, res, n) => {
      releaseSecond = () => okAnswer(req, res, n);
    });
    const fleet = await fleetWith(t, [failing, slow], [failing.url, slow.url], {
      priorityScheduler: { enabled: false },
      legacy: { maxConcurrentRequests: 1, queueSize: 10 },
    });
    const first = fleet.hold();
    await waitFor(() => failing.received === 1, "failing.received === 1");
    const second = fleet.hold();
    await waitFor(
      () => fleet.gateway.admission.snapshot().queued === 1,
      "fleet.gateway.admission.snapshot().queued === 1",
    );
    releaseFirst();
    await waitFor(() => slow.received === 1, "slow.received === 1");
    // Mid-retry: the first request still holds the only slot; the second still queues.
    const mid = fleet.gateway.admission.snapshot();
    assert.equal(mid.inflight, 1);
    assert.equal(mid.queued, 1);
    assert.equal(failing.received, 1, "the queued request has not been dispatched");
    releaseSecond();
    const [r1, r2] = await Promise.all([first.result, second.result]);
    assert.ok(!(r1 instanceof Error) && r1.status === 200, String(r1 instanceof Error ? r1 : r1.text));
    assert.ok(!(r2 instanceof Error) && r2.status === 200, String(r2 instanceof Error ? r2 : r2.text));
    await waitFor(() => fleet.outcomes.length === 2, "fleet.outcomes.length === 2");
    const byAttempts = fleet.outcomes.map((o) => o.attempts).sort();
    assert.deepEqual(byAttempts, [1, 2]);
    assert.equal(fleet.outcomes.find((o) => o.attempts === 1)!.admission, "queued");
    assertNothingHeld(fleet);
  });
});
