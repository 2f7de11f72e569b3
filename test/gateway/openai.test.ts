/**
 * The official `openai` client through the gateway: plain and streamed chat completions give the
 * same content and usage as against the worker directly.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import OpenAI from "openai";
import { smallSchedulerYaml, startFleet } from "../helpers/harness.js";

const PARAMS = {
  model: "mock-llm",
  messages: [
    { role: "system" as const, content: "You are terse." },
    { role: "user" as const, content: "Say something, anything at all." },
  ],
  max_tokens: 7,
};

async function streamed(client: OpenAI) {
  const stream = await client.chat.completions.create({
    ...PARAMS,
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = "";
  let usage: OpenAI.CompletionUsage | null | undefined;
  let finish: string | null | undefined;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    content += chunk.choices[0]?.delta?.content ?? "";
    finish ??= chunk.choices[0]?.finish_reason ?? undefined;
    if (chunk.usage) usage = chunk.usage;
  }
  return { content, usage, finish, chunks };
}

describe("gateway with the official openai client", () => {
  test("non-streaming and streaming chat completions match the worker's", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    const viaGateway = new OpenAI({ baseURL: `${fleet.url}/v1`, apiKey: "x", maxRetries: 0 });
    const direct = new OpenAI({ baseURL: `${worker.url}/v1`, apiKey: "x", maxRetries: 0 });

    const [a, b] = [
      await viaGateway.chat.completions.create(PARAMS),
      await direct.chat.completions.create(PARAMS),
    ];
    assert.equal(a.object, "chat.completion");
    assert.ok((a.choices[0]?.message.content ?? "").length > 0);
    assert.equal(a.choices[0]?.message.content, b.choices[0]?.message.content);
    assert.equal(a.choices[0]?.finish_reason, b.choices[0]?.finish_reason);
    assert.deepEqual(a.usage, b.usage);
    assert.equal(a.usage?.completion_tokens, 7);
    assert.equal(a.model, b.model);

    const raw = await viaGateway.chat.completions.create(PARAMS).withResponse();
    assert.equal(raw.response.headers.get("x-sluice-admission"), "fast");

    const [sa, sb] = [await streamed(viaGateway), await streamed(direct)];
    assert.equal(sa.content, sb.content);
    assert.equal(sa.content, a.choices[0]?.message.content);
    assert.deepEqual(sa.usage, sb.usage);
    assert.deepEqual(sa.usage, a.usage);
    assert.equal(sa.finish, sb.finish);
    assert.equal(sa.chunks, sb.chunks);
    assert.equal(fleet.snapshot().inflight, 0);
  });

  test("a gateway rejection surfaces as an APIError with the status and code", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      gateway: { requireAuth: true, apiKeys: [{ sha256: "0".repeat(64), tenant: "someone" }] },
    });
    const client = new OpenAI({ baseURL: `${fleet.url}/v1`, apiKey: "not-known", maxRetries: 0 });
    await assert.rejects(client.chat.completions.create(PARAMS), (err: unknown) => {
      assert.ok(err instanceof OpenAI.APIError);
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      assert.equal(err.type, "authentication_error");
      return true;
    });
  });
});
