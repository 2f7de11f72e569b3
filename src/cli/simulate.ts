/**
 * `sluice simulate <scenario.yaml>`: runs a scenario's policies against simulated workers on
 * virtual time and prints a summary table (or the JSON report with --json); --out DIR also writes
 * report.json, summary.txt and SVG charts there, atomically. See docs/simulate.md.
 */
import { Command, InvalidArgumentError } from "commander";
import { writeAttemptsCsv } from "../sim/export.js";
import { loadScenario, simulate } from "../sim/index.js";
import { kneeSweep, kneeTable } from "../sim/knee.js";
import { writeOutputDir } from "../sim/output.js";
import type { AttemptRow } from "../sim/run.js";
import { POLICY_NAMES, type PolicyName } from "../sim/scenario.js";
import { reportCharts } from "../sim/svg.js";
import { summaryTable } from "../sim/table.js";

function intArg(raw: string): number {
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(n) || n < 0)
    throw new InvalidArgumentError("must be an integer >= 0");
  return n;
}

const UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
function durationArg(raw: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(raw);
  if (!m || Number(m[1]) <= 0)
    throw new InvalidArgumentError("must be a duration > 0 (seconds, or e.g. 90s, 10m, 1h)");
  return Number(m[1]) * UNITS[m[2] ?? "s"]!;
}

function policiesArg(raw: string): PolicyName[] {
  const list = raw.split(",").map((s) => s.trim());
  for (const p of list) {
    if (!(POLICY_NAMES as readonly string[]).includes(p)) {
      throw new InvalidArgumentError(`must be a comma-separated list of ${POLICY_NAMES.join(", ")}`);
    }
  }
  return list as PolicyName[];
}

interface SimulateFlags {
  seed?: number;
  out?: string;
  json?: boolean;
  watch?: boolean;
  duration?: number;
  policies?: PolicyName[];
  knee?: boolean;
  speed?: number;
  exportRequests?: string;
  kneePhase?: string;
  kneeSloMs?: number;
}

function msArg(raw: string): number {
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError("must be a number > 0");
  return n;
}

export async function runSimulateCli(argv: string[]): Promise<void> {
  const program = new Command("sluice simulate")
    .description("Run a scenario against simulated workers with the real scheduler on virtual time")
    .argument("<scenario>", "scenario YAML file (see docs/simulate.md)")
    .option("--seed <n>", "random seed (overrides the scenario's)", intArg)
    .option("--out <dir>", "write report.json, summary.txt and charts/*.svg to this directory")
    .option("--json", "print the JSON report instead of the table")
    .option("--watch", "print progress to stderr while it runs")
    .option("--duration <d>", "simulate this long instead of the scenario's duration (e.g. 5m)", durationArg)
    .option("--policies <list>", `run only these policies (${POLICY_NAMES.join(",")})`, policiesArg)
    .option("--speed <x>", "replay every trace this many times faster (2: twice the load)", msArg)
    .option(
      "--export-requests <file.csv>",
      "write one row per request attempt (every policy) to this CSV file (docs/simulate.md)",
    )
    .option("--knee", "instead of the scenario, sweep the fleet's concurrency and print its knee")
    .option("--knee-phase <phase>", "with --knee: the rates, slowdowns and failures of this phase")
    .option(
      "--knee-slo-ms <ms>",
      "with --knee: the p99 TPOT SLO (default: the tenants' lowest tpot_ms)",
      msArg,
    )
    .exitOverride()
    .configureOutput({ writeErr: () => {} })
    .allowExcessArguments(false);
  program.parse(argv, { from: "user" });
  const flags = program.opts<SimulateFlags>();
  const path = program.args[0]!;
  const scenario = loadScenario(path, {
    seed: flags.seed,
    durationSecs: flags.duration,
    policies: flags.policies,
    speed: flags.speed,
  });
  const exportRows: { policy: PolicyName; rows: AttemptRow[] }[] = [];
  const started = performance.now();
  const wall = () => ((performance.now() - started) / 1000).toFixed(1);
  if (flags.knee) {
    const k = await kneeSweep(scenario, { phase: flags.kneePhase, sloMs: flags.kneeSloMs });
    process.stdout.write(flags.json ? `${JSON.stringify(k, null, 1)}\n` : kneeTable(scenario, k));
    return;
  }
  const report = await simulate(scenario, {
    attempts: flags.exportRequests !== undefined,
    onAttempts:
      flags.exportRequests !== undefined ? (policy, rows) => exportRows.push({ policy, rows }) : undefined,
    onProgress: flags.watch
      ? (p) =>
          process.stderr.write(
            `  t=${(p.simMs / 1000).toFixed(0)}s  queued=${p.queued}  in flight=${p.inflight}  done=${p.done}  (${wall()} s wall)\n`,
          )
      : undefined,
    onRunDone: flags.watch
      ? (policy, info) => process.stderr.write(`${policy}: ${info.events} events, ${wall()} s wall\n`)
      : undefined,
  });
  if (flags.exportRequests !== undefined) await writeAttemptsCsv(flags.exportRequests, exportRows);
  const json = `${JSON.stringify(report, null, 1)}\n`;
  const table = summaryTable(report);
  if (flags.out !== undefined) {
    const files: Record<string, string> = { "report.json": json, "summary.txt": table };
    for (const [name, svg] of Object.entries(reportCharts(report))) files[`charts/${name}`] = svg;
    await writeOutputDir(flags.out, files);
  }
  process.stdout.write(flags.json ? json : table);
  if (!flags.json) {
    process.stderr.write(
      `simulated in ${wall()} s${flags.out !== undefined ? `; wrote ${flags.out}` : ""}\n`,
    );
  }
}
