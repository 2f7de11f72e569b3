/**
 * Money and limits over raw loopback sockets, in process (issue 35; the Redis side is
 * test/state/money.test.ts, the ledger's test/ledger/money.test.ts):
 *
 * 1. a client's X-Request-Id is a correlation id only: every request holds, is charged and is
 *    recorded on its own, with a gateway-made `sluiceRequestId`, whatever id the client sends;
 * 2. concurrent requests without max_tokens cannot overrun a hard budget by more than one answer:
 *    each reserves an output estimate (its tenant's or model's recent p95, else
 *    default_output_tokens, else the model's context);
 * 3. a stream whose worker sends no usage is counted from its events (`tokenSource: counted`), a
 *    whole answer without usage estimated from its text (`estimated`); budgets and cost charge the
 *    same numbers, never 0;
 * 8. a request that waited in the queue and left it (408 queue timeout, 499 client gone) records the
 *    time it waited.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import { sha256Hex as sha256 } from "../../src/gateway/tenancy/tenants.js";
import { PROMPT_TOKENS, schedulerDoc, startFleet, waitFor, writeTempFile } from "../helpers/harness.js";
import { charged, rawPost, tally, unlimitedChat, usageTotal } from "../helpers/money.js";
import { rawExchange } from "./raw.js";

const KEY = { authorization: "Bearer sk-acme" };
const PRICING = { "mock-llm": { input_per_mtok: 1000, output_per_mtok: 2000 } };

async function budgetFleet(
  t: import("node:test").TestContext,
  policy: Record<string, unknown>,
  options: { worker?: Record<string, unknown>; defaultOutputTokens?: number } = {},
) {
  return startFleet(t, {
    workers: [{ maxRunningRequests: 64, ...options.worker }],
    schedulerYaml: schedulerDoc({ tenant_policies: { "auth:acme": policy } }),
    gateway: {
      apiKeys: [{ sha256: sha256("sk-acme"), tenant: "acme" }],
      pricing: PRICING,
      defaultOutputTokens: options.defaultOutputTokens,
    },
  });
}

describe("money: request ids are the client's, holds are the gateway's (in process)", () => {
  test("30 requests reusing one X-Request-Id: each is held and charged on its own, each echoes it", async (t) => {
    // 3 prompt tokens + max_tokens 4: 7 a request. In process a request is admitted while the budget
    // has tokens left, so 8 fit in 50 (the 8th takes it to 56).
    const fleet = await budgetFleet(t, { budget_tokens: 50 });
    const body = { ...unlimitedChat(), max_tokens: 4 };
    const replies = await Promise.all(
      Array.from({ length: 30 }, () =>
        rawPost(fleet.gateway.port, body, { ...KEY, "X-Request-Id": "same-id" }),
      ),
    );
    const counts = tally(replies);
    assert.deepEqual(counts, { "200": 8, "403 tenant_budget_exhausted": 22 }, JSON.stringify(counts));
    for (const r of replies) assert.equal(r!.headers["x-request-id"], "same-id", "the client's id is echoed");
    await waitFor(() => fleet.outcomes.length === 30, "30 records");
    const keys = new Set(fleet.outcomes.map((o) => o.sluiceRequestId));
    assert.equal(keys.size, 30, "every record has its own gateway id");
    assert.ok(fleet.outcomes.every((o) => o.requestId === "same-id"));
    const served = replies.reduce((n, r) => n + usageTotal(r), 0);
    assert.equal(served, 8 * 7);
    assert.equal(
      fleet.outcomes.reduce((n, o) => n + charged(o), 0),
      served,
      "budgets charged what was served",
    );
    assert.deepEqual(fleet.gateway.budgets.remaining("auth:acme"), { budget_tokens: 0 });
  });
});

describe("money: requests without max_tokens reserve an output estimate (in process)", () => {
  test("40 concurrent requests on the last 84 tokens of a 5000-token budget: one answer over at most", async (t) => {
    // The worker answers 2000 tokens to a request without a limit (as in the issue: 80,040 served).
    const fleet = await budgetFleet(
      t,
      { budget_tokens: 5000 },
      { worker: { defaultMaxTokens: 2000, tokenDelayMs: 0 } },
    );
    const port = fleet.gateway.port;
    // Spend down to 84 left: 3 + 4913.
    const first = await rawPost(port, { ...unlimitedChat(), max_tokens: 4913 }, KEY);
    assert.equal(first?.status, 200);
    assert.deepEqual(fleet.gateway.budgets.remaining("auth:acme"), { budget_tokens: 84 });
    // Answers take 2 s (1 ms a token): all 40 arrive while the first ones run.
    const slow = { ...KEY, "x-mock-token-delay-ms": "1" };
    const replies = await Promise.all(Array.from({ length: 40 }, () => rawPost(port, unlimitedChat(), slow)));
    const counts = tally(replies);
    const served = replies.reduce((n, r) => n + usageTotal(r), 0);
    const over = served - 84;
    t.diagnostic(`in process: ${JSON.stringify(counts)}, ${served} tokens served on 84 left: ${over} over`);
    // No history and no default_output_tokens: each reserves the model's context, so one gets in.
    assert.equal(counts["200"], 1, JSON.stringify(counts));
    assert.ok(over <= PROMPT_TOKENS + 2000, `${over} tokens over budget`);
  });

  test("40 concurrent requests, answers longer than the reservation: over by one answer and their excess at most", async (t) => {
    const reserve = 1000;
    const fleet = await budgetFleet(
      t,
      { budget_tokens: 5000 },
      { worker: { tokenDelayMs: 0 }, defaultOutputTokens: reserve },
    );
    // Answers of 500 to 2000 tokens against a reservation of 1000 (as a p95 would be passed by 5%).
    const lengths = Array.from({ length: 40 }, (_, i) => 500 + ((i * 397) % 1501));
    const replies = await Promise.all(
      lengths.map((n) =>
        rawPost(fleet.gateway.port, unlimitedChat(), { ...KEY, "x-mock-output-tokens": String(n) }),
      ),
    );
    const counts = tally(replies);
    const served = replies.reduce((n, r) => n + usageTotal(r), 0);
    let excess = 0;
    let largest = 0;
    for (const r of replies) {
      excess += Math.max(0, usageTotal(r) - (PROMPT_TOKENS + reserve));
      largest = Math.max(largest, usageTotal(r));
    }
    const over = served - 5000;
    t.diagnostic(
      `in process, reservation ${reserve}: ${JSON.stringify(counts)}, ${served} served of 5000: ${over} over (bound ${largest + excess})`,
    );
    assert.ok(
      over <= largest + excess,
      `${over} over, more than one answer and the excess (${largest} + ${excess})`,
    );
  });

  test("default_output_tokens: the flag, the YAML key (the flag wins), unset by default, bad values named", async (t) => {
    const w = ["--worker-urls", "http://w:1"];
    assert.equal(parseGatewayArgs(w).defaultOutputTokens, undefined);
    assert.equal(parseGatewayArgs([...w, "--default-output-tokens", "256"]).defaultOutputTokens, 256);
    const file = await writeTempFile(t, "gw.yaml", "worker_urls: [http://w:1]\ndefault_output_tokens: 512\n");
    assert.equal(parseGatewayArgs(["--config", file]).defaultOutputTokens, 512);
    assert.equal(
      parseGatewayArgs(["--config", file, "--default-output-tokens", "64"]).defaultOutputTokens,
      64,
    );
    assert.throws(() => parseGatewayArgs([...w, "--default-output-tokens", "0"]), /--default-output-tokens/);
    const bad = await writeTempFile(
      t,
      "bad.yaml",
      "worker_urls: [http://w:1]\ndefault_output_tokens: lots\n",
    );
    assert.throws(() => parseGatewayArgs(["--config", bad]), /default_output_tokens/);
  });

  test("the reservation follows the tenant's recent p95 once it has a history, and default_output_tokens before", async (t) => {
    // Answers of 100 tokens; default_output_tokens 500 until 8 answers taught the gateway.
    const fleet = await budgetFleet(
      t,
      { budget_tokens: 100_000 },
      { worker: { defaultMaxTokens: 100 }, defaultOutputTokens: 500 },
    );
    const port = fleet.gateway.port;
    const before = fleet.gateway.budgets.remaining("auth:acme").budget_tokens!;
    const slow = rawPost(port, unlimitedChat(), { ...KEY, "x-mock-ttft-ms": "400" });
    await waitFor(() => fleet.workers[0]!.stats().running === 1, "the request runs");
    assert.equal(
      before - fleet.gateway.budgets.remaining("auth:acme").budget_tokens!,
      PROMPT_TOKENS + 500,
      "held: the prompt and default_output_tokens",
    );
    assert.equal((await slow)?.status, 200);
    for (let i = 0; i < 8; i++) assert.equal((await rawPost(port, unlimitedChat(), KEY))?.status, 200);
    const settled = fleet.gateway.budgets.remaining("auth:acme").budget_tokens!;
    assert.equal(before - settled, 9 * (PROMPT_TOKENS + 100), "settled at what was served");
    const next = rawPost(port, unlimitedChat(), { ...KEY, "x-mock-ttft-ms": "400" });
    await waitFor(() => fleet.workers[0]!.stats().running === 1, "the next request runs");
    assert.equal(
      settled - fleet.gateway.budgets.remaining("auth:acme").budget_tokens!,
      PROMPT_TOKENS + 100,
      "held: the prompt and the tenant's p95 (100)",
    );
    assert.equal((await next)?.status, 200);
  });
});

describe("money: every served answer is charged what it produced (in process)", () => {
  test("a stream whose worker sends no usage is counted from its events: budget, cost and record agree", async (t) => {
    const fleet = await budgetFleet(
      t,
      { budget_tokens: 100_000 },
      { worker: { reportUsage: false, defaultMaxTokens: 40 }, defaultOutputTokens: 64 },
    );
    const res = await rawPost(fleet.gateway.port, unlimitedChat({ stream: true }), KEY);
    assert.equal(res?.status, 200);
    assert.ok(res!.body.includes("data: [DONE]"), "the stream went out whole");
    assert.ok(!res!.body.includes('"usage"'), "no usage from this worker");
    await waitFor(() => fleet.outcomes.length === 1, "the record");
    const o = fleet.outcomes[0]!;
    assert.equal(o.tokenSource, "counted");
    assert.equal(o.inputTokens, PROMPT_TOKENS);
    // 40 token events, a role chunk and a finish chunk: 40 or 41 counted (one framing chunk is
    // told from the tokens only by reading it).
    assert.ok(o.outputTokens === 40 || o.outputTokens === 41, `counted ${o.outputTokens}`);
    assert.equal(100_000 - fleet.gateway.budgets.remaining("auth:acme").budget_tokens!, charged(o));
    assert.ok(
      o.costUsd !== undefined && Math.abs(o.costUsd - (3 * 1000 + o.outputTokens! * 2000) / 1e6) < 1e-12,
    );
  });

  test("a stream cut after its first events is charged the events it carried, never 0", async (t) => {
    const fleet = await budgetFleet(t, { budget_tokens: 100_000 }, { worker: { reportUsage: false } });
    const res = await rawPost(fleet.gateway.port, unlimitedChat({ stream: true, max_tokens: 50 }), {
      ...KEY,
      "x-mock-fail": "die-mid-stream",
      "x-mock-die-after-tokens": "5",
    });
    assert.equal(res?.status, 200, "the headers went out before the cut");
    await waitFor(() => fleet.outcomes.length === 1, "the record");
    const o = fleet.outcomes[0]!;
    assert.equal(o.tokenSource, "counted");
    assert.ok(o.outputTokens! >= 1 && o.outputTokens! <= 6, `counted ${o.outputTokens}`);
    assert.ok(o.costUsd! > 0);
    assert.equal(100_000 - fleet.gateway.budgets.remaining("auth:acme").budget_tokens!, charged(o));
  });

  test("a whole answer without usage is estimated from its text, and marked so", async (t) => {
    const fleet = await budgetFleet(
      t,
      { budget_tokens: 100_000 },
      { worker: { reportUsage: false, defaultMaxTokens: 40 }, defaultOutputTokens: 64 },
    );
    const res = await rawPost(fleet.gateway.port, unlimitedChat(), KEY);
    assert.equal(res?.status, 200);
    const text = (JSON.parse(res!.body) as { choices: Array<{ message: { content: string } }> }).choices[0]!
      .message.content;
    await waitFor(() => fleet.outcomes.length === 1, "the record");
    const o = fleet.outcomes[0]!;
    assert.equal(o.tokenSource, "estimated");
    assert.equal(o.outputTokens, Math.ceil(text.length / 4));
    assert.equal(100_000 - fleet.gateway.budgets.remaining("auth:acme").budget_tokens!, charged(o));
  });

  test("a worker that reports usage: reported, as before", async (t) => {
    const fleet = await budgetFleet(t, { budget_tokens: 100_000 }, { worker: { defaultMaxTokens: 40 } });
    for (const stream of [false, true]) {
      assert.equal((await rawPost(fleet.gateway.port, unlimitedChat({ stream }), KEY))?.status, 200);
    }
    await waitFor(() => fleet.outcomes.length === 2, "the records");
    for (const o of fleet.outcomes) {
      assert.equal(o.tokenSource, "reported");
      assert.equal(o.outputTokens, 40);
    }
  });
});

describe("money: the real queue wait of requests that left the queue", () => {
  test("408 after its queue timeout and 499 gone after 150 ms: both record the wait", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ maxRunningRequests: 1 }],
      schedulerYaml: schedulerDoc({ classes: { default: { queue_size: 4, queue_timeout_secs: 0.3 } } }),
    });
    const port = fleet.gateway.port;
    const holder = rawPost(port, { ...unlimitedChat(), max_tokens: 4 }, { "x-mock-ttft-ms": "2000" });
    await waitFor(() => fleet.workers[0]!.stats().running === 1, "the slot is taken");
    const timedOut = await rawPost(port, { ...unlimitedChat(), max_tokens: 4 });
    assert.equal(timedOut?.status, 408);
    // A client that leaves after 150 ms in the queue: its socket closes.
    const body = JSON.stringify({ ...unlimitedChat(), max_tokens: 4 });
    await rawExchange(
      port,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      { waitMs: 150 },
    );
    await waitFor(() => fleet.outcomes.length === 2, "two records");
    const [timeout, gone] = fleet.outcomes;
    assert.equal(timeout!.status, 408);
    assert.ok(
      timeout!.queueWaitMs >= 290 && timeout!.queueWaitMs < 1500,
      `408 waited ${timeout!.queueWaitMs}`,
    );
    assert.equal(gone!.status, 499);
    assert.ok(gone!.queueWaitMs >= 100 && gone!.queueWaitMs < 1500, `499 waited ${gone!.queueWaitMs}`);
    assert.equal((await holder)?.status, 200);
  });
});
