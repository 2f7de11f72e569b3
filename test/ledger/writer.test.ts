/**
 * The ledger writer's rules, on a sink the test controls and on a real DuckDB file: the buffer's
 * bound and the drops it counts, when batches start, what happens to a batch the sink refuses or a
 * sink that does not answer, close writing everything, rollups and retention.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, test } from "node:test";
import { Registry } from "prom-client";
import { DuckDbSink } from "../../src/ledger/duckdb.js";
import { PostgresSink } from "../../src/ledger/postgres.js";
import type { LedgerRow } from "../../src/ledger/row.js";
import type { LedgerSink } from "../../src/ledger/sink.js";
import { type LedgerOptions, LedgerWriter } from "../../src/ledger/writer.js";
import { captureLogger, metric, scrape, waitFor } from "../helpers/harness.js";
import { duckRows, outcome, pgRows, postgresSchema, type Row, tempDir } from "./services.js";

class FakeSink implements LedgerSink {
  readonly description = "fake";
  readonly rows: LedgerRow[] = [];
  readonly batches: Array<{ size: number; retry: boolean }> = [];
  /** Writes that fail before this many succeed. */
  failures = 0;
  /** Writes never answer. */
  hang = false;
  answersPing = true;
  closed = false;
  async open(): Promise<void> {}
  async write(rows: readonly LedgerRow[], retry: boolean): Promise<void> {
    this.batches.push({ size: rows.length, retry });
    if (this.hang) return new Promise(() => {});
    if (this.failures > 0) {
      this.failures--;
      throw new Error("the sink refuses this batch");
    }
    this.rows.push(...rows);
  }
  async rollup(): Promise<void> {}
  async retain(): Promise<number> {
    return 0;
  }
  async ping(): Promise<void> {
    if (!this.answersPing) throw new Error("down");
  }
  async close(): Promise<void> {
    this.closed = true;
  }
}

function writer(sink: LedgerSink, options: Omit<LedgerOptions, "target"> = {}) {
  const registry = new Registry();
  const { logger, lines } = captureLogger();
  const w = new LedgerWriter(sink, { replica: "r1", ...options }, logger, registry);
  w.start();
  return { w, lines, metrics: () => scrape({ metricsText: () => registry.metrics() } as never) };
}

describe("ledger writer", () => {
  test("record() never waits: a sink that never answers fills the buffer, the rest is dropped and counted", async (t) => {
    const sink = new FakeSink();
    sink.hang = true;
    const { w, lines, metrics } = writer(sink, { bufferRows: 5, batchRows: 2, closeTimeoutMs: 100 });
    t.after(() => w.close());
    const started = performance.now();
    for (let i = 0; i < 12; i++) w.record(outcome());
    assert.ok(performance.now() - started < 50);
    await waitFor(() => sink.batches.length === 1, "a write started (and hangs)");
    let s = await metrics();
    assert.equal(metric(s, "sluice_ledger_buffer_rows"), 5);
    assert.equal(metric(s, "sluice_ledger_dropped_rows_total", { reason: "buffer_full" }), 7);
    assert.equal(lines.filter((l) => l.msg.startsWith("ledger dropped")).length, 1, "one line per interval");
    const closing = performance.now();
    await w.close();
    assert.ok(performance.now() - closing < 2000, "close gives up on a sink that hangs");
    s = await metrics();
    assert.equal(metric(s, "sluice_ledger_dropped_rows_total", { reason: "shutdown" }), 5);
    w.record(outcome());
    assert.equal(w.stats().dropped, 13, "a record after close is dropped");
  });

  test("a batch starts as soon as batchRows rows wait, not at the next period", async (t) => {
    const sink = new FakeSink();
    const { w } = writer(sink, { batchRows: 10, flushIntervalMs: 3_600_000 });
    t.after(() => w.close());
    await waitFor(() => w.stats().open, "open");
    for (let i = 0; i < 9; i++) w.record(outcome());
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(sink.batches.length, 0, "9 rows wait for the period");
    w.record(outcome());
    await waitFor(() => sink.rows.length === 10, "the 10th row started a batch");
    assert.deepEqual(sink.batches, [{ size: 10, retry: false }]);
  });

  test("a batch the sink refuses is retried, then dropped after maxAttempts while the sink answers", async (t) => {
    const sink = new FakeSink();
    sink.failures = 100;
    const { w, lines, metrics } = writer(sink, { maxAttempts: 3, flushIntervalMs: 3_600_000 });
    t.after(() => w.close());
    await waitFor(() => w.stats().open, "open");
    for (let i = 0; i < 4; i++) w.record(outcome());
    await assert.rejects(w.flush());
    await assert.rejects(w.flush());
    assert.equal(w.stats().buffered, 4, "kept for another attempt");
    await w.flush(); // the third attempt fails, the sink answers a ping: the batch is dropped
    assert.deepEqual(
      sink.batches.map((b) => b.retry),
      [false, true, true],
    );
    const s = await metrics();
    assert.equal(metric(s, "sluice_ledger_dropped_rows_total", { reason: "write_failed" }), 4);
    assert.equal(w.stats().buffered, 0);
    assert.ok(lines.some((l) => /batch dropped after 3 failed attempts/.test(l.msg)));

    // A sink that does not answer is down, not refusing: its batch waits.
    sink.answersPing = false;
    w.record(outcome());
    for (let i = 0; i < 5; i++) await assert.rejects(w.flush());
    assert.equal(w.stats().buffered, 1);
    sink.failures = 0;
    await w.flush();
    assert.equal(sink.rows.length, 1);
    assert.equal(sink.batches.at(-1)!.retry, true);
  });

  test("close writes everything buffered (25,000 rows)", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    const { w } = writer(new DuckDbSink(path), { bufferRows: 30_000, flushIntervalMs: 3_600_000 });
    await waitFor(() => w.stats().open, "open", { timeoutMs: 10_000 });
    for (let i = 0; i < 25_000; i++) w.record(outcome({ tsMs: 1_700_000_000_000 + i }));
    await w.close();
    const [row] = await duckRows(path, "SELECT count(*) AS n, count(DISTINCT request_id) AS d FROM usage");
    assert.deepEqual(row, { n: 25_000, d: 25_000 });
    assert.equal(w.stats().written, 25_000);
  });

  for (const kind of ["duckdb", "postgres"] as const) {
    test(`${kind}: rollups per minute match the rows; retention deletes old rows and rollups from both tables`, async (t) => {
      let sink: () => LedgerSink;
      let rows: (sql: string) => Promise<Row[]>;
      if (kind === "duckdb") {
        const path = join(await tempDir(t), "ledger.duckdb");
        sink = () => new DuckDbSink(path);
        rows = (sql) => duckRows(path, sql);
      } else {
        const url = await postgresSchema(t);
        if (url === undefined) return;
        sink = () => new PostgresSink(url);
        rows = (sql) => pgRows(url, sql);
      }
      const now = Date.now();
      const old = now - 40 * 86_400_000;
      const first = writer(sink(), { retentionDays: 365 });
      await waitFor(() => first.w.stats().open, "open", { timeoutMs: 10_000 });
      const waits = [0, 10, 20, 30, 40, 50, 60, 70, 80, 1000];
      for (const [i, wait] of waits.entries()) {
        first.w.record(outcome({ tsMs: now, queueWaitMs: wait, admission: "queued", inputTokens: i }));
      }
      first.w.record(outcome({ tsMs: old }));
      first.w.record(outcome({ tsMs: old + 1, admission: "rejected", outcome: "rejected", errorCode: "x" }));
      await first.w.flush();
      const minute = Math.floor(now / 60_000) * 60_000;
      await first.w.close();
      const [queued] = await rows(
        "SELECT requests, queue_wait_ms_sum, queue_wait_ms_p50, queue_wait_ms_p99, queue_wait_ms_max, " +
          `input_tokens FROM usage_minute WHERE minute_ms = ${minute} AND admission = 'queued'`,
      );
      // Continuous quantiles over the 10 waits: p99 sits 0.91 of the way from 80 to 1000.
      assert.ok(Math.abs((queued!.queue_wait_ms_p99 as number) - (80 + 0.91 * 920)) < 1e-9);
      assert.deepEqual(
        { ...queued, queue_wait_ms_p99: 0 },
        {
          requests: 10,
          queue_wait_ms_sum: 1360,
          queue_wait_ms_p50: 45,
          queue_wait_ms_p99: 0,
          queue_wait_ms_max: 1000,
          input_tokens: 45,
        },
      );
      assert.equal((await rows("SELECT * FROM usage_minute")).length, 3, "one group now, two 40 days ago");

      // A gateway started with 30 days of retention deletes what is older, in both tables.
      const second = writer(sink(), { retentionDays: 30 });
      await waitFor(
        () => second.lines.some((l) => l.msg === "ledger retention deleted old rows" && l.rows === 2),
        "retention ran at open",
        { timeoutMs: 10_000 },
      );
      await second.w.close();
      assert.deepEqual(await rows("SELECT count(*) AS n FROM usage"), [{ n: 10 }]);
      assert.deepEqual(await rows("SELECT DISTINCT minute_ms FROM usage_minute"), [{ minute_ms: minute }]);
    });
  }
});
