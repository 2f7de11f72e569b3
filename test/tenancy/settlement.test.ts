/**
 * Budgets settle from the worker's actual usage, not the estimate: the JSON body's `usage`, the
 * stream's usage chunk (which the gateway asks for and hides when the client did not ask for it), and
 * USD from `pricing`. A request the worker never served gives its whole hold back.
 *
 * How a request over-estimates here: the gateway estimates output from `max_completion_tokens` (it wins
 * over `max_tokens`), while the mock worker generates `max_tokens` and reports that as its usage, so
 * `{max_completion_tokens: 500, max_tokens: 10}` is held as 3 + 500 tokens and settles as 3 + 10.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import {
  assertError,
  assertOk,
  authFor,
  chatBody,
  type Fleet,
  PROMPT,
  PROMPT_TOKENS,
  schedulerDoc,
  sseEvents,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const OVER = { max_completion_tokens: 500, max_tokens: 10 };
const ESTIMATE = PROMPT_TOKENS + 500;
const ACTUAL = PROMPT_TOKENS + 10;
const PRICING = { "mock-llm": { input_per_mtok: 2000, output_per_mtok: 10000 } };
/** USD of `input` and `output` tokens at PRICING. */
const usd = (input: number, output: number) => (input * 2000 + output * 10000) / 1e6;

function close(actual: number | undefined, expected: number, what: string): void {
  assert.ok(actual !== undefined && Math.abs(actual - expected) < 1e-9, `${what}: ${actual} !== ${expected}`);
}

async function remainingTokens(stack: Fleet, tenant: string): Promise<number | undefined> {
  const status = await stack.status();
  return status.tenants[`auth:${tenant}`]?.budget_remaining.budget_tokens;
}

describe("budget settlement from actual usage", () => {
  test("non-streaming: the estimate is held while the request runs, then corrected to the reported usage", async (t) => {
    const stack = await startFleet(t, {
      workers: [{ maxRunningRequests: 8 }],
      schedulerYaml: schedulerDoc({ tenant_policies: { "auth:acme": { budget_tokens: 1000 } } }),
      tenants: ["acme"],
      adminToken: "admin-secret",
    });
    assert.equal(await remainingTokens(stack, "acme"), 1000);

    const held = stack.holdAs("acme", OVER, { "x-mock-ttft-ms": "300" });
    await waitFor(() => stack.workers[0]!.stats().running === 1, "the request runs at the worker");
    let status = await stack.status();
    assert.deepEqual(status.tenants["auth:acme"], {
      inflight: 1,
      queued: 0,
      budget_remaining: { budget_tokens: 1000 - ESTIMATE },
    });
    const reply = await held.result;
    assertOk(reply);
    const body = JSON.parse(reply.text) as { usage: Record<string, number> };
    assert.deepEqual(body.usage, { prompt_tokens: 3, completion_tokens: 10, total_tokens: 13 });

    // The estimate minus the actual usage was given back.
    await waitFor(async () => (await remainingTokens(stack, "acme")) === 1000 - ACTUAL, "settled");
    assert.deepEqual(stack.gateway.budgets.remaining("auth:acme"), { budget_tokens: 1000 - ACTUAL });
    status = await stack.status();
    assert.equal(status.tenants["auth:acme"]?.inflight, 0);
    // A non-streaming body goes upstream byte for byte.
    assert.equal(stack.workers[0]!.stats().lastRequestBody, JSON.stringify(chatBody(OVER)));
  });

  test("streaming: usage settles with and without the client's include_usage; the extra chunk stays hidden", async (t) => {
    const stack = await startFleet(t, {
      schedulerYaml: schedulerDoc({ tenant_policies: { "auth:acme": { budget_tokens: 1000 } } }),
      tenants: ["acme"],
      adminToken: "admin-secret",
    });
    const worker = stack.workers[0]!;

    // 1. The client did not ask for usage: the gateway asks for it and strips that chunk.
    let reply = await stack.chatAs("acme", { ...OVER, stream: true });
    assertOk(reply);
    assert.match(String(reply.headers["content-type"]), /text\/event-stream/);
    let events = sseEvents(reply.text);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.filter((e) => e !== "[DONE]");
    assert.ok(
      chunks.every((e) => Array.isArray(e.choices) && e.choices.length === 1),
      "every event the client sees has a choice (no usage chunk with choices: [])",
    );
    assert.ok(
      chunks.every((e) => e.usage === undefined || e.usage === null),
      "no event carries usage numbers",
    );
    const content = chunks
      .map((e) => ((e.choices as Array<{ delta?: { content?: string } }>)[0]?.delta?.content ?? "") as string)
      .join("");
    assert.equal(content.split(" ").length, 10, `10 tokens: ${content}`);
    const upstream = JSON.parse(worker.stats().lastRequestBody!) as Record<string, unknown>;
    assert.deepEqual(upstream.stream_options, { include_usage: true }, "the gateway asked for usage");
    assert.equal(await remainingTokens(stack, "acme"), 1000 - ACTUAL);

    // 2. The client asked for usage itself: it gets the usage chunk, and the body goes up unchanged.
    const asked = { ...OVER, stream: true, stream_options: { include_usage: true } };
    reply = await stack.chatAs("acme", asked);
    assertOk(reply);
    events = sseEvents(reply.text);
    const usageChunks = events.filter(
      (e): e is Record<string, unknown> =>
        e !== "[DONE]" && Array.isArray(e.choices) && e.choices.length === 0,
    );
    assert.equal(usageChunks.length, 1);
    assert.deepEqual(usageChunks[0]!.usage, { prompt_tokens: 3, completion_tokens: 10, total_tokens: 13 });
    assert.equal(events.at(-1), "[DONE]");
    assert.equal(worker.stats().lastRequestBody, JSON.stringify(chatBody(asked)));
    assert.equal(await remainingTokens(stack, "acme"), 1000 - 2 * ACTUAL);

    // 3. include_usage: false is an explicit "no": still settled, still hidden.
    reply = await stack.chatAs("acme", { ...OVER, stream: true, stream_options: { include_usage: false } });
    assertOk(reply);
    assert.ok(
      sseEvents(reply.text).every((e) => e === "[DONE]" || (e.choices as unknown[]).length === 1),
      "no usage chunk",
    );
    assert.equal(await remainingTokens(stack, "acme"), 1000 - 3 * ACTUAL);

    // 4. /v1/completions streams the same way.
    reply = await stack.send("/v1/completions", {
      body: { model: "mock-llm", prompt: PROMPT, stream: true, ...OVER },
      headers: authFor("acme"),
    });
    assertOk(reply);
    assert.ok(
      sseEvents(reply.text).every((e) => e === "[DONE]" || (e.choices as unknown[]).length === 1),
      "no usage chunk on /v1/completions",
    );
    assert.equal(await remainingTokens(stack, "acme"), 1000 - 4 * ACTUAL);
  });

  test("budget_cost_usd: the cost is priced from the actual usage, and a spent budget answers 403", async (t) => {
    const stack = await startFleet(t, {
      schedulerYaml: schedulerDoc({ tenant_policies: { "auth:payg": { budget_cost_usd: 1 } } }),
      tenants: ["payg"],
      gateway: { pricing: PRICING },
      adminToken: "admin-secret",
    });
    const remaining = () => stack.gateway.budgets.remaining("auth:payg").budget_cost_usd;

    const held = stack.holdAs("payg", OVER, { "x-mock-ttft-ms": "300" });
    await waitFor(() => stack.workers[0]!.stats().running === 1, "the request runs at the worker");
    // Held at the estimate: 3 x 2000 + 500 x 10000 per million = 5.006 USD > 1 USD.
    close(remaining(), 0, "while held");
    assertOk(await held.result);
    close(remaining(), 1 - usd(3, 10), "after settling");

    // Streaming without include_usage settles from the hidden usage chunk too.
    assertOk(await stack.chatAs("payg", { ...OVER, stream: true }));
    close(remaining(), 1 - 2 * usd(3, 10), "after the stream");
    const status = await stack.status();
    close(status.tenants["auth:payg"]?.budget_remaining.budget_cost_usd, 1 - 2 * usd(3, 10), "status");

    // 3 + 100 tokens cost 1.006 USD: the budget is spent, the next request is refused.
    assertOk(await stack.chatAs("payg", { max_tokens: 100 }));
    close(remaining(), 0, "spent");
    const msg = assertError(await stack.chatAs("payg"), 403, "tenant_budget_exhausted", "permission_error");
    assert.match(msg, /1 USD budget/);
  });

  test("a request the worker never served gives its whole hold back (queue timeout, queue full, upstream reset)", async (t) => {
    // The queue timeout runs on this clock, so the 429 surely comes first and the 408 when the test says.
    const clock = new ManualClock(Date.UTC(2026, 2, 10, 12));
    const stack = await startFleet(t, {
      workers: [{ maxRunningRequests: 1 }],
      schedulerYaml: schedulerDoc({
        classes: { interactive: { queue_size: 1, queue_timeout_secs: 0.2 } },
        tenant_policies: { "auth:acme": { budget_tokens: 10_000, tokens_per_minute: 100_000 } },
      }),
      tenants: ["acme", "other"],
      gateway: { clock },
    });
    const remaining = () => stack.gateway.budgets.remaining("auth:acme").budget_tokens;
    const interactive = { "x-smg-priority": "interactive" };

    const running = stack.holdAs("other", {}, { ...interactive, "x-mock-ttft-ms": "10000" });
    await waitFor(() => stack.workers[0]!.stats().running === 1, "the only slot is taken");
    const timingOut = stack.chatAs("acme", OVER, interactive);
    await waitFor(() => stack.snapshot().classes.interactive.queued === 1, "acme queued");
    assertError(await stack.chatAs("acme", OVER, interactive), 429, "scheduler_queue_full");
    clock.advance(200);
    assertError(await timingOut, 408, "scheduler_queue_timeout");
    assert.equal(remaining(), 10_000);
    assert.equal(stack.gateway.budgets.remaining("auth:acme").tokens_per_minute, 100_000);
    await running.cancel();

    // The worker drops the connection before answering: 502, and nothing is charged.
    assertError(await stack.chatAs("acme", OVER, { "x-mock-fail": "reset" }), 502, "upstream_reset");
    assert.equal(remaining(), 10_000);

    // Control: a served request is charged its actual usage.
    assertOk(await stack.chatAs("acme", OVER));
    assert.equal(remaining(), 10_000 - ACTUAL);
  });
});
