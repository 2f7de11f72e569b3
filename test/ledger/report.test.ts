/**
 * `sluice report`'s numbers: a preempted request (it had a slot, lost it before its first byte and
 * got a 503) counts as rejected and stays out of the wait quantiles; waits are whole ms and costs
 * are rounded the same way in JSON, CSV and the table; the notes under the table fit 80 columns.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { pino } from "pino";
import { DuckDbSink } from "../../src/ledger/duckdb.js";
import { formatResult } from "../../src/ledger/format.js";
import { openLedgerReader } from "../../src/ledger/query.js";
import { buildReport, REPORT_DECIMALS, REPORT_NOTES, reportTable } from "../../src/ledger/report.js";
import { LedgerWriter } from "../../src/ledger/writer.js";
import { outcome, tempDir } from "./services.js";

const NOW = Date.now();
const bulk = { tsMs: NOW - 60_000, tenantId: "auth:etl", effectiveClass: "bulk" } as const;

async function reportOf(path: string) {
  const reader = await openLedgerReader({ kind: "duckdb", path }, { snapshot: false });
  try {
    return await buildReport(reader, NOW - 3_600_000);
  } finally {
    await reader.close();
  }
}

test("a preempted request is rejected in the report, and its wait is not in the quantiles", async (t) => {
  const path = join(await tempDir(t), "ledger.duckdb");
  const w = new LedgerWriter(new DuckDbSink(path), { replica: "r1" }, pino({ level: "silent" }));
  w.start();
  // Three served after queueing 100, 200 and 300 ms.
  for (const wait of [100, 200, 300]) w.record(outcome({ ...bulk, admission: "queued", queueWaitMs: wait }));
  // Two that queued long, got a slot, and lost it to a higher class before their first byte.
  for (const admission of ["queued", "fast"] as const) {
    w.record(
      outcome({
        ...bulk,
        admission,
        outcome: "preempted",
        status: 503,
        errorCode: "scheduler_preempted",
        queueWaitMs: admission === "queued" ? 9_000 : 0,
        inputTokens: undefined,
        outputTokens: undefined,
        costUsd: undefined,
      }),
    );
  }
  // One refused outright.
  w.record(
    outcome({
      ...bulk,
      admission: "rejected",
      outcome: "rejected",
      status: 429,
      errorCode: "scheduler_queue_full",
    }),
  );
  await w.close();

  const report = await reportOf(path);
  assert.equal(report.rows.length, 1);
  const row = report.rows[0]!;
  assert.deepEqual(
    [row.requests, row.fast, row.queued, row.rejected],
    [6, 0, 3, 3],
    "requests, fast, queued, rejected",
  );
  assert.equal(row.queue_wait_p50_ms, 200, "the preempted requests' 9 s wait is not counted");
  assert.equal(row.queue_wait_p99_ms, 298, "whole ms (interpolated 298)");
  assert.deepEqual(row.errors, { scheduler_preempted: 2, scheduler_queue_full: 1 });
});

test("costs are rounded to 4 decimals in JSON, CSV and the table; other fractions lose binary noise", async (t) => {
  const path = join(await tempDir(t), "ledger.duckdb");
  const w = new LedgerWriter(new DuckDbSink(path), { replica: "r1" }, pino({ level: "silent" }));
  w.start();
  // Sums of costs like these print 19.598544000000402 unrounded.
  for (let i = 0; i < 1000; i++) w.record(outcome({ ...bulk, costUsd: 0.019598544 }));
  w.record(outcome({ ...bulk, tenantId: "auth:tiny", costUsd: 0.05 }));
  await w.close();

  const report = await reportOf(path);
  assert.deepEqual(
    report.rows.map((r) => [r.tenant_id, r.cost_usd]),
    [
      ["auth:etl", 19.5985],
      ["auth:tiny", 0.05],
    ],
  );
  const table = reportTable(report);
  const csv = formatResult(table, "csv", { decimals: REPORT_DECIMALS }).split("\n");
  const costAt = csv[0]!.split(",").indexOf("cost_usd");
  assert.deepEqual(
    csv.slice(1, 3).map((line) => line.split(",")[costAt]),
    ["19.5985", "0.0500"],
  );
  const text = formatResult(table, "table", { decimals: REPORT_DECIMALS });
  assert.match(text, /auth:etl .* 19\.5985\s*$/m);
  assert.match(text, /auth:tiny .* 0\.0500\s*$/m);

  // A ledger query's CSV has no fixed decimals, but no noise from binary sums either.
  const sum = formatResult({ columns: ["s"], rows: [[19.598544000000402], [0.1 + 0.2]] }, "csv");
  assert.equal(sum, "s\n19.598544\n0.3\n");
});

test("the notes under the report's table fit 80 columns and say which requests each column counts", () => {
  for (const line of REPORT_NOTES) assert.ok(line.length <= 80, `${line.length} columns: ${line}`);
  const notes = REPORT_NOTES.join(" ");
  assert.match(notes, /preempted/);
  assert.match(notes, /answered 200, per model pool and class/);
});
