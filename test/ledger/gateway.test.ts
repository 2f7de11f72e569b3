/**
 * The ledger through a real gateway over HTTP: one `usage` row per request whatever its outcome
 * (200, 401, 503 preempted, 429 queue full, 408 queue timeout on a ManualClock, 499 cancels), in
 * DuckDB and PostgreSQL; close writes everything; a batch retried after a lost acknowledgement
 * creates no duplicates; a sink that is down or a DuckDB file another process holds never touches
 * the requests, and the rows past the buffer are counted as dropped.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import type { OutcomeRecord } from "../../src/contracts/outcome.js";
import { DuckDbSink } from "../../src/ledger/duckdb.js";
import { PostgresSink } from "../../src/ledger/postgres.js";
import type { LedgerRow } from "../../src/ledger/row.js";
import type { LedgerSink } from "../../src/ledger/sink.js";
import type { LedgerOptions } from "../../src/ledger/writer.js";
import {
  assertError,
  assertOk,
  closedPort,
  type Fleet,
  LEVEL_WARN,
  type LogLine,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";
import { duckRows, pgRows, postgresSchema, ROOT, type Row, tempDir } from "./services.js";

/** One worker with one running slot: capacity 1. */
const ONE_SLOT = [{ maxRunningRequests: 1 }];

async function ledgerFleet(
  t: TestContext,
  ledger: LedgerOptions,
  extra: Parameters<typeof startFleet>[1] = {},
): Promise<Fleet> {
  return startFleet(t, {
    ...extra,
    gateway: { ...extra.gateway, ledger: { replica: "replica-a", ...ledger } },
  });
}

/** Every outcome the gateway emitted has exactly one row, equal field by field. */
function assertRowsMatch(rows: Row[], outcomes: OutcomeRecord[]): void {
  assert.equal(rows.length, outcomes.length, "one row per request");
  const byId = new Map(rows.map((r) => [r.request_id, r]));
  assert.equal(byId.size, rows.length, "no request id twice");
  for (const o of outcomes) {
    const r = byId.get(o.requestId);
    assert.ok(r, `a row for ${o.requestId} (${o.status})`);
    assert.equal(r.ts_ms, Math.round(o.tsMs));
    assert.equal(r.replica, "replica-a");
    assert.equal(r.tenant_id, o.tenantId);
    assert.equal(r.model, o.model ?? null);
    assert.equal(r.requested_class, o.requestedClass ?? null);
    assert.equal(r.effective_class, o.effectiveClass ?? null);
    assert.equal(r.admission, o.admission);
    assert.equal(r.outcome, o.outcome);
    assert.equal(r.status, o.status);
    assert.equal(r.error_code, o.errorCode ?? null);
    assert.ok(Math.abs((r.queue_wait_ms as number) - o.queueWaitMs) < 1e-6);
    assert.equal(r.ttft_ms === null, o.ttftMs === undefined);
    assert.ok(Math.abs((r.duration_ms as number) - o.durationMs) < 1e-6);
    assert.equal(r.input_tokens, o.inputTokens ?? null);
    assert.equal(r.output_tokens, o.outputTokens ?? null);
    assert.equal(r.estimated_tokens, o.estimatedTokens);
    assert.equal(r.cost_usd === null, o.costUsd === undefined);
    assert.equal(r.worker, o.worker ?? null);
  }
}

/**
 * Drives one request of each outcome through a fleet of capacity 1 (scheduler on, default queue
 * of 1 with a 0.3 s timeout on `clock`, interactive preempting on arrival, tenant acme with a key,
 * auth required).
 */
async function everyOutcome(fleet: Fleet, clock: ManualClock): Promise<void> {
  // 200, and 401 without a key.
  assertOk(await fleet.chatAs("acme"));
  assertError(await fleet.chatAs(undefined), 401, "missing_api_key");

  // 503: a bulk request before its first byte is preempted by an interactive one (200).
  const bulk = fleet.holdAs("acme", {}, { "x-smg-priority": "bulk", "x-mock-ttft-ms": "5000" });
  await waitFor(() => fleet.workers[0]!.stats().running === 1, "bulk reached the worker");
  assertOk(await fleet.chatAs("acme", {}, { "x-smg-priority": "interactive" }));
  assertError(await bulk.result, 503, "scheduler_preempted");
  await waitFor(() => fleet.workers[0]!.stats().running === 0, "the worker is idle");

  // 429 queue full, 408 queue timeout, 499 cancelled while queued, 499 cancelled in flight.
  const holder = fleet.holdAs("acme", {}, { "x-mock-ttft-ms": "5000" });
  await waitFor(() => fleet.workers[0]!.stats().running === 1, "the slot is taken");
  const timesOut = fleet.chatAs("acme");
  await waitFor(() => fleet.snapshot().queued === 1, "one request queued");
  assertError(await fleet.chatAs("acme"), 429, "scheduler_queue_full");
  clock.advance(300);
  assertError(await timesOut, 408, "scheduler_queue_timeout");
  const leaves = fleet.holdAs("acme");
  await waitFor(() => fleet.snapshot().queued === 1, "another request queued");
  await leaves.cancel();
  await waitFor(() => fleet.snapshot().queued === 0, "the queued client left");
  await holder.cancel();
  await waitFor(() => fleet.outcomes.length === 8, "eight outcomes");
}

function outcomeFleetOptions(clock: ManualClock): Parameters<typeof startFleet>[1] {
  return {
    workers: ONE_SLOT,
    tenants: ["acme"],
    schedulerYaml: smallSchedulerYaml({
      classes: {
        default: { queue_size: 1, queue_timeout_secs: 0.3 },
        interactive: { preempt_after_secs: 0 },
      },
    }),
    gateway: { requireAuth: true, clock },
  };
}

const OUTCOME_KINDS = [
  [200, "ok"],
  [401, "rejected"],
  [503, "preempted"],
  [429, "rejected"],
  [408, "timeout"],
  [499, "cancelled"],
] as const;

describe("ledger through the gateway", () => {
  test("DuckDB: one row per request across outcomes, all written by close", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    const clock = new ManualClock();
    const fleet = await ledgerFleet(t, { target: { kind: "duckdb", path } }, outcomeFleetOptions(clock));
    await everyOutcome(fleet, clock);
    for (const [status, kind] of OUTCOME_KINDS) {
      assert.ok(
        fleet.outcomes.some((o) => o.status === status && o.outcome === kind),
        `an outcome ${status} ${kind}`,
      );
    }
    // Nothing was flushed by hand: close writes what is buffered.
    await fleet.gateway.close();
    assertRowsMatch(await duckRows(path, "SELECT * FROM usage"), fleet.outcomes);
    const minutes = await duckRows(path, "SELECT sum(requests) AS n FROM usage_minute");
    assert.equal(minutes[0]!.n, fleet.outcomes.length, "the rollups count every request");
  });

  test("close: a request still in flight is cut, and its row is written with the rest", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    const fleet = await ledgerFleet(t, { target: { kind: "duckdb", path } });
    assertOk(await fleet.chat());
    const held = fleet.hold({}, { "x-mock-ttft-ms": "5000" });
    await waitFor(() => fleet.workers[0]!.stats().running === 1, "the request reached the worker");
    await fleet.gateway.close();
    assert.ok((await held.result) instanceof Error, "the client's connection was closed");
    assert.equal(fleet.outcomes.length, 2);
    assertRowsMatch(await duckRows(path, "SELECT * FROM usage"), fleet.outcomes);
  });

  test("PostgreSQL: one row per request across outcomes; rollups agree with the rows", async (t) => {
    const url = await postgresSchema(t);
    if (url === undefined) return;
    const clock = new ManualClock();
    const fleet = await ledgerFleet(t, { target: { kind: "postgres", url } }, outcomeFleetOptions(clock));
    await everyOutcome(fleet, clock);
    await fleet.gateway.ledger!.flush();
    assertRowsMatch(await pgRows(url, "SELECT * FROM usage"), fleet.outcomes);
    const rollup = await pgRows(
      url,
      "SELECT admission, outcome, sum(requests) AS n FROM usage_minute GROUP BY 1, 2 ORDER BY 1, 2",
    );
    const direct = await pgRows(
      url,
      "SELECT admission, outcome, count(*) AS n FROM usage GROUP BY 1, 2 ORDER BY 1, 2",
    );
    assert.deepEqual(rollup, direct);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_ledger_rows_total"), fleet.outcomes.length);
    assert.equal(metric(s, "sluice_ledger_buffer_rows"), 0);
    assert.equal(metric(s, "sluice_ledger_up"), 1);
  });

  for (const kind of ["duckdb", "postgres"] as const) {
    test(`${kind}: a batch retried after its acknowledgement was lost creates no duplicates`, async (t) => {
      let target: LedgerSink;
      let count: (sql: string) => Promise<Row[]>;
      if (kind === "duckdb") {
        const path = join(await tempDir(t), "ledger.duckdb");
        target = new DuckDbSink(path);
        count = (sql) => duckRows(path, sql);
      } else {
        const url = await postgresSchema(t);
        if (url === undefined) return;
        target = new PostgresSink(url);
        count = (sql) => pgRows(url, sql);
      }
      // The first write commits, then fails as if its answer had been lost on the way back.
      const retries: boolean[] = [];
      const sink: LedgerSink = {
        description: target.description,
        open: () => target.open(),
        async write(rows: readonly LedgerRow[], retry: boolean) {
          retries.push(retry);
          await target.write(rows, retry);
          if (retries.length === 1) throw new Error("injected: the acknowledgement was lost");
        },
        rollup: (minutes) => target.rollup(minutes),
        retain: (cutoff, limit) => target.retain(cutoff, limit),
        ping: () => target.ping(),
        close: () => target.close(),
      };
      // Only flush() writes here (the timer would race the test).
      const fleet = await ledgerFleet(t, { target: { kind: "sink", sink }, flushIntervalMs: 3_600_000 });
      for (let i = 0; i < 5; i++) assertOk(await fleet.chat());
      // The ledger may have started a write as it opened; either way the first write fails and the
      // next flush retries it.
      const failed = await fleet.gateway.ledger!.flush().then(
        () => false,
        (err: Error) => /could not write/.test(err.message),
      );
      if (failed) {
        assert.deepEqual(retries, [false]);
        assert.equal(metric(await fleet.scrape(), "sluice_ledger_up"), 0);
        await fleet.gateway.ledger!.flush();
      }
      assert.deepEqual(retries.slice(0, 2), [false, true], "the failed batch was retried, marked as a retry");
      assert.ok(
        retries.slice(2).every((r) => !r),
        "later batches are not retries",
      );
      assertOk(await fleet.chat());
      await fleet.gateway.ledger!.flush();
      const s = await fleet.scrape();
      assert.equal(metric(s, "sluice_ledger_rows_total"), 6);
      assert.equal(metric(s, "sluice_ledger_up"), 1);
      const warned = fleet.logs.filter((l) => /ledger write failed, retrying/.test(l.msg));
      assert.equal(warned.length, 1, "the failure is logged once");
      assert.ok(fleet.logs.some((l) => /ledger writes resumed/.test(l.msg)));
      // DuckDB's file can be read once the gateway lets go of it.
      if (kind === "duckdb") await fleet.gateway.close();
      const [counts] = await count("SELECT count(*) AS n, count(DISTINCT request_id) AS d FROM usage");
      assert.deepEqual(counts, { n: 6, d: 6 });
    });
  }

  test("PostgreSQL unreachable: requests are served, rows past the buffer are dropped and counted", async (t) => {
    const url = `postgres://postgres@127.0.0.1:${await closedPort()}/test`;
    const fleet = await ledgerFleet(t, {
      target: { kind: "postgres", url },
      bufferRows: 3,
      closeTimeoutMs: 300,
    });
    await servedWithoutLedger(fleet, 6, 3);
    const started = performance.now();
    await fleet.gateway.close();
    assert.ok(performance.now() - started < 3000, "close does not wait for a sink that is down");
    const warnings = fleet.logs.filter((l) => l.msg.startsWith("no ledger"));
    assert.equal(warnings.length, 1, "logged once");
    assert.equal(warnings[0]!.level, LEVEL_WARN);
    assert.match(warnings[0]!.msg, /ECONNREFUSED/);
    assert.ok(fleet.logs.some((l) => /3 rows could not be written before shutdown/.test(l.msg)));
    const drops = fleet.logs.filter((l) => l.msg.startsWith("ledger dropped"));
    assert.ok(drops.length >= 1 && drops.length <= 2, "drops are logged once per interval (and at close)");
  });

  test("a DuckDB file another process holds: the gateway serves, says why once, and writes once it is free", async (t) => {
    const path = join(await tempDir(t), "shared.duckdb");
    const holder = await holdDuckDbFile(t, path);
    const fleet = await ledgerFleet(t, {
      target: { kind: "duckdb", path },
      bufferRows: 2,
      reopenIntervalMs: 200,
    });
    const warning = await servedWithoutLedger(fleet, 4, 2);
    assert.match(warning.msg, new RegExp(`held by .*PID ${holder.pid}`));
    assert.match(warning.msg, /one process write a file/);
    assert.match(warning.msg, /postgres:\/\//);
    // More attempts fail while it is held; the warning stays one line.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(fleet.logs.filter((l) => l.msg.startsWith("no ledger")).length, 1);

    holder.kill("SIGKILL");
    await waitFor(() => fleet.gateway.ledger!.stats().open, "the ledger opened once the file was free", {
      timeoutMs: 5000,
    });
    await fleet.gateway.ledger!.flush();
    await fleet.gateway.close();
    const rows = await duckRows(path, "SELECT request_id FROM usage ORDER BY ts_ms");
    assert.deepEqual(
      rows.map((r) => r.request_id),
      fleet.outcomes.slice(0, 2).map((o) => o.requestId),
      "the two buffered rows were written",
    );
  });
});

/**
 * Sends `requests` chats to a gateway whose ledger cannot open (all served), waits for its one
 * warning and checks the buffer holds `buffered` rows and the rest were dropped. Returns the warning.
 */
async function servedWithoutLedger(fleet: Fleet, requests: number, buffered: number): Promise<LogLine> {
  for (let i = 0; i < requests; i++) assertOk(await fleet.chat());
  await waitFor(() => fleet.logs.some((l) => l.msg.startsWith("no ledger")), "the warning");
  const s = await fleet.scrape();
  assert.equal(metric(s, "sluice_ledger_dropped_rows_total", { reason: "buffer_full" }), requests - buffered);
  assert.equal(metric(s, "sluice_ledger_buffer_rows"), buffered);
  assert.equal(metric(s, "sluice_ledger_rows_total"), 0);
  assert.equal(metric(s, "sluice_ledger_up"), 0);
  return fleet.logs.find((l) => l.msg.startsWith("no ledger"))!;
}

/** A child process that opens `path` with DuckDB (read-write) and keeps it until killed. */
async function holdDuckDbFile(t: TestContext, path: string): Promise<ChildProcess & { pid: number }> {
  const script =
    "const { DuckDBInstance } = require('@duckdb/node-api');" +
    "DuckDBInstance.create(process.argv[1]).then(async (db) => { const c = await db.connect();" +
    " await c.run('CREATE TABLE IF NOT EXISTS other (x INTEGER)'); process.stdout.write('ready\\n'); });" +
    "setInterval(() => {}, 1000);";
  const child = spawn(process.execPath, ["-e", script, path], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  let out = "";
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  await waitFor(() => out.includes("ready"), `the child holds the file (${out})`, { timeoutMs: 10_000 });
  return child as ChildProcess & { pid: number };
}
