/**
 * The engine proof benchmark (issue 39, "Proof"): the Azure and Mooncake trace replays at 1.5x and
 * 3x their own rate under three capacity settings, against the best fixed limit in hindsight, with
 * what the engine saw (engine-report.ts). Rewrites its section of BENCHMARKS.md between its markers
 * (appended at the end the first time).
 *
 *   node --import tsx src/sim/engine-bench.ts [--no-write] [--settings requests,kv_tokens,adaptive]
 *
 * Settings: `requests` (the sluice policy at the workers' reported max_running), `kv_tokens` (the
 * sluice policy with `policy.capacity_unit: kv_tokens`), `adaptive` (the sluice-adaptive policy).
 */
import { readFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { basename, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { ReservationsExceedCapacityError } from "@sluice/scheduler/core/errors.js";
import { Slots } from "@sluice/scheduler/core/slots.js";
import { parse as parseYaml } from "yaml";
import type { EngineWindow } from "./engine-report.js";
import { simulate } from "./index.js";
import { rewriteSection } from "./output.js";
import type { PolicyReport } from "./report.js";
import { type PolicyName, resolveScenario, type Scenario } from "./scenario.js";

export const SETTINGS = ["requests", "kv_tokens", "adaptive"] as const;
export type Setting = (typeof SETTINGS)[number];

/** The traces and load factors the proof names: 1.5x and 3x the trace's own rate. */
const TRACES = ["azure-conv-code", "mooncake-conv"] as const;
const SPEEDS = [1.5, 3] as const;

/**
 * Pinned limits swept for the oracle, as fractions of the workers' reported capacity (the two
 * traces run 2 and 8 workers, so one absolute grid would be coarse for one of them). Above 1 the
 * workers take more than their max_running and queue the rest themselves.
 */
const ORACLE_FRACTIONS = [
  0.0625, 0.09375, 0.125, 0.1875, 0.25, 0.3125, 0.375, 0.4375, 0.5, 0.625, 0.75, 0.875, 1, 1.25, 1.5, 2,
] as const;

const START = "<!-- engine-bench:start -->";
const END = "<!-- engine-bench:end -->";
const root = (p: string) => fileURLToPath(new URL(`../../${p}`, import.meta.url));

/** One replay to run: a scenario file at a speed, optionally cut short. */
export interface TraceCase {
  path: string;
  /** The replay's speed factor (`--speed`); undefined for a scenario that replays no trace. */
  speed: number | undefined;
  /** Seconds of arrivals (ScenarioOverrides.durationSecs); the whole replay when undefined. */
  durationSecs?: number | undefined;
}

/** One setting's run: what the engine saw over the whole replay, and the limit it ran at. */
export interface Cell {
  setting: Setting | "oracle";
  /** The pinned limit (oracle, or a run pinned by the caller). */
  pin: number | undefined;
  /** The limit as a table reads it: the reported count, a pin, or the adaptive median (range). */
  limit: string;
  offeredRps: number;
  engine: EngineWindow;
  /** Interactive: share of the SLO windows whose p99 TPOT is within the SLO. */
  tpotWindowsInSlo: number | null;
}

export class EngineBenchError extends Error {
  constructor(
    readonly code: "engine_bench_bad_flag" | "engine_bench_setting_unsupported" | "engine_bench_no_pin",
    message: string,
  ) {
    super(message);
    this.name = "EngineBenchError";
  }
}

const POLICY: Record<Setting, PolicyName> = {
  requests: "sluice",
  kv_tokens: "sluice",
  adaptive: "sluice-adaptive",
};

/**
 * The case's scenario under a setting. `kv_tokens` sets the YAML key `policy.capacity_unit`, so it
 * runs wherever the scenario loader knows that key, and fails with a clear error where it does not.
 */
export function scenarioFor(c: TraceCase, setting: Setting, pin?: number): Scenario {
  const doc = parseYaml(readFileSync(c.path, "utf8")) as Record<string, unknown>;
  if (setting === "kv_tokens") {
    const policy = (doc.policy ?? {}) as Record<string, unknown>;
    doc.policy = { ...policy, capacity_unit: "kv_tokens" };
  }
  let scenario: Scenario;
  try {
    scenario = resolveScenario(
      doc,
      { file: basename(c.path), baseDir: dirname(c.path) },
      { speed: c.speed, durationSecs: c.durationSecs, policies: [POLICY[setting]] },
    );
  } catch (err) {
    if (setting === "kv_tokens" && /capacity_unit/.test((err as Error).message)) {
      throw new EngineBenchError(
        "engine_bench_setting_unsupported",
        `--settings kv_tokens: this build's scenarios do not take policy.capacity_unit (${(err as Error).message}); run --settings requests,adaptive`,
      );
    }
    throw err;
  }
  return pin === undefined ? scenario : { ...scenario, capacityPin: pin };
}

function tpotWindows(report: PolicyReport): number | null {
  return report.capacity.windows.all?.classes.interactive?.tpot_slo_attainment ?? null;
}

/** Runs one setting (optionally pinned) on the case and reads what the engine saw. */
export async function runCell(c: TraceCase, setting: Setting, pin?: number): Promise<Cell> {
  const scenario = scenarioFor(c, setting, pin);
  const policy = POLICY[setting];
  const report = await simulate(scenario);
  const r = report.policies[policy]!;
  const lim = r.capacity.windows.all?.limit;
  const limit =
    pin !== undefined
      ? String(pin)
      : setting === "adaptive" && lim
        ? `${lim.final_median} (${lim.min}-${lim.max})`
        : setting === "kv_tokens"
          ? "KV tokens"
          : String(report.scenario.capacity);
  return {
    setting,
    pin,
    limit,
    offeredRps: r.totals.requests / (scenario.durationMs / 1000),
    engine: r.engine.all!,
    tpotWindowsInSlo: tpotWindows(r),
  };
}

/** The reported capacity of the case's workers (the sum of their max_running). */
export function reportedCapacity(c: TraceCase): number {
  return scenarioFor(c, "requests").workers.reduce((s, w) => s + w.profile.maxRunning, 0);
}

/** The oracle's pins for a reported capacity. */
export function oraclePins(reported: number): number[] {
  return [...new Set(ORACLE_FRACTIONS.map((f) => Math.max(1, Math.round(f * reported))))];
}

/** Whether the classes' reservations fit a capacity (the scheduler's own arithmetic). */
function reservationsFit(classes: Scenario["classes"], capacity: number): boolean {
  try {
    Slots.assertFits(classes, capacity);
    return true;
  } catch (err) {
    if (err instanceof ReservationsExceedCapacityError) return false;
    throw err;
  }
}

/**
 * The best fixed limit in hindsight: the `requests` setting pinned at each of `pins`, the pin with
 * the most goodput over the whole replay (the lower pin on a tie). Pins under the classes'
 * reservations are skipped: the gateway would not run them (it falls back to legacy admission).
 */
export async function oracle(c: TraceCase, pins: readonly number[]): Promise<Cell & { skipped: number[] }> {
  let best: Cell | undefined;
  const skipped: number[] = [];
  const classes = scenarioFor(c, "requests").classes;
  for (const pin of pins) {
    if (!reservationsFit(classes, pin)) {
      skipped.push(pin);
      continue;
    }
    const cell = await runCell(c, "requests", pin);
    if (best === undefined || cell.engine.goodput_rps > best.engine.goodput_rps) best = cell;
  }
  if (best === undefined)
    throw new EngineBenchError(
      "engine_bench_no_pin",
      `oracle: no pin of ${pins.join(", ")} fits the classes' reservations`,
    );
  return { ...best, setting: "oracle", skipped };
}

/** Every setting on the case, then the oracle. */
export async function benchCase(
  c: TraceCase,
  settings: readonly Setting[],
  pins: readonly number[] = oraclePins(reportedCapacity(c)),
): Promise<{ cells: Cell[]; oracle: Cell & { skipped: number[] } }> {
  const cells: Cell[] = [];
  for (const s of settings) cells.push(await runCell(c, s));
  return { cells, oracle: await oracle(c, pins) };
}

/** `--settings a,b`: known names, each once; any other flag but `--no-write` is refused. */
export function parseSettings(argv: readonly string[]): Setting[] {
  argv.forEach((a, k) => {
    if (a === "--no-write" || a === "--settings" || argv[k - 1] === "--settings") return;
    throw new EngineBenchError(
      "engine_bench_bad_flag",
      `unknown argument "${a}" (engine-bench takes --no-write and --settings ${SETTINGS.join(",")})`,
    );
  });
  const i = argv.indexOf("--settings");
  if (i === -1) return [...SETTINGS];
  const value = argv[i + 1];
  if (value === undefined || value.startsWith("--"))
    throw new EngineBenchError("engine_bench_bad_flag", `--settings needs a list of ${SETTINGS.join(", ")}`);
  const names = value.split(",").map((s) => s.trim());
  for (const n of names) {
    if (!(SETTINGS as readonly string[]).includes(n))
      throw new EngineBenchError(
        "engine_bench_bad_flag",
        `--settings: unknown setting "${n}" (one of ${SETTINGS.join(", ")})`,
      );
  }
  return SETTINGS.filter((s) => names.includes(s));
}

const pct = (v: number | null, digits = 0) => (v === null ? "n/a" : `${(v * 100).toFixed(digits)}%`);
const ms = (v: number | null) =>
  v === null ? "n/a" : v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`;

function row(trace: string, load: string, c: Cell, oracleGoodput: number): string {
  const e = c.engine;
  const label = c.setting === "oracle" ? "oracle: best fixed limit" : c.setting;
  return [
    trace,
    load,
    label,
    c.setting === "oracle" ? String(c.pin) : c.limit,
    ms(e.interactive_ttft_p99_ms),
    `${ms(e.queue_ms.p99)} (${pct(e.queue_ttft_ratio, 1)})`,
    `${pct(e.kv_utilization_at_saturation)} (${e.saturated_s} s)`,
    `${e.preemptions} (${pct(e.preemption_share, 1)})`,
    `${e.goodput_rps.toFixed(2)} (${pct(oracleGoodput > 0 ? e.goodput_rps / oracleGoodput : null)})`,
    pct(c.tpotWindowsInSlo),
  ].join(" | ");
}

interface CaseResult {
  trace: string;
  speed: number;
  offered: number;
  cells: Cell[];
  oracle: Cell & { skipped: number[] };
  seconds: number;
}

function table(results: CaseResult[]): string {
  const head = [
    "Trace",
    "Load",
    "Setting",
    "Limit",
    "Interactive TTFT p99",
    "Engine queue p99 (of TTFT p99)",
    "KV use at saturation (time saturated)",
    "Engine preemptions (of requests)",
    "Goodput req/s (of oracle)",
    "Interactive TPOT windows in SLO",
  ];
  const out = [`| ${head.join(" | ")} |`, `| ${head.map((_, i) => (i < 3 ? "---" : "---:")).join(" | ")} |`];
  for (const r of results) {
    const load = `${r.speed}x (${r.offered.toFixed(1)} req/s)`;
    for (const c of [...r.cells, r.oracle])
      out.push(`| ${row(r.trace, load, c, r.oracle.engine.goodput_rps)} |`);
  }
  return out.join("\n");
}

/** The proof's targets, per cell (null: not measured there). */
const TARGETS: { label: string; met: (c: Cell, oracleGoodput: number) => boolean | null }[] = [
  {
    label: "engine queue p99 <= 5% of interactive TTFT p99",
    met: (c) => (c.engine.queue_ttft_ratio === null ? null : c.engine.queue_ttft_ratio <= 0.05),
  },
  {
    label: "KV use at saturation >= 70%",
    met: (c) =>
      c.engine.kv_utilization_at_saturation === null ? null : c.engine.kv_utilization_at_saturation >= 0.7,
  },
  {
    label: "engine preemptions <= 1% of requests",
    met: (c) => (c.engine.preemption_share === null ? null : c.engine.preemption_share <= 0.01),
  },
  {
    label: "goodput >= 90% of the oracle's",
    met: (c, o) => (o > 0 ? c.engine.goodput_rps >= 0.9 * o : null),
  },
];

/** Per target, per setting: cases met out of cases measured. */
function targetLines(results: CaseResult[], settings: readonly (Setting | "oracle")[]): string[] {
  return TARGETS.map((t) => {
    const parts = settings.map((s) => {
      let met = 0;
      let measured = 0;
      for (const r of results) {
        const c = s === "oracle" ? r.oracle : r.cells.find((x) => x.setting === s);
        const ok = c === undefined ? null : t.met(c, r.oracle.engine.goodput_rps);
        if (ok === null) continue;
        measured++;
        if (ok) met++;
      }
      return `${s === "oracle" ? "oracle" : `\`${s}\``} ${met}/${measured}`;
    });
    return `- ${t.label}: ${parts.join(", ")}.`;
  });
}

async function main(argv: string[]): Promise<void> {
  const write = !argv.includes("--no-write");
  const settings = parseSettings(argv);
  const started = new Date();
  const load = loadavg().map((x) => x.toFixed(1));
  const t0 = performance.now();
  const results: CaseResult[] = [];
  for (const trace of TRACES) {
    for (const speed of SPEEDS) {
      const s0 = performance.now();
      const c: TraceCase = { path: root(`scenarios/${trace}.yaml`), speed };
      const { cells, oracle: best } = await benchCase(c, settings);
      results.push({
        trace,
        speed,
        offered: best.offeredRps,
        cells,
        oracle: best,
        seconds: (performance.now() - s0) / 1000,
      });
      process.stderr.write(`${trace} at ${speed}x: done\n`);
    }
  }
  const seconds = ((performance.now() - t0) / 1000).toFixed(0);
  const cpu = cpus()[0]?.model.trim() ?? "unknown CPU";
  const pinsOf = (trace: string) =>
    oraclePins(reportedCapacity({ path: root(`scenarios/${trace}.yaml`), speed: 1 }));
  const fleetOf = (trace: string) => {
    const w = scenarioFor({ path: root(`scenarios/${trace}.yaml`), speed: 1 }, "requests").workers;
    const profiles = [
      ...new Set(
        w.map(
          (x) => `${x.profileName}, max_running ${x.profile.maxRunning}, ${x.profile.kvTokens} KV tokens`,
        ),
      ),
    ];
    return `${w.length} workers (${profiles.join("; ")})`;
  };
  const ref = scenarioFor({ path: root(`scenarios/${TRACES[0]}.yaml`), speed: 1 }, "requests");
  const sloOf = (c: "interactive" | "default") =>
    `${c} TTFT ${(ref.slo[c].ttftMs ?? 0) / 1000} s${ref.slo[c].tpotMs === undefined ? "" : `, mean TPOT ${ref.slo[c].tpotMs} ms`}`;
  const section = [
    "## Engine signals on the trace replays (issue 39, `npm run bench:engine`)",
    "",
    `- Date: ${started.toISOString().replace(/\.\d+Z$/, "Z")}; machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}; load average at start ${load.join(" / ")}. Regenerate with \`npm run bench:engine\` (${seconds} s here; settings run: ${settings.join(", ")}).`,
    `- Wall time per case (settings and oracle sweep): ${results.map((r) => `${r.trace} ${r.speed}x ${r.seconds.toFixed(1)} s`).join(", ")}.`,
    settings.includes("kv_tokens")
      ? ""
      : "- The `kv_tokens` setting (`policy.capacity_unit: kv_tokens`) comes with the kv-tokens branch: this build's scenarios do not take that key yet, so its rows are missing here (`--settings requests,adaptive`).",
    "",
    `Method: scenarios/azure-conv-code.yaml (the first ten minutes of the Azure LLM inference trace 2023, conversation as interactive, code as default; ${fleetOf("azure-conv-code")}) and scenarios/mooncake-conv.yaml (the first ten minutes of the Mooncake conversation trace, prefix caching by block ids; ${fleetOf("mooncake-conv")}), each replayed with \`--speed\` 1.5 and 3. "Peak" here is the trace's own rate (its own arrival times) times that speed factor: 1.5x and 3x compress the replay's timeline by 1.5 and 3, so every burst in it arrives 1.5 and 3 times as fast; the load column gives the mean offered rate. Settings: \`requests\` is the sluice policy at the workers' reported count (the sum of their max_running); \`kv_tokens\` the sluice policy with \`policy.capacity_unit: kv_tokens\`; \`adaptive\` the sluice-adaptive policy with its defaults (its limit column: median over the run's second half, and range). Oracle: the best fixed limit in hindsight, the \`requests\` setting pinned at each of ${pinsOf("azure-conv-code").length} limits (1/16 to 2x the reported count: ${pinsOf("azure-conv-code").join(", ")} for Azure, ${pinsOf("mooncake-conv").join(", ")} for Mooncake), the pin with the most goodput. Workers: the simulator's step model (docs/simulate.md), a model, not a measurement. Figures over the whole replay (src/sim/engine-report.ts, the report's \`engine\` block):`,
    "",
    "- **Interactive TTFT p99**: arrival (first attempt) to first token, gateway queueing included.",
    "- **Engine queue p99**: per request that reached a worker, the time it spent in the worker's own waiting queue (from arrival at the worker to its first place in the running batch, plus any time back in that queue after a preemption inside the worker); in brackets, against the interactive TTFT p99 (target: at most 5%: queueing belongs in sluice, where priority and fairness apply).",
    `- **KV use at saturation**: the workers' mean KV occupancy over their KV capacity, sampled at the end of each ${ref.bucketMs / 1000} s bucket in which sluice had requests queued (the gateway saturated), averaged over those buckets (target: at least 70%); in brackets, how long that was.`,
    "- **Engine preemptions**: preemptions inside the workers on a full KV cache (each one a recompute of the request's prompt and output so far), over the requests that reached a worker (target: at most 1%).",
    `- **Goodput**: requests completed within their class's SLO (${sloOf("interactive")}; ${sloOf("default")}; the simulator's defaults, which both scenarios keep) per second of the replay; in brackets, against the oracle's.`,
    `- **Interactive TPOT windows in SLO**: share of the ${ref.sloWindowMs / 1000} s windows whose interactive p99 TPOT is within the SLO.`,
    "",
    table(results),
    "",
    `Targets met, cases out of those where the figure exists (KV at saturation needs some time with sluice saturated):`,
    "",
    ...targetLines(results, [...settings, "oracle"]),
  ]
    .filter((line, i, all) => !(line === "" && all[i - 1] === ""))
    .join("\n");
  process.stdout.write(`${section}\n`);
  if (write) {
    const path = root("BENCHMARKS.md");
    rewriteSection(path, START, END, section);
    process.stderr.write(`rewrote the engine section of ${path}\n`);
  }
}

const invoked = process.argv[1] !== undefined && /[\\/]sim[\\/]engine-bench\.(ts|js)$/.test(process.argv[1]);
if (invoked) {
  main(process.argv.slice(2)).catch((err) => {
    process.stderr.write(`engine-bench: ${(err as Error).message ?? err}\n`);
    process.exit(1);
  });
}
