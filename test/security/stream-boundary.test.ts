/**
 * A worker stream without an event boundary (issue 35, finding 6): `data: BBB…` lines and never a
 * blank line, 24 MB of them. With the gateway stripping the usage chunk it asked for (the client
 * did not ask for usage) it used to buffer the whole stream, copying it again per chunk: /health took
 * seconds and the client got nothing, not even headers. Now, over real loopback HTTP (a raw socket
 * as the client, so every byte is seen): headers come at once, every byte arrives unchanged,
 * /health stays fast while it runs, the scanner holds at most MAX_PENDING_BYTES, and one WARN line
 * says so; in both modes.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";
import { MAX_PENDING_BYTES, usageScannerStats } from "../../src/gateway/request/usage.js";
import { LEVEL_WARN, smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";
import { rawChat } from "./raw.js";
import { boundarylessStream, pollHealth, readStream, type StreamRead, streamingWorker } from "./streams.js";

const MB = 1024 * 1024;

describe("a worker stream without an event boundary", { timeout: 120_000 }, () => {
  for (const clientAsksUsage of [false, true]) {
    const mode = clientAsksUsage
      ? "the client asked for usage"
      : "the gateway strips the usage chunk it asked for";
    test(`24 MB, ${mode}: headers at once, every byte, /health fast, at most 1 MiB held, one WARN`, async (t) => {
      const stream = boundarylessStream(24 * MB, 997);
      const want = createHash("sha256").update(stream).digest("hex");
      const url = await streamingWorker(t, () => stream);
      const fleet = await startFleet(t, {
        workers: [],
        extraWorkers: [{ url, capacity: 4 }],
        schedulerYaml: smallSchedulerYaml(),
      });
      const port = Number(new URL(fleet.url).port);
      const body = JSON.stringify({
        model: "m",
        messages: [{ role: "user", content: "hi" }],
        stream: true,
        ...(clientAsksUsage ? { stream_options: { include_usage: true } } : {}),
      });
      const peakBefore = usageScannerStats.peakHeldBytes;
      let streaming = true;
      const health = pollHealth(fleet.url, () => !streaming);
      let read: StreamRead;
      try {
        read = await readStream(port, rawChat(body));
      } finally {
        streaming = false;
      }
      const latencies = await health;
      assert.equal(read.status, 200);
      assert.ok(read.headersMs < 1000, `headers after ${read.headersMs.toFixed(0)} ms`);
      assert.equal(read.bodyBytes, stream.length, "every byte reached the client");
      assert.equal(read.bodySha256, want, "unchanged");
      const worst = Math.max(...latencies);
      t.diagnostic(
        `stream ${read.totalMs.toFixed(0)} ms, headers ${read.headersMs.toFixed(0)} ms, ` +
          `/health ${latencies.map((l) => l.toFixed(0)).join(",")} ms, scanner peak ${usageScannerStats.peakHeldBytes} B`,
      );
      assert.ok(worst < 1000, `/health took ${worst.toFixed(0)} ms while the stream ran`);
      assert.ok(
        usageScannerStats.peakHeldBytes <= MAX_PENDING_BYTES,
        `the scanner held ${usageScannerStats.peakHeldBytes} bytes (bound ${MAX_PENDING_BYTES})`,
      );
      assert.ok(peakBefore <= MAX_PENDING_BYTES);
      const warns = fleet.logs.filter((l) => l.level === LEVEL_WARN && /usage scanner's bound/.test(l.msg));
      assert.equal(warns.length, 1, "logged once");
      assert.equal(warns[0]!.limit, MAX_PENDING_BYTES);
      // The slot and the worker come back, and the gateway still serves.
      await waitFor(() => fleet.snapshot().inflight === 0, "slot released");
      assert.equal(fleet.gateway.workers.workers[0]!.inflight, 0);
    });
  }

  test("four such streams at once: all complete, /health stays fast", async (t) => {
    const stream = boundarylessStream(8 * MB, 4093, true);
    const want = createHash("sha256").update(stream).digest("hex");
    const url = await streamingWorker(t, () => stream);
    const fleet = await startFleet(t, {
      workers: [],
      extraWorkers: [{ url, capacity: 4 }],
      schedulerYaml: smallSchedulerYaml(),
    });
    const port = Number(new URL(fleet.url).port);
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true });
    let streaming = true;
    const health = pollHealth(fleet.url, () => !streaming);
    let reads: StreamRead[];
    try {
      reads = await Promise.all([0, 1, 2, 3].map(() => readStream(port, rawChat(body))));
    } finally {
      streaming = false;
    }
    const latencies = await health;
    for (const r of reads) {
      assert.equal(r.status, 200);
      assert.equal(r.bodySha256, want);
    }
    assert.ok(Math.max(...latencies) < 1000, `/health worst ${Math.max(...latencies).toFixed(0)} ms`);
    assert.ok(usageScannerStats.peakHeldBytes <= MAX_PENDING_BYTES);
  });
});
