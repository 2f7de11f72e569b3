/**
 * Fuzz: generated worker streams through a real gateway (issue 35, finding 6). Each case is an SSE
 * answer made of runs of `data:` lines with no blank line (up to 3 MB, past the scanner's bound or
 * not), token events, usage chunks, blank lines of both kinds, stray CR and LF, written by the
 * worker in pieces of any size; the client asks for usage or not (then the gateway strips the chunk
 * it asked for). Cases run in concurrent batches over raw sockets while /health is polled.
 *
 * Invariants, per answer: 200 with its head at once; without stripping, the worker's bytes
 * unchanged; with stripping, each event either read (null usage cut, the usage chunk dropped) or
 * passed through unchanged. Per batch: /health never slow, the scanner never held more than its
 * bound, and after it no slot or worker request left. CI runs SLUICE_FUZZ_STREAM_RUNS batches
 * (default 40, at most ~20 s); SLUICE_FUZZ_SEED replays a seed.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { MAX_PENDING_BYTES, usageScannerStats } from "../../src/gateway/request/usage.js";
import { type Fleet, smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";
import { rawChat } from "../security/raw.js";
import {
  boundarylessStream,
  eventsReadOrPassed,
  pollHealth,
  readStream,
  streamingWorker,
} from "../security/streams.js";

const RUNS = Number(process.env["SLUICE_FUZZ_STREAM_RUNS"] ?? 40);
const SEED = process.env["SLUICE_FUZZ_SEED"]
  ? Number(process.env["SLUICE_FUZZ_SEED"])
  : Date.now() % 2_147_483_647;
/** /health answers within this while streams run (seconds when the scanner copied per chunk). */
const HEALTH_MS = 1000;

type Segment =
  | { kind: "lines"; bytes: number; lineBytes: number; crlf: boolean }
  | { kind: "token"; text: string; spaced: boolean }
  | { kind: "usage" }
  | { kind: "blank"; crlf: boolean }
  | { kind: "stray"; text: string };

interface StreamCase {
  segments: Segment[];
  pieceBytes: number;
  clientAsksUsage: boolean;
}

const segmentArb: fc.Arbitrary<Segment> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("lines" as const),
      // Most runs stay under the bound; some cross it, a few by far.
      bytes: fc.oneof(
        { weight: 3, arbitrary: fc.integer({ min: 1, max: 64 * 1024 }) },
        {
          weight: 2,
          arbitrary: fc.integer({ min: MAX_PENDING_BYTES - 4096, max: MAX_PENDING_BYTES + 4096 }),
        },
        { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 * 1024 * 1024 }) },
      ),
      lineBytes: fc.integer({ min: 12, max: 70_000 }),
      crlf: fc.boolean(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("token" as const),
      text: fc.string({ maxLength: 12 }),
      spaced: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "usage" as const }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("blank" as const), crlf: fc.boolean() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("stray" as const),
      text: fc.constantFrom("\r", "\n", "\r\n", "\n\r", "data: [DONE]", ": comment"),
    }),
  },
);

const caseArb: fc.Arbitrary<StreamCase> = fc.record({
  segments: fc.array(segmentArb, { minLength: 1, maxLength: 10 }),
  pieceBytes: fc.oneof(fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1000, max: 256 * 1024 })),
  clientAsksUsage: fc.boolean(),
});

function render(c: StreamCase): Buffer {
  const parts: Buffer[] = [];
  for (const s of c.segments) {
    switch (s.kind) {
      case "lines":
        parts.push(boundarylessStream(s.bytes, s.lineBytes, s.crlf));
        break;
      case "token": {
        const delta = JSON.stringify({ content: s.text });
        parts.push(
          Buffer.from(
            s.spaced
              ? `data: {"id":"1", "choices": [{"delta": ${delta}}], "usage": null}\n\n`
              : `data: {"id":"1","choices":[{"delta":${delta}}],"usage":null}\n\n`,
          ),
        );
        break;
      }
      case "usage":
        parts.push(
          Buffer.from('data: {"id":"1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}\n\n'),
        );
        break;
      case "blank":
        parts.push(Buffer.from(s.crlf ? "\r\n\r\n" : "\n\n"));
        break;
      case "stray":
        parts.push(Buffer.from(s.text));
        break;
    }
  }
  return Buffer.concat(parts);
}

describe("fuzz: worker streams without event boundaries", { timeout: 120_000 }, () => {
  test(`generated streams keep the invariants (seed ${SEED})`, { timeout: 90_000 }, async (t) => {
    t.diagnostic(`replay with SLUICE_FUZZ_SEED=${SEED}`);
    const answers = new Map<string, { bytes: Buffer; pieceBytes: number }>();
    const url = await streamingWorker(t, (headers) => {
      const answer = answers.get(String(headers["x-stream-case"]));
      assert.ok(answer, "every request is a case's");
      return answer;
    });
    const fleet: Fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url, capacity: 4 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    const port = Number(new URL(fleet.url).port);
    let next = 0;
    let cases = 0;
    let bytes = 0;
    let worstHealth = 0;
    const started = performance.now();
    await fc.assert(
      fc.asyncProperty(fc.array(caseArb, { minLength: 1, maxLength: 4 }), async (batch) => {
        let running = true;
        const health = pollHealth(fleet.url, () => !running, 20);
        let reads: Array<{ c: StreamCase; whole: Buffer; read: Awaited<ReturnType<typeof readStream>> }>;
        try {
          reads = await Promise.all(
            batch.map(async (c) => {
              const id = String(next++);
              const whole = render(c);
              // Tiny pieces over megabytes would load the worker (in this process), not the gateway.
              const pieceBytes = Math.max(c.pieceBytes, Math.ceil(whole.length / 4096));
              answers.set(id, { bytes: whole, pieceBytes });
              const body = JSON.stringify({
                model: "m",
                messages: [{ role: "user", content: "hi" }],
                stream: true,
                ...(c.clientAsksUsage ? { stream_options: { include_usage: true } } : {}),
              });
              const read = await readStream(port, rawChat(body, `x-stream-case: ${id}\r\n`), { keep: true });
              answers.delete(id);
              return { c, whole, read };
            }),
          );
        } finally {
          running = false;
        }
        const latencies = await health;
        for (const { c, whole, read } of reads) {
          cases++;
          bytes += whole.length;
          assert.equal(read.status, 200);
          assert.ok(read.headersMs < 2000, `head after ${read.headersMs.toFixed(0)} ms`);
          const out = read.body!;
          if (c.clientAsksUsage) assert.ok(out.equals(whole), "without stripping, the worker's bytes");
          else assert.ok(eventsReadOrPassed(out, whole), "each event read or passed through unchanged");
        }
        const worst = Math.max(0, ...latencies);
        worstHealth = Math.max(worstHealth, worst);
        assert.ok(worst < HEALTH_MS, `/health took ${worst.toFixed(0)} ms while the batch ran`);
        assert.ok(usageScannerStats.peakHeldBytes <= MAX_PENDING_BYTES, "the scanner's bound");
        await waitFor(
          () => fleet.snapshot().inflight === 0 && fleet.gateway.workers.workers[0]!.inflight === 0,
          "slots and the worker released",
        );
      }),
      {
        numRuns: RUNS,
        seed: SEED,
        interruptAfterTimeLimit: 20_000,
        markInterruptAsFailure: false,
        includeErrorInReport: true,
        // A failing case is large: shrink a little, not for minutes.
        endOnFailure: true,
      },
    );
    t.diagnostic(
      `${cases} streams, ${(bytes / 1024 / 1024).toFixed(1)} MB in ${((performance.now() - started) / 1000).toFixed(1)} s; ` +
        `/health worst ${worstHealth.toFixed(0)} ms; scanner peak ${usageScannerStats.peakHeldBytes} B`,
    );
  });
});
