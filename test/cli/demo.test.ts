/**
 * `sluice demo` as a newcomer runs it (piped, so plain lines): it prints where the dashboard is and
 * its token, a table whose columns say what they count, and ends with the report of what it ran,
 * read back from the DuckDB ledger it wrote.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { runCli } from "../helpers/cli-process.js";
import { duckRows } from "../ledger/services.js";

test("sluice demo: dashboard URL and token, a table per second, the report from its ledger", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "sluice-demo-test-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const ledger = join(dir, "demo.duckdb");
  const run = await runCli(["demo", "--duration-secs", "3", "--ledger", ledger], 60_000);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /dashboard: http:\/\/127\.0\.0\.1:\d+\/dashboard {3}admin token: [0-9a-f]{24}/);
  assert.match(
    run.stdout,
    /model pool \/ class +completed +running +queued +refused, by error code +wait p50 +wait p99/,
  );
  // Two model pools, each with its own line.
  assert.match(run.stdout, /llama-3-8b \(capacity 16, running \d+, queued \d+\)/);
  assert.match(run.stdout, /llama-3-70b \(capacity 4, running \d+, queued \d+\)/);
  assert.ok(
    run.stdout.includes("completed: answered 200 to the end"),
    "the legend says what each column counts",
  );
  const report = run.stdout.slice(run.stdout.indexOf("sluice report --since"));
  assert.match(report, /tenant +class +requests +fast +queued +rejected/);
  for (const tenant of ["auth:chat-app", "auth:batch-etl", "auth:analytics", "auth:research"]) {
    assert.ok(report.includes(tenant), `the report lists ${tenant}:\n${report}`);
  }
  // The report's request count per tenant is what the ledger holds.
  const rows = await duckRows(ledger, "SELECT tenant_id, count(*) AS n FROM usage GROUP BY ALL ORDER BY 1");
  for (const row of rows as { tenant_id: string; n: number }[]) {
    assert.match(report, new RegExp(`${row.tenant_id} +\\S+ +${row.n} `), `${row.tenant_id}: ${row.n} rows`);
  }
});
