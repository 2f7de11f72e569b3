/**
 * The answer scanner (src/tracing/answer-facts.ts): the model and finish reasons of a JSON answer
 * and of an SSE stream cut anywhere, SGLang's meta_info, and what it refuses to read.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AnswerFacts } from "../../src/tracing/answer-facts.js";

function sse(events: unknown[]): Buffer {
  return Buffer.from(`${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("")}data: [DONE]\n\n`);
}

function chunk(model: string, index: number, content: string, finish: string | null) {
  return {
    id: "c",
    object: "chat.completion.chunk",
    model,
    choices: [{ index, delta: { content }, finish_reason: finish }],
  };
}

/** Feeds `body` in pieces of `size` bytes. */
function feed(facts: AnswerFacts, body: Buffer, size: number): AnswerFacts {
  for (let i = 0; i < body.length; i += size) facts.read(body.subarray(i, i + size));
  facts.end();
  return facts;
}

describe("AnswerFacts", () => {
  test("a whole JSON answer: its model and each choice's finish reason", () => {
    const body = Buffer.from(
      JSON.stringify({
        model: "llama-3-8b",
        choices: [
          { index: 0, message: { content: "a" }, finish_reason: "stop" },
          { index: 1, message: { content: "b" }, finish_reason: "length" },
        ],
      }),
    );
    const facts = feed(new AnswerFacts("application/json"), body, 7);
    assert.equal(facts.stream, false);
    assert.equal(facts.responseModel, "llama-3-8b");
    assert.deepEqual(facts.finishReasons, ["stop", "length"]);
  });

  test("a stream cut at every size: the first event's model, the finish reasons that are not null", () => {
    const body = sse([
      chunk("qwen", 0, "x", null),
      chunk("qwen", 1, "y", null),
      chunk("qwen", 0, "z", "stop"),
      chunk("qwen", 1, "", "tool_calls"),
      { model: "qwen", choices: [], usage: { prompt_tokens: 3, completion_tokens: 4 } },
    ]);
    for (const size of [1, 2, 3, 17, 64, body.length]) {
      const facts = feed(new AnswerFacts("text/event-stream; charset=utf-8"), body, size);
      assert.equal(facts.stream, true);
      assert.equal(facts.responseModel, "qwen", `cut every ${size} bytes`);
      assert.deepEqual(facts.finishReasons, ["stop", "tool_calls"], `cut every ${size} bytes`);
    }
  });

  test("SGLang's /generate: meta_info.finish_reason.type", () => {
    const body = Buffer.from(
      JSON.stringify({
        text: "hi",
        meta_info: { finish_reason: { type: "length", length: 4 }, prompt_tokens: 2 },
      }),
    );
    const facts = feed(new AnswerFacts("application/json"), body, 1000);
    assert.equal(facts.responseModel, undefined);
    assert.deepEqual(facts.finishReasons, ["length"]);
  });

  test("not JSON, an error body, a line past the bound: nothing read, nothing thrown", () => {
    assert.deepEqual(
      feed(new AnswerFacts("text/plain"), Buffer.from("upstream error <html>"), 5).finishReasons,
      [],
    );
    const error = feed(new AnswerFacts("application/json"), Buffer.from('{"error":{"message":"busy"}}'), 100);
    assert.equal(error.responseModel, undefined);
    // One event far longer than any real chunk (its finish reason is not read), then a normal one.
    const huge = `data: ${JSON.stringify(chunk("m", 0, "x".repeat(300 * 1024), "stop"))}\n\n`;
    const body = Buffer.concat([Buffer.from(huge), sse([chunk("m", 0, "", "length")])]);
    const facts = feed(new AnswerFacts("text/event-stream"), body, 4096);
    assert.deepEqual(facts.finishReasons, ["length"]);
    assert.equal(facts.responseModel, "m");
  });
});
