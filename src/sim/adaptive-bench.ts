/**
 * The adaptive-capacity benchmark (issue 12): runs scenarios/adaptive-*.yaml under `sluice`
 * (static capacity at the workers' reported maximum) and `sluice-adaptive` on the same arrivals,
 * sweeps each phase's knee (knee.ts), and rewrites the "Adaptive capacity and shedding in the
 * simulator" section of BENCHMARKS.md between its markers (appended at the end the first time).
 *
 *   node --import tsx src/sim/adaptive-bench.ts [--no-write] [--experiment key=value ...]
 *
 * `--experiment adaptive_min_samples=200` adds a column with the controller run on that tuning
 * (policy.adaptive_tuning), for diagnosis; the shipped scenarios run its defaults.
 */
import { cpus, loadavg, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import { ADAPTIVE_LIMIT_KEYS, type AdaptiveTuning } from "../capacity/adaptive-limit.js";
import type { CapacityWindow } from "./capacity-report.js";
import { simulate } from "./index.js";
import { kneeSweep } from "./knee.js";
import { rewriteSection } from "./output.js";
import type { PolicyReport, Report } from "./report.js";
import { loadScenario, type Scenario } from "./scenario.js";
import { classSummaries } from "./table.js";

export const ADAPTIVE_SCENARIOS = [
  "adaptive-staged-load",
  "adaptive-slow-worker",
  "adaptive-mix-shift",
  "adaptive-incident",
  "adaptive-cold-start",
  "adaptive-bulk-flood",
] as const;

const START = "<!-- adaptive-bench:start -->";
const END = "<!-- adaptive-bench:end -->";
const root = (p: string) => fileURLToPath(new URL(`../../${p}`, import.meta.url));

interface Row {
  scenario: string;
  window: string;
  knee: { concurrency: number; throughput_rps: number } | null;
  offered: number;
  cells: { policy: string; w: CapacityWindow }[];
}

const pct = (v: number | null | undefined) =>
  v === null || v === undefined ? "n/a" : `${(v * 100).toFixed(0)}%`;

function offeredRps(report: PolicyReport, scenario: Scenario, window: string): number {
  if (window === "all") return report.totals.requests / (scenario.durationMs / 1000);
  const ph = scenario.phases.find((p) => p.name === window)!;
  const span = (Math.min(ph.toMs, scenario.durationMs) - ph.fromMs) / 1000;
  const n = Object.values(report.phases[window]!.classes).reduce((a, c) => a + (c?.requests ?? 0), 0);
  return n / span;
}

function cell(w: CapacityWindow, attainable: number): string {
  const limit = w.limit ? `${w.limit.final_median} (${w.limit.min}-${w.limit.max})` : "-";
  const conv = w.convergence_s === null ? "-" : `${w.convergence_s} s`;
  const { inSlo: att, shed } = classSummaries(w, pct);
  return [
    limit,
    conv,
    `${w.goodput_rps.toFixed(1)} (${pct(attainable > 0 ? w.goodput_rps / attainable : null)})`,
    att || "n/a",
    shed || "0",
  ].join(" | ");
}

export function adaptiveTable(rows: Row[], experiment: string | undefined): string {
  const policyCols = [
    "limit (range)",
    "converged",
    "goodput/s (of attainable)",
    "p99 TPOT windows in SLO",
    "shed",
  ];
  const head = ["Scenario", "Phase", "Knee: concurrency, req/s", "Offered req/s", "Policy", ...policyCols];
  const out = [
    `| ${head.join(" | ")} |`,
    `| ${head.map((_, i) => (i < 2 || i === 4 ? "---" : "---:")).join(" | ")} |`,
  ];
  for (const r of rows) {
    const attainable = Math.min(r.offered, r.knee?.throughput_rps ?? r.offered);
    r.cells.forEach((c, i) => {
      const first = i === 0;
      out.push(
        `| ${first ? r.scenario : ""} | ${first ? r.window : ""} | ${
          first
            ? r.knee
              ? `${Math.round(r.knee.concurrency)}, ${r.knee.throughput_rps.toFixed(1)}`
              : "none"
            : ""
        } | ${first ? r.offered.toFixed(1) : ""} | ${c.policy === "experiment" ? `sluice-adaptive, ${experiment}` : c.policy} | ${cell(c.w, attainable)} |`,
      );
    });
  }
  return out.join("\n");
}

function parseExperiment(argv: string[]): { label: string; tuning: Partial<AdaptiveTuning> } | undefined {
  const pairs: string[] = [];
  argv.forEach((a, i) => {
    if (a === "--experiment" && argv[i + 1] !== undefined) pairs.push(argv[i + 1]!);
  });
  if (pairs.length === 0) return undefined;
  const byKey = new Map<string, string>(
    Object.entries(ADAPTIVE_LIMIT_KEYS).map(([option, key]) => [key, option]),
  );
  const tuning: Partial<AdaptiveTuning> = {};
  for (const p of pairs) {
    const [k, v] = p.split("=");
    const option = byKey.get(k ?? "") as keyof AdaptiveTuning | undefined;
    if (option === undefined || !Number.isFinite(Number(v)))
      throw new Error(`--experiment ${p}: unknown key or value`);
    tuning[option] = Number(v);
  }
  return { label: pairs.join(", "), tuning };
}

async function main(argv: string[]): Promise<void> {
  const write = !argv.includes("--no-write");
  const experiment = parseExperiment(argv);
  const started = new Date();
  const load = loadavg().map((x) => x.toFixed(1));
  const t0 = performance.now();
  const rows: Row[] = [];
  const timings: string[] = [];
  let inversions = 0;
  for (const name of ADAPTIVE_SCENARIOS) {
    const scenario = loadScenario(root(`scenarios/${name}.yaml`));
    const s0 = performance.now();
    const report: Report = await simulate(scenario);
    timings.push(`${name} ${((performance.now() - s0) / 1000).toFixed(1)} s`);
    let exp: Report | undefined;
    if (experiment) {
      const variant: Scenario = {
        ...scenario,
        policies: ["sluice-adaptive"],
        capacity: { ...scenario.capacity, tuning: { ...scenario.capacity.tuning, ...experiment.tuning } },
      };
      exp = await simulate(variant);
    }
    for (const p of Object.values(report.policies)) {
      for (const c of Object.values(p!.capacity.windows.all!.classes)) inversions += c?.shed_inversions ?? 0;
    }
    const windows = scenario.phases.length > 0 ? scenario.phases.map((p) => p.name) : ["all"];
    for (const w of windows) {
      const k = await kneeSweep(scenario, { phase: w === "all" ? undefined : w });
      const cells: Row["cells"] = (["sluice", "sluice-adaptive"] as const).map((p) => ({
        policy: p,
        w: report.policies[p]!.capacity.windows[w]!,
      }));
      if (exp) cells.push({ policy: "experiment", w: exp.policies["sluice-adaptive"]!.capacity.windows[w]! });
      rows.push({
        scenario: name,
        window: w,
        knee: k.knee,
        offered: offeredRps(report.policies.sluice!, scenario, w),
        cells,
      });
    }
    process.stderr.write(`${name}: done\n`);
  }
  const seconds = ((performance.now() - t0) / 1000).toFixed(0);
  const cpu = cpus()[0]?.model.trim() ?? "unknown CPU";
  const section = [
    "## Adaptive capacity and shedding in the simulator (`npm run simulate -- scenarios/adaptive-*.yaml`)",
    "",
    `- Date: ${started.toISOString().replace(/\.\d+Z$/, "Z")}; machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}; load average at start ${load.join(" / ")}. Regenerate with \`node --import tsx src/sim/adaptive-bench.ts\` (${seconds} s here, knee sweeps included).`,
    `- Wall time per scenario (both policies, report included): ${timings.join(", ")}.`,
    "",
    "Method: each scenario runs on the same arrivals (seed 1) under `sluice` (the core at the workers' reported capacity, 4 x `max_num_seqs` 128 = 512) and `sluice-adaptive` (the core with the adaptive controller, `src/capacity/adaptive.ts` over `adaptive-limit.ts` with its defaults and `tpot_slo_ms: 13`). Both shed at the door as configured (`load_shedding.max_queue_wait_ms: 1000`; the bulk flood adds keyed shedding of bulk sessions). Workers: BLIS's Llama 3.1 8B / H100 step model (docs/simulate.md), a model, not a measurement. SLO: p99 time per output token 15 ms, TTFT 2 s from arrival (bulk 30 s).",
    "",
    "- **Knee**: the concurrency where the p99 TPOT reaches the SLO, from `sluice simulate <scenario> --knee [--knee-phase <phase>]`: the fleet at fixed concurrency (closed loop, no think time, the phase's mix, slowdowns and failures), 120 s per point, the first 30 s not measured, interpolated between grid points. `none`: the SLO cannot be met at any concurrency.",
    "- **Converged**: seconds from the phase's start until the limit stays within ±20% of its final median (the median over the phase's second half). Goodput and TPOT windows count only after that.",
    "- **Goodput**: requests arriving after convergence that completed within their class's SLO (TTFT from arrival incl. queueing, mean TPOT), per second; in brackets, against what is attainable: the knee's throughput, or the offered load when lower.",
    "- **p99 TPOT windows in SLO**: per class, the share of 10 s windows (after convergence) whose p99 TPOT, over the requests completing in them, is within the SLO; n/a when the limit never converged in the phase.",
    `- **Shed**: share of the phase's arrivals refused at the door (503 \`load_shed\`). Requests shed in a second in which a lower class got in (\`shed_inversions\`), over every run: ${inversions}.`,
    "",
    adaptiveTable(rows, experiment?.label),
    "",
    'Reading (written against the controller of 2026-11-23 with its 250 ms TTFT floor; re-read the table after changing it): past the knee, static capacity runs every worker at its reported 128 and the p99 TPOT leaves the SLO (20 ms at 512: no 10 s window within it at 200% of the knee). Adaptive capacity holds the knee where the pool can meet the SLO: at 200% of the knee (staged load), in the cold start, the long-prompt half of the mix shift and the bulk flood, the limit tracks 263-310 where the knee is 313 (88 where it is 92) and goodput is 91-98% of the attainable, against 2-65% for static capacity; interactive is never shed while bulk gets in. What it misses: (1) the strict convergence reading: a re-probe every 60 s dips the limit by 10-20% for two windows, so "stays within 20% of the final median" often never holds to the end of a phase, and the after-convergence columns then read 0 or n/a even where the limit sat at the knee; (2) the 90% stage: stepping down from 512 as TPOT nears the SLO, the limit holds in the dead band (ratio 1.1-1.25) at 218-262, under the demand, and 5% of the stage is shed at the 1 s queue bound. The floor matters: without it (TTFT ratios against baselines of 30-60 ms) prefill jitter passed the 1.25 ratio in 39% of windows and the limit collapsed to 20-30, shedding most of the load even at half the knee.',
    "",
    experiment
      ? `The third row of each phase runs the same arrivals with \`${experiment.label}\` (policy.adaptive_tuning: more samples behind each p90, so less noise), as a diagnosis, not a shipped setting: in the overloaded phases of the staged load, the cold start, the mix shift and the bulk flood its goodput then reaches 93-98% of the attainable with 83-100% of the TPOT windows in the SLO, but the limit still takes 55-161 s to settle where the bound is 30 s (staged load excepted); the slow worker and the incident still fall short (below).`
      : "",
    "",
    "Where the bounds themselves bite. Slow worker: one fleet-wide limit with least-loaded routing gives the slow worker as many requests in flight as a fast one, so the fleet's p99 is the slow worker's and the knee during the slowdown is what that worker can run within the SLO (66 of 512, 35 req/s, a third of the healthy fleet). Static capacity breaks the p99 but serves more requests within the SLO one by one (the fast workers' answers), so its goodput there is far above that knee; a per-worker limit or latency-aware routing would keep both. The slowed worker's TPOT floor (2 x 5.8 ms of step time, about 12.5 ms at p90 with prefill) is near `tpot_slo_ms` 13, so the SLO rule takes the limit toward `adaptive_min_capacity` (1 here), as docs/adaptive.md says it will for an SLO the pool cannot meet; afterwards it climbs back by at most 5% a window (from 1, some 118 windows to 313 without a single decrease), and three minutes after the slowdown it stood at 14 (39 with the experiment). Incident: the same at 2x on every worker (knee 43, 14 req/s).",
  ]
    .filter((line, i, all) => !(line === "" && all[i - 1] === ""))
    .join("\n");
  process.stdout.write(`${section}\n`);
  if (write) {
    const path = root("BENCHMARKS.md");
    rewriteSection(path, START, END, section);
    process.stderr.write(`rewrote the adaptive section of ${path}\n`);
  }
}

const invoked =
  process.argv[1] !== undefined && /[\\/]sim[\\/]adaptive-bench\.(ts|js)$/.test(process.argv[1]);
if (invoked) {
  main(process.argv.slice(2)).catch((err) => {
    process.stderr.write(`adaptive-bench: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  });
}
