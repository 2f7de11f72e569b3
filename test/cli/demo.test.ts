/**
 * `sluice demo` as a newcomer runs it (piped, so plain lines): it prints where the dashboard is and
 * its token, a table whose columns say what they count, and ends with the report of what it ran,
 * read back from the DuckDB ledger it wrote. In an 80-column pseudo-terminal (util-linux `script`),
 * its table redraws in place without piling frames up.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { exited, REPO_ROOT, runCli } from "../helpers/cli-process.js";
import { duckRows } from "../ledger/services.js";

test("sluice demo: dashboard URL and token, a table per second, the report from its ledger", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "sluice-demo-test-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const ledger = join(dir, "demo.duckdb");
  const run = await runCli(["demo", "--duration-secs", "3", "--ledger", ledger], 60_000);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /dashboard: http:\/\/127\.0\.0\.1:\d+\/dashboard {3}admin token: [0-9a-f]{24}/);
  assert.match(run.stdout, /model pool \/ class +completed +running +queued +refused +wait p50 +wait p99/);
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

const ESC = "\u001b";

/** `script` from util-linux runs a command in a pseudo-terminal; a machine without it skips. */
function hasScript(): boolean {
  try {
    execFileSync("script", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

test("sluice demo in an 80-column terminal: lines fit, each redraw erases the lines it drew", async (t) => {
  if (!hasScript()) {
    t.skip("no util-linux script here to make a pseudo-terminal");
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), "sluice-demo-pty-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const ledger = join(dir, "demo.duckdb");
  // stderr to a file: a log line on the terminal is not the table's, and would move the cursor too.
  const command =
    `stty cols 80 rows 50; exec "${process.execPath}" --import tsx src/cli/main.ts demo ` +
    `--duration-secs 3 --ledger "${ledger}" 2>"${join(dir, "stderr")}"`;
  const child = spawn("script", ["-qfc", command, "/dev/null"], {
    cwd: REPO_ROOT,
    stdio: ["ignore", "pipe", "inherit"],
  });
  let raw = "";
  child.stdout.on("data", (d: Buffer) => {
    raw += d.toString("utf8");
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), 90_000);
  assert.equal(await exited(child), 0, raw);
  clearTimeout(timer);

  const out = raw.replaceAll("\r\n", "\n");
  const live = out.slice(out.indexOf("t="), out.indexOf("\ndone:"));
  // [frame, lines erased, frame, lines erased, frame, ...]
  const parts = live.split(new RegExp(`${ESC}\\[(\\d+)A${ESC}\\[J`));
  const frames = parts.filter((_, i) => i % 2 === 0);
  assert.ok(frames.length >= 2, `the table was redrawn in place:\n${JSON.stringify(live)}`);
  for (let i = 1; i < parts.length; i += 2) {
    const before = parts[i - 1]!.split("\n").slice(0, -1);
    assert.equal(Number(parts[i]), before.length, `redraw ${(i + 1) / 2} erases the lines of the last frame`);
  }
  for (const frame of frames) {
    assert.match(frame, /^t= *\d+ s {2}fleet: capacity 20/);
    for (const line of frame.split("\n")) assert.ok(line.length < 80, `${line.length} columns: ${line}`);
  }
});
