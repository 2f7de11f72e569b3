/**
 * The ledger's commands as a person runs them: `sluice ledger query` (table, JSON, CSV; obleth's
 * ClickHouse-style query as written; a file a gateway holds), `sluice report`, the gateway's
 * --ledger flags and YAML keys, and SIGTERM writing the ledger before the gateway exits.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { describe, test } from "node:test";
import { pino } from "pino";
import { parseGatewayArgs } from "../../src/cli/flags.js";
import type { GatewaySettings } from "../../src/config/gateway-settings.js";
import { DuckDbSink } from "../../src/ledger/duckdb.js";
import { PostgresSink } from "../../src/ledger/postgres.js";
import type { LedgerSink } from "../../src/ledger/sink.js";
import { LedgerWriter } from "../../src/ledger/writer.js";
import { startMockWorker } from "../../src/mock-worker/index.js";
import { exited, listeningPort, type Run, runCli, startCli } from "../helpers/cli-process.js";
import { chatBody, sendTo, waitFor } from "../helpers/harness.js";
import { duckRows, outcome, postgresSchema, tempDir } from "./services.js";

const start = startCli;
const sluice = (...args: string[]): Promise<Run> => runCli(args);

const quiet = pino({ level: "silent" });
const NOW = Date.now();

/** Writes a small known ledger: acme (interactive and bulk) and beta (default) over the last minutes. */
async function fill(sink: LedgerSink): Promise<void> {
  const w = new LedgerWriter(sink, { replica: "r1" }, quiet);
  w.start();
  const at = (minutesAgo: number) => NOW - minutesAgo * 60_000;
  for (let i = 0; i < 4; i++) {
    w.record(outcome({ tsMs: at(5), tenantId: "auth:acme", effectiveClass: "interactive", inputTokens: 10 }));
  }
  for (const wait of [100, 200, 300]) {
    w.record(
      outcome({
        tsMs: at(5),
        tenantId: "auth:acme",
        effectiveClass: "bulk",
        admission: "queued",
        queueWaitMs: wait,
      }),
    );
  }
  const rejected = {
    admission: "rejected",
    outcome: "rejected",
    status: 429,
    inputTokens: undefined,
  } as const;
  for (let i = 0; i < 2; i++) {
    const code = "scheduler_queue_full";
    w.record(
      outcome({ tsMs: at(4), tenantId: "auth:acme", effectiveClass: "bulk", ...rejected, errorCode: code }),
    );
  }
  w.record(outcome({ tsMs: at(3), tenantId: "auth:beta", model: 'odd "model", with a comma', costUsd: 0.5 }));
  // Two hours ago: outside a one-hour window.
  w.record(outcome({ tsMs: at(120), tenantId: "auth:old" }));
  await w.close();
}

describe("sluice ledger query and sluice report", () => {
  test("ledger query: table, JSON and CSV; obleth's ClickHouse-style query runs as written on DuckDB", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await fill(new DuckDbSink(path));
    const ledger = `duckdb:${path}`;
    const obleth =
      "SELECT\ntenant_id,\nadmission,\ncount() AS requests,\navg(queue_wait_ms) AS avg_wait_ms\nFROM usage\n" +
      "WHERE ts_ms > (toUnixTimestamp(now() - INTERVAL 1 HOUR) * 1000)\nGROUP BY tenant_id, admission\n" +
      "ORDER BY requests DESC";
    const [table, json, csv] = await Promise.all([
      sluice(
        "ledger",
        "query",
        "SELECT tenant_id, count() AS n FROM usage GROUP BY ALL ORDER BY ALL",
        "--ledger",
        ledger,
      ),
      sluice("ledger", "query", obleth, "--ledger", ledger, "--format", "json"),
      sluice(
        "ledger",
        "query",
        "SELECT tenant_id, model, cost_usd FROM usage WHERE cost_usd > 0.1",
        "--ledger",
        ledger,
        "--format",
        "csv",
      ),
    ]);
    assert.equal(table.code, 0, table.stderr);
    assert.equal(
      table.stdout,
      ["tenant_id  n", "---------  -", "auth:acme  9", "auth:beta  1", "auth:old   1", "(3 rows)", ""].join(
        "\n",
      ),
    );
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout), [
      { tenant_id: "auth:acme", admission: "fast", requests: 4, avg_wait_ms: 0 },
      { tenant_id: "auth:acme", admission: "queued", requests: 3, avg_wait_ms: 200 },
      { tenant_id: "auth:acme", admission: "rejected", requests: 2, avg_wait_ms: 0 },
      { tenant_id: "auth:beta", admission: "fast", requests: 1, avg_wait_ms: 0 },
    ]);
    assert.equal(csv.code, 0, csv.stderr);
    assert.equal(csv.stdout, 'tenant_id,model,cost_usd\nauth:beta,"odd ""model"", with a comma",0.5\n');
  });

  test("errors: bad SQL (exit 1), a missing file (how it is made), a bad --format or --ledger (exit 2)", async (t) => {
    const dir = await tempDir(t);
    const path = join(dir, "ledger.duckdb");
    await fill(new DuckDbSink(path));
    const [bad, missing, format, target] = await Promise.all([
      sluice("ledger", "query", "SELECT nope FROM usage", "--ledger", `duckdb:${path}`),
      sluice("ledger", "query", "SELECT 1", "--ledger", `duckdb:${join(dir, "none.duckdb")}`),
      sluice("ledger", "query", "SELECT 1", "--ledger", `duckdb:${path}`, "--format", "xml"),
      sluice("report", "--ledger", "mysql://x"),
    ]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^sluice: .*nope/);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no ledger at .*none\.duckdb: a gateway creates it/);
    assert.equal(format.code, 2);
    assert.match(format.stderr, /--format.*table, json, csv/);
    assert.equal(target.code, 2);
    assert.match(target.stderr, /--ledger.*duckdb:PATH, postgres:\/\//);
  });

  test("a file a running gateway holds: the query says so and how to get around it; --snapshot reads a copy", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await fill(new DuckDbSink(path));
    // This process holds the file, as a gateway does.
    const holder = new LedgerWriter(new DuckDbSink(path), {}, quiet);
    holder.start();
    t.after(() => holder.close());
    await waitFor(() => holder.stats().open, "the file is held", { timeoutMs: 10_000 });
    const [locked, snapshot] = await Promise.all([
      sluice("ledger", "query", "SELECT count(*) AS n FROM usage", "--ledger", `duckdb:${path}`),
      sluice(
        "ledger",
        "query",
        "SELECT count(*) AS n FROM usage",
        "--ledger",
        `duckdb:${path}`,
        "--snapshot",
        "--format",
        "json",
      ),
    ]);
    assert.equal(locked.code, 1);
    assert.match(locked.stderr, new RegExp(`is open in .*\\(PID ${process.pid}\\), a running gateway`));
    assert.match(locked.stderr, /--snapshot/);
    assert.match(locked.stderr, /postgres:\/\//);
    assert.equal(snapshot.code, 0, snapshot.stderr);
    assert.deepEqual(JSON.parse(snapshot.stdout), [{ n: 11 }]);
  });

  test("report --since 1h: per tenant and class, admissions, queue wait, tokens, cost and error codes", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await fill(new DuckDbSink(path));
    const [table, json] = await Promise.all([
      sluice("report", "--since", "1h", "--ledger", `duckdb:${path}`),
      sluice("report", "--ledger", `duckdb:${path}`, "--format", "json"),
    ]);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.split("\n");
    assert.match(lines[0]!, /^since \S+Z until \S+Z \(duckdb:/);
    assert.match(
      lines[1]!,
      /^tenant\s+class\s+requests\s+fast\s+queued\s+rejected\s+wait_p50_ms\s+wait_p99_ms/,
    );
    assert.match(lines[3]!, /^auth:acme\s+interactive\s+4\s+4\s+0\s+0\s+0\s+0\s+40\s+16\s+/);
    assert.match(lines[4]!, /^auth:acme\s+bulk\s+5\s+0\s+3\s+2\s+200\s+298\s+.*scheduler_queue_full:2$/);
    assert.ok(!table.stdout.includes("auth:old"), "two hours ago is outside the window");
    assert.equal(json.code, 0, json.stderr);
    const report = JSON.parse(json.stdout) as { rows: Array<Record<string, unknown>> };
    assert.deepEqual(
      report.rows.map((r) => [r.tenant_id, r.effective_class, r.requests, r.errors]),
      [
        ["auth:acme", "interactive", 4, {}],
        ["auth:acme", "bulk", 5, { scheduler_queue_full: 2 }],
        ["auth:beta", "default", 1, {}],
      ],
    );
    const bulk = report.rows[1]!;
    assert.equal(bulk.queue_wait_p50_ms, 200);
    assert.ok(Math.abs((bulk.queue_wait_p99_ms as number) - 298) < 1e-9);
    assert.equal(report.rows[2]!.cost_usd, 0.5);
  });

  test("report and query against PostgreSQL", async (t) => {
    const url = await postgresSchema(t);
    if (url === undefined) return;
    await fill(new PostgresSink(url));
    const [report, query] = await Promise.all([
      sluice("report", "--since", "30m", "--ledger", url, "--format", "json"),
      sluice(
        "ledger",
        "query",
        "SELECT count(*) AS n, sum(input_tokens) AS i FROM usage",
        "--ledger",
        url,
        "--format",
        "csv",
      ),
    ]);
    assert.equal(report.code, 0, report.stderr);
    const rows = (JSON.parse(report.stdout) as { rows: Array<Record<string, unknown>> }).rows;
    assert.deepEqual(
      rows.map((r) => [
        r.tenant_id,
        r.effective_class,
        r.fast,
        r.queued,
        r.rejected,
        r.queue_wait_p50_ms,
        r.errors,
      ]),
      [
        ["auth:acme", "interactive", 4, 0, 0, 0, {}],
        ["auth:acme", "bulk", 0, 3, 2, 200, { scheduler_queue_full: 2 }],
        ["auth:beta", "default", 1, 0, 0, 0, {}],
      ],
    );
    assert.equal(query.code, 0, query.stderr);
    assert.equal(query.stdout, "n,i\n11,55\n");
  });
});

describe("the gateway's ledger flags", () => {
  test("--ledger defaults to duckdb:sluice-ledger.duckdb in the working directory; YAML keys; bad values name the flag", async (t) => {
    const f = parseGatewayArgs(["--worker-urls", "http://w1:8000"]);
    assert.deepEqual(f.ledger, {
      target: { kind: "duckdb", path: resolve("sluice-ledger.duckdb") },
      retentionDays: 30,
      replica: undefined,
    });
    const file = join(await tempDir(t), "gateway.yaml");
    await writeFile(file, "worker_urls: [http://w1:8000]\nledger: 'off'\nledger_retention_days: 7\n");
    assert.deepEqual(parseGatewayArgs(["--config", file]).ledger, {
      target: { kind: "off" },
      retentionDays: 7,
      replica: undefined,
    });
    assert.deepEqual(
      parseGatewayArgs(["--config", file, "--ledger", "postgres://u@h:5432/db"]).ledger.target,
      {
        kind: "postgres",
        url: "postgres://u@h:5432/db",
      },
    );
    assert.throws(
      () => parseGatewayArgs(["--worker-urls", "http://w1:8000", "--ledger", "sqlite:x"]),
      /--ledger/,
    );
    assert.throws(
      () => parseGatewayArgs(["--worker-urls", "http://w1:8000", "--ledger-retention-days", "0"]),
      /--ledger-retention-days/,
    );
  });

  test("the replica column: --replica-id when given (with or without shared state), else the state's default", () => {
    const base = ["--worker-urls", "http://w1:8000", "--ledger", "off"];
    // A writer that is never started: it only names its replica.
    const writerOf = (flags: GatewaySettings) =>
      new LedgerWriter(new DuckDbSink("unopened.duckdb"), flags.ledger, quiet);
    assert.equal(writerOf(parseGatewayArgs([...base, "--replica-id", "gw-7"])).replica, "gw-7");
    const shared = parseGatewayArgs([
      ...base,
      "--state-url",
      "redis://127.0.0.1:6379/0",
      "--replica-id",
      "gw-8",
    ]);
    assert.equal(writerOf(shared).replica, "gw-8");
    assert.equal(shared.state!.replicaId, "gw-8");
    const byDefault = parseGatewayArgs([...base, "--state-url", "redis://127.0.0.1:6379/0"]);
    assert.equal(writerOf(byDefault).replica, byDefault.state!.replicaId);
    assert.equal(
      writerOf(parseGatewayArgs(base)).replica,
      `${hostname().replace(/[^A-Za-z0-9._:@-]/g, "-")}-${process.pid}`,
    );
  });

  test("SIGTERM: the gateway writes its ledger before it exits", async (t) => {
    const worker = await startMockWorker({ ttftMs: 1, tokenDelayMs: 1 });
    t.after(() => worker.close());
    const path = join(await tempDir(t), "ledger.duckdb");
    const { child, out } = start(["--worker-urls", worker.url, "--port", "0", "--ledger", `duckdb:${path}`]);
    t.after(() => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });
    const port = await listeningPort(child, out);
    for (let i = 0; i < 3; i++) {
      const reply = await sendTo(`http://127.0.0.1:${port}`, "/v1/chat/completions", { body: chatBody() });
      assert.equal(reply.status, 200);
    }
    child.kill("SIGTERM");
    assert.equal(await exited(child), 0, out.stderr);
    assert.ok(out.stdout.includes('"ledger open"'), out.stdout);
    const rows = await duckRows(path, "SELECT status, count(*) AS n FROM usage GROUP BY ALL");
    assert.deepEqual(rows, [{ status: 200, n: 3 }]);
  });

  test("SIGTERM drains: requests running or queued when it comes finish whole, each leaves a row", async (t) => {
    // One slot, so of the three requests one runs and two queue when the signal arrives.
    const worker = await startMockWorker({ ttftMs: 1, tokenDelayMs: 40, maxRunningRequests: 1 });
    t.after(() => worker.close());
    const path = join(await tempDir(t), "ledger.duckdb");
    const { child, out } = start(["--worker-urls", worker.url, "--port", "0", "--ledger", `duckdb:${path}`]);
    t.after(() => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });
    const base = `http://127.0.0.1:${await listeningPort(child, out)}`;
    const replies = [1, 2, 3].map(() =>
      sendTo(base, "/v1/chat/completions", { body: chatBody({ max_tokens: 8, stream: true }) }),
    );
    // All three must have reached the gateway first: one that is still connecting when the
    // listener closes is refused, which is the drain's contract but not this test's subject.
    await waitFor(() => worker.stats().open === 3, "the three requests reached the worker");
    await waitFor(() => worker.stats().running === 1, "one request runs on the worker");
    child.kill("SIGTERM");
    await waitFor(() => out.stdout.includes('"draining: waiting'), "the gateway logged its drain");
    for (const reply of await Promise.all(replies)) {
      assert.equal(reply.status, 200);
      assert.ok(reply.text.trimEnd().endsWith("data: [DONE]"), `a whole stream: ${reply.text}`);
    }
    assert.equal(await exited(child), 0, out.stderr);
    assert.ok(out.stdout.includes('"drained: every request finished"'), out.stdout);
    const rows = await duckRows(path, "SELECT status, outcome, count(*) AS n FROM usage GROUP BY ALL");
    assert.deepEqual(rows, [{ status: 200, outcome: "ok", n: 3 }]);
  });

  test("SIGTERM: past --drain-timeout-secs the requests still running are cut and recorded", async (t) => {
    const worker = await startMockWorker({ ttftMs: 1, tokenDelayMs: 200 });
    t.after(() => worker.close());
    const path = join(await tempDir(t), "ledger.duckdb");
    const { child, out } = start([
      "--worker-urls",
      worker.url,
      "--port",
      "0",
      "--ledger",
      `duckdb:${path}`,
      "--drain-timeout-secs",
      "0.3",
    ]);
    t.after(() => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });
    const base = `http://127.0.0.1:${await listeningPort(child, out)}`;
    const reply = sendTo(base, "/v1/chat/completions", {
      body: chatBody({ max_tokens: 100, stream: true }),
    }).catch((err: Error) => err);
    await waitFor(() => worker.stats().running === 1, "the request runs on the worker");
    child.kill("SIGTERM");
    assert.equal(await exited(child), 0, out.stderr);
    assert.ok(out.stdout.includes("drain timed out after 300 ms"), out.stdout);
    const cut = await reply;
    assert.ok(cut instanceof Error || !cut.text.includes("[DONE]"), "the stream was cut before its end");
    const rows = await duckRows(path, "SELECT count(*) AS n FROM usage");
    assert.deepEqual(rows, [{ n: 1 }]);
  });
});
