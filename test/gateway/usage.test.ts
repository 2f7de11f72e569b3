/**
 * The gateway asks the worker for usage on streams whose client did not (to account tokens) and hides
 * that from the client: the client's bytes reach the worker unchanged apart from the added
 * `stream_options`, and the client's stream is what the worker would have sent it directly.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { UsageReader, withUsageRequested } from "../../src/gateway/request/usage.js";
import {
  assertOk,
  normalizeIds,
  sendTo,
  smallSchedulerYaml,
  sseData,
  startFleet,
} from "../helpers/harness.js";

const JSON_HEADERS = { "content-type": "application/json" };
const STREAM_BODY =
  '{ "model":"mock-llm",  "stream": true, "seed": 12345678901234567890, "temperature": 0.50,\n' +
  '  "messages":[{"role":"user","content":"h\\u00e9llo"}], "max_tokens": 4 }';

describe("gateway usage accounting on streams", () => {
  test("a stream without include_usage: the client sees exactly the worker's direct stream", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    const direct = await sendTo(worker.url, "/v1/chat/completions", {
      method: "POST",
      headers: JSON_HEADERS,
      body: STREAM_BODY,
    });
    const via = await fleet.send("/v1/chat/completions", {
      method: "POST",
      headers: JSON_HEADERS,
      body: STREAM_BODY,
    });
    assertOk(via);
    assert.equal(normalizeIds(via.text), normalizeIds(direct.text));
    assert.ok(!via.text.includes('"usage"'), "no usage field the client did not ask for");
    assert.equal(sseData(via.text).at(-1), "[DONE]");
  });

  test("the body sent upstream is the client's bytes plus stream_options only", async (t) => {
    const fleet = await startFleet(t, { schedulerYaml: smallSchedulerYaml() });
    const worker = fleet.workers[0]!;
    assertOk(
      await fleet.send("/v1/chat/completions", { method: "POST", headers: JSON_HEADERS, body: STREAM_BODY }),
    );
    const sent = worker.stats().lastRequestBody ?? "";
    assert.deepEqual(JSON.parse(sent).stream_options, { include_usage: true });
    // Every byte of the client's body is still there, in order (numbers are not re-serialised).
    assert.ok(sent.includes('"seed": 12345678901234567890'), sent);
    assert.ok(sent.includes('"temperature": 0.50'), sent);
    assert.ok(sent.includes('"content":"h\\u00e9llo"'), sent);
    assert.equal(sent.replace(/"stream_options":\{"include_usage":true\},?/, ""), STREAM_BODY);
  });

  test("withUsageRequested leaves bodies alone when the client already asked, or it is not a stream", () => {
    const asked = Buffer.from('{"stream":true,"stream_options":{"include_usage":true},"messages":[]}');
    assert.deepEqual(withUsageRequested("/v1/chat/completions", asked, JSON.parse(asked.toString())), {
      body: asked,
      strip: false,
    });
    const plain = Buffer.from('{"messages":[]}');
    assert.equal(withUsageRequested("/v1/chat/completions", plain, JSON.parse(plain.toString())).body, plain);
    const other = Buffer.from('{"stream":true}');
    assert.equal(withUsageRequested("/generate", other, JSON.parse(other.toString())).body, other);
  });

  test("UsageReader: a multi-byte character split across chunks survives the rewrite", () => {
    const event = (doc: unknown) => `data: ${JSON.stringify(doc)}\n\n`;
    const content = event({ choices: [{ index: 0, delta: { content: "héllo 😀 世界" } }], usage: null });
    const usage = event({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 5 } });
    const bytes = Buffer.from(content + usage + "data: [DONE]\n\n");
    for (let cut = 1; cut < Buffer.byteLength(content); cut++) {
      const reader = new UsageReader("text/event-stream; charset=utf-8", true);
      const out = Buffer.concat([
        reader.transform(bytes.subarray(0, cut)),
        reader.transform(bytes.subarray(cut)),
        reader.flush() ?? Buffer.alloc(0),
      ]).toString("utf8");
      const expected = `${event({ choices: [{ index: 0, delta: { content: "héllo 😀 世界" } }] })}data: [DONE]\n\n`;
      assert.equal(out, expected, `cut at byte ${cut}`);
      assert.deepEqual(reader.usage, { inputTokens: 3, outputTokens: 5 });
    }
  });
});
