/**
 * `least_tokens` (src/routing/least-tokens.ts) and the outstanding-work ledger it reads: the worker
 * with the fewest prompt + predicted output tokens in flight wins, whatever the in-flight counts;
 * through the gateway, the predictions of real requests decide where the next one goes.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { RoutingCandidate, RoutingRequest } from "../../src/contracts/routing-policy.js";
import { createRoutingPolicy } from "../../src/routing/create.js";
import { DEFAULT_ROUTING } from "../../src/routing/options.js";
import { OutstandingWork } from "../../src/routing/outstanding-work.js";
import { BodyRoutingRequest } from "../../src/routing/request.js";
import { chatBody, FAST_WORKER, type Held, startFleet, waitFor } from "../helpers/harness.js";

interface FakeWorker extends RoutingCandidate {
  inflight: number;
}

const workers = (): FakeWorker[] => [
  { url: "http://a", inflight: 0 },
  { url: "http://b", inflight: 0 },
];

describe("least_tokens", () => {
  test("the ledger adds and removes a request's tokens, and forgets a worker at 0", () => {
    const work = new OutstandingWork();
    work.add("http://a", 1200);
    work.add("http://a", 30);
    assert.equal(work.of("http://a"), 1230);
    work.remove("http://a", 1200);
    assert.equal(work.of("http://a"), 30);
    work.remove("http://a", 30);
    assert.equal(work.size, 0);
    work.remove("http://b", 5);
    work.add("http://b", Number.NaN);
    assert.equal(work.of("http://b"), 0);
  });

  test("fewest tokens wins over fewest requests; ties go by in-flight requests, then in turn", () => {
    const policy = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "least_tokens" });
    const [a, b] = workers();
    const work = new OutstandingWork();
    const request = new BodyRoutingRequest({}, {}, work);
    // a: one long generation (2000 tokens); b: three short chats (3 x 60).
    a!.inflight = 1;
    work.add(a!.url, 2000);
    b!.inflight = 3;
    for (let i = 0; i < 3; i++) work.add(b!.url, 60);
    for (let i = 0; i < 4; i++) assert.equal(policy.choose([a!, b!], request), b);
    // Without a ledger the same policy goes by in-flight requests.
    assert.equal(policy.choose([a!, b!], new BodyRoutingRequest({}, {})), a);
    // An idle pair: both in turn.
    const idle = workers();
    const seen = new Set(
      [0, 1, 2, 3].map(() => policy.choose(idle, new BodyRoutingRequest({}, {}, new OutstandingWork()))!.url),
    );
    assert.equal(seen.size, 2);
  });

  test("an embedder's request without the ledger is routed by in-flight requests", () => {
    const policy = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "least_tokens" });
    const [a, b] = workers();
    a!.inflight = 2;
    const plain: RoutingRequest = { json: undefined, promptText: () => "", header: () => undefined };
    assert.equal(policy.choose([a!, b!], plain), b);
  });

  test("through the gateway: the next request goes to the worker with short answers in flight, not to the one with fewer requests", async (t) => {
    const slow = { ...FAST_WORKER, ttftMs: 60_000 };
    const fleet = await startFleet(t, { workers: [slow, slow], gateway: { policy: "least_tokens" } });
    const [w0, w1] = fleet.workers;
    const running = () => [w0!.stats().running, w1!.stats().running];
    const held: Held[] = [];
    t.after(async () => {
      for (const h of held) await h.cancel();
    });
    // One request predicted 2000 output tokens (its max_tokens caps the context fallback).
    held.push(fleet.hold(chatBody({ max_tokens: 2000 })));
    await waitFor(() => running()[0]! + running()[1]! === 1, "the long request runs");
    const long = running()[0] === 1 ? 0 : 1;
    // Three requests predicted 10 output tokens each: all go to the other worker, even the third,
    // when the other has two in flight against one.
    for (let i = 1; i <= 3; i++) {
      held.push(fleet.hold(chatBody({ max_tokens: 10 })));
      await waitFor(() => running()[0]! + running()[1]! === 1 + i, `short request ${i} runs`);
    }
    const counts = running();
    assert.equal(counts[long], 1, `the long request's worker took nothing more: ${counts}`);
    assert.equal(counts[1 - long], 3, `the short requests' worker took all three: ${counts}`);
  });
});
