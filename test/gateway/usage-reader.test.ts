/** The SSE usage reader: byte-exact output for any chunking, the null usage stripped, usage found. */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { UsageReader } from "../../src/gateway/request/usage.js";

const EVENTS = [
  'data: {"id":"1","choices":[{"delta":{"content":"a"}}],"usage":null}\n\n',
  'data: {"id":"1", "choices": [{"delta": {"content": "b"}}], "usage": null}\r\n\r\n',
  'data: {"id":"1","choices":[{"delta":{"content":"\\"usage\\" is a word"}}],"usage":null}\n\n',
  ": a comment\n\n",
  'event: x\ndata: {"id":"1","choices":[],"usage":null}\n\n',
  // Multi-byte characters: any cut may fall inside one.
  'data: {"id":"1","choices":[{"delta":{"content":"é✓ 日本"}}],"usage":null}\n\n',
  'data: {"id":"1","choices":[{"delta":{"content":"x"}}]}\n\n',
];
const USAGE = 'data: {"id":"1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n';
const DONE = "data: [DONE]\n\n";

/** What the client must see: each event with its trailing null usage removed, the usage chunk gone. */
function expected(events: string[]): string {
  return events.map((e) => e.replace(/,\s*"usage"\s*:\s*null\s*}(\s*)$/gm, "}$1")).join("");
}

test("any chunking of a stream gives the same bytes, the null usage stripped and usage read", () => {
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom(...EVENTS), { minLength: 1, maxLength: 12 }),
      fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 20 }),
      (events, cuts) => {
        const whole = Buffer.from(events.join("") + USAGE + DONE);
        const reader = new UsageReader("text/event-stream", true);
        let out = "";
        let at = 0;
        let i = 0;
        while (at < whole.length) {
          const size = cuts[i++ % cuts.length]!;
          out += reader.transform(whole.subarray(at, at + size)).toString();
          at += size;
        }
        out += reader.flush()?.toString() ?? "";
        assert.equal(out, expected(events) + DONE);
        assert.deepEqual(reader.usage, { inputTokens: 7, outputTokens: 3 });
        // Every event counted once whatever the cuts; the usage chunk and [DONE] carry no token.
        assert.equal(reader.events, events.length + 2);
        assert.equal(reader.framingEvents, 2);
      },
    ),
    { numRuns: 300, seed: 7 },
  );
});

test("a client that asked for usage gets every byte untouched, and the usage is read", () => {
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom(...EVENTS), { minLength: 1, maxLength: 12 }),
      fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 20 }),
      (events, cuts) => {
        const whole = Buffer.from(events.join("") + USAGE + DONE);
        const reader = new UsageReader("text/event-stream", false);
        const out: Buffer[] = [];
        let at = 0;
        let i = 0;
        while (at < whole.length) {
          const size = cuts[i++ % cuts.length]!;
          out.push(reader.transform(whole.subarray(at, at + size)));
          at += size;
        }
        assert.equal(reader.flush(), undefined);
        assert.ok(Buffer.concat(out).equals(whole));
        assert.deepEqual(reader.usage, { inputTokens: 7, outputTokens: 3 });
        // Every event counted once whatever the cuts; the usage chunk and [DONE] carry no token.
        assert.equal(reader.events, events.length + 2);
        assert.equal(reader.framingEvents, 2);
      },
    ),
    { numRuns: 300, seed: 11 },
  );
});

test("a stream cut off without its blank line still gives its last event to the client", () => {
  const reader = new UsageReader("text/event-stream", true);
  const first = reader.transform(Buffer.from('data: {"a":1,"usage":null}\n\ndata: {"b":2,"usage":null}'));
  assert.equal(first.toString(), 'data: {"a":1}\n\n');
  assert.equal(reader.flush()?.toString(), 'data: {"b":2}');
  assert.equal(reader.events, 2, "the last event counts too");
});

test("framing events: [DONE] with CRLF or spaces, a usage chunk without choices; a token event mentioning [DONE] is no frame", () => {
  const reader = new UsageReader("text/event-stream", false);
  reader.transform(Buffer.from('data: {"choices":[{"delta":{"content":"[DONE]"}}]}\n\n'));
  reader.transform(
    Buffer.from('data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\r\n\r\n'),
  );
  reader.transform(Buffer.from("data:  [DONE]\r\n\r\n"));
  assert.equal(reader.events, 3);
  assert.equal(reader.framingEvents, 2);
});

test("a non-stream JSON answer: usage read from the usage object alone, even past nested keys", () => {
  const reader = new UsageReader("application/json", false);
  const body = Buffer.from(
    '{"choices":[{"message":{"content":"{\\"usage\\": 1}"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}',
  );
  reader.transform(body.subarray(0, 10));
  reader.transform(body.subarray(10));
  reader.flush();
  assert.deepEqual(reader.usage, { inputTokens: 5, outputTokens: 2 });
});
