/**
 * `sluice` explains itself: --help lists the subcommands (and still the gateway's flags), --version
 * prints the package's version, `sluice help <command>` prints that command's help, every usage
 * line starts with `sluice`, an unknown command is named, and the mock worker does not default to
 * the gateway's port.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { DEMO_WORKERS } from "../../src/cli/demo.js";
import { buildCommand } from "../../src/cli/flags.js";
import { mockWorkerCommand } from "../../src/mock-worker/cli.js";
import { runCli } from "../helpers/cli-process.js";

const SUBCOMMANDS = ["demo", "mock-worker", "simulate", "report", "ledger", "check-config"];
/** A child's time limit: starting tsx takes seconds on a loaded machine. */
const SLOW = 60_000;

describe("sluice --help, --version, help <command>", () => {
  test("--help lists every subcommand with a line of its own, then the gateway's flags", async () => {
    const run = await runCli(["--help"], SLOW);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stderr, "");
    assert.match(run.stdout, /^Usage: sluice \[options\]/);
    assert.match(run.stdout, /sluice <command> \[options\]/);
    const commands = run.stdout.slice(run.stdout.indexOf("Commands:"), run.stdout.indexOf("Options:"));
    for (const name of SUBCOMMANDS) {
      assert.match(commands, new RegExp(`^ {2}${name} +\\S`, "m"), `--help lists ${name}`);
    }
    assert.match(run.stdout, /--worker-urls/, "the gateway's flags follow");
    // The part sluice adds fits an 80-column terminal.
    for (const line of run.stdout.slice(0, run.stdout.indexOf("Options:")).split("\n")) {
      assert.ok(line.length <= 80, `${line.length} columns: ${line}`);
    }
    const help = await runCli(["help"], SLOW);
    assert.equal(help.stdout, run.stdout, "sluice help is sluice --help");
  });

  test("--version prints the package's version", async () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    const run = await runCli(["--version"], SLOW);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, `sluice ${pkg.version}\n`);
  });

  test("help <command> prints the command's usage, starting with sluice, as <command> --help does", async () => {
    // One at a time: each is a process of its own, on a machine other tests share.
    for (const name of SUBCOMMANDS) {
      const run = await runCli(["help", name], SLOW);
      assert.equal(run.code, 0, `${name}: ${run.stderr}`);
      assert.match(run.stdout, new RegExp(`^Usage: sluice ${name} `), `sluice help ${name}`);
      assert.match(run.stdout, /Options:/);
    }
    const viaFlag = await runCli(["report", "--help"], SLOW);
    assert.equal(viaFlag.stdout, (await runCli(["help", "report"], SLOW)).stdout);
    const query = await runCli(["ledger", "query", "--help"], SLOW);
    assert.match(query.stdout, /^Usage: sluice ledger query \[options\] <sql>/);
  });

  test("an unknown command is named, with the commands there are (exit 2)", async () => {
    for (const args of [["frobnicate"], ["help", "frobnicate"]]) {
      const run = await runCli(args, SLOW);
      assert.equal(run.code, 2);
      assert.equal(run.stdout, "");
      assert.match(run.stderr, /^sluice: unknown command "frobnicate": the commands are demo, mock-worker/);
    }
  });
});

test("demo --help says what the demo starts", async () => {
  const run = await runCli(["demo", "--help"], SLOW);
  assert.equal(run.code, 0, run.stderr);
  const text = run.stdout.replace(/\s+/g, " ");
  assert.match(text, new RegExp(`${DEMO_WORKERS.length} mock workers`));
  for (const model of new Set(DEMO_WORKERS.map((w) => w.model))) {
    const n = DEMO_WORKERS.filter((w) => w.model === model).length;
    assert.ok(text.includes(`${n} for ${model}`), `${n} for ${model} in: ${text}`);
  }
  assert.match(text, /5 tenants/);
  assert.match(text, /--ledger <path> .*sluice-demo\.duckdb/);
});

test("the mock worker does not default to the gateway's port", () => {
  const portOf = (options: readonly { long?: string; defaultValue?: unknown }[]) =>
    options.find((o) => o.long === "--port")?.defaultValue;
  const gateway = portOf(buildCommand().options);
  const worker = portOf(mockWorkerCommand().options);
  assert.equal(gateway, 30000);
  assert.equal(typeof worker, "number");
  assert.notEqual(worker, gateway);
});
