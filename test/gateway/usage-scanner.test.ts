/**
 * The SSE usage scanner's bound (issue 35, finding 6): whatever a worker sends, a stream's reader
 * holds at most MAX_PENDING_BYTES, works in time linear in the bytes, and past the bound passes the
 * bytes through unread (told once), in both modes (stripping the usage chunk it asked for, or not).
 * Any chunking of a stream still gives the same bytes and the same events.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { MAX_PENDING_BYTES, UsageReader, usageScannerStats } from "../../src/gateway/request/usage.js";
import { boundarylessStream, eventsReadOrPassed } from "../security/streams.js";

interface Run {
  out: Buffer;
  reader: UsageReader;
  told: number[];
  ms: number;
}

/** Feeds `whole` in pieces of the given sizes (cycled) and flushes. */
function run(whole: Buffer, strip: boolean, cuts: number[], maxPending?: number): Run {
  const reader = new UsageReader("text/event-stream", strip);
  if (maxPending !== undefined) reader.maxPendingBytes = maxPending;
  const told: number[] = [];
  reader.onOversized = (bytes) => told.push(bytes);
  const pieces: Buffer[] = [];
  const started = performance.now();
  let at = 0;
  let i = 0;
  while (at < whole.length) {
    const size = cuts[i++ % cuts.length]!;
    // A fresh copy per chunk, as from a socket: the reader may not keep the caller's memory.
    pieces.push(reader.transform(Buffer.from(whole.subarray(at, at + size))));
    at += size;
  }
  const tail = reader.flush();
  if (tail !== undefined) pieces.push(tail);
  return { out: Buffer.concat(pieces), reader, told, ms: performance.now() - started };
}

const MB = 1024 * 1024;

for (const strip of [true, false]) {
  const mode = strip ? "stripping the usage chunk it asked for" : "the client asked for usage";
  test(`a 24 MB stream with no event boundary, ${mode}: every byte passes, at most 1 MiB held, told once, linear`, () => {
    const whole = boundarylessStream(24 * MB);
    const before = usageScannerStats.oversizedEvents;
    const r = run(whole, strip, [64 * 1024]);
    assert.ok(r.out.equals(whole), "the client gets the worker's bytes unchanged");
    assert.ok(
      r.reader.peakHeldBytes <= MAX_PENDING_BYTES,
      `held ${r.reader.peakHeldBytes} bytes at most, bound ${MAX_PENDING_BYTES}`,
    );
    assert.ok(r.reader.peakHeldBytes > MAX_PENDING_BYTES - 64 * 1024, "it held up to the bound first");
    assert.equal(r.reader.heldBytes, 0, "nothing held after the end");
    assert.deepEqual(r.told.length, 1, "told once");
    assert.equal(r.reader.oversizedEvents, 1);
    assert.equal(r.reader.events, 1, "the one long event counts once");
    assert.equal(usageScannerStats.oversizedEvents, before + 1);
    assert.ok(usageScannerStats.peakHeldBytes <= MAX_PENDING_BYTES);
    // Linear: a byte is searched once and copied at most twice. Quadratic copying (the whole held
    // buffer again per chunk) took seconds here; linear work takes tens of ms.
    assert.ok(r.ms < 2000, `${r.ms.toFixed(0)} ms for 24 MB`);
  });
}

test("time is linear in the bytes: 4x the bytes costs about 4x the time, not 16x", () => {
  const small = boundarylessStream(8 * MB);
  const large = boundarylessStream(32 * MB);
  // Warm up, then the least of three runs each.
  run(small, true, [16 * 1024]);
  const best = (b: Buffer) => Math.min(...[0, 1, 2].map(() => run(b, true, [16 * 1024]).ms));
  const a = best(small);
  const b = best(large);
  assert.ok(b < Math.max(12 * a, 200), `8 MB: ${a.toFixed(1)} ms, 32 MB: ${b.toFixed(1)} ms`);
});

test("one chunk larger than the bound is passed through at once, unheld", () => {
  const whole = boundarylessStream(3 * MB);
  const r = run(whole, true, [3 * MB]);
  assert.ok(r.out.equals(whole));
  assert.equal(r.reader.peakHeldBytes, 0);
  assert.equal(r.told.length, 1);
});

const TOKEN = (c: string) => `data: {"id":"1","choices":[{"delta":{"content":"${c}"}}],"usage":null}\n\n`;
const USAGE = 'data: {"id":"1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n';
const DONE = "data: [DONE]\n\n";

test("after an event past the bound, scanning resumes: the usage is read and stripped, null usage cut", () => {
  const long = `data: ${"B".repeat(3 * MB)}\n\n`;
  const whole = Buffer.from(TOKEN("a") + long + TOKEN("b") + USAGE + DONE);
  for (const cut of [1000, 4096, 65_536, 1_000_003]) {
    const r = run(whole, true, [cut]);
    const want =
      TOKEN("a").replace(',"usage":null', "") + long + TOKEN("b").replace(',"usage":null', "") + DONE;
    assert.equal(r.out.toString(), want, `cut ${cut}`);
    assert.deepEqual(r.reader.usage, { inputTokens: 7, outputTokens: 3 });
    assert.equal(r.reader.events, 5, "token, long, token, usage, done");
    assert.equal(r.reader.framingEvents, 2);
    assert.ok(r.reader.peakHeldBytes <= MAX_PENDING_BYTES);
    assert.equal(r.told.length, 1);
  }
});

test("a stream that ends inside an event past the bound: nothing is held back at the end", () => {
  const whole = Buffer.from(TOKEN("a") + `data: ${"B".repeat(2 * MB)}`);
  const r = run(whole, true, [65_536]);
  assert.equal(r.out.toString(), TOKEN("a").replace(',"usage":null', "") + `data: ${"B".repeat(2 * MB)}`);
  assert.equal(r.reader.events, 2);
});

// Pieces that make blank lines of every kind, cut anywhere: "\n\n", "\r\n\r\n", and near misses.
const PIECES = [
  "\n",
  "\r",
  "\r\n",
  "\n\n",
  "\r\n\r\n",
  "data: x",
  "data: [DONE]",
  TOKEN("a").trimEnd(),
  'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}',
  "é✓",
];

test("any chunking gives the bytes and events of the whole stream read as one chunk", () => {
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom(...PIECES), { minLength: 1, maxLength: 40 }),
      fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 12 }),
      fc.boolean(),
      (pieces, cuts, strip) => {
        const whole = Buffer.from(pieces.join(""));
        const once = run(whole, strip, [whole.length]);
        const cut = run(whole, strip, cuts);
        assert.ok(cut.out.equals(once.out), `${JSON.stringify(pieces.join(""))} cut ${cuts}`);
        assert.equal(cut.reader.events, once.reader.events);
        assert.equal(cut.reader.framingEvents, once.reader.framingEvents);
        assert.deepEqual(cut.reader.usage, once.reader.usage);
        if (!strip) assert.ok(cut.out.equals(whole), "without stripping, the bytes are the worker's");
      },
    ),
    { numRuns: 2000, seed: 35 },
  );
});

test("with a small bound, any chunking: at most the bound held; each event goes out read or unchanged", () => {
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom(...PIECES, "data: ".padEnd(40, "B")), { minLength: 1, maxLength: 30 }),
      fc.array(fc.integer({ min: 1, max: 30 }), { minLength: 1, maxLength: 8 }),
      fc.integer({ min: 8, max: 64 }),
      fc.boolean(),
      (pieces, cuts, bound, strip) => {
        const whole = Buffer.from(pieces.join(""));
        const r = run(whole, strip, cuts, bound);
        assert.ok(r.reader.peakHeldBytes <= bound, `held ${r.reader.peakHeldBytes} > ${bound}`);
        assert.ok(r.told.length <= 1);
        if (!strip) {
          assert.ok(r.out.equals(whole));
          return;
        }
        // Each event is either read (as a reader given it alone makes it) or passed through as is.
        assert.ok(eventsReadOrPassed(r.out, whole), `output ${JSON.stringify(r.out.toString())}`);
      },
    ),
    { numRuns: 1500, seed: 6 },
  );
});
