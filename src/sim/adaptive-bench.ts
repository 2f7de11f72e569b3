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
    "Reading (written against the controller of 2026-11-23: one controller per worker, 250 ms TTFT floor, `adaptive_slo_reference` 0.9 capped at 1.5x the baseline, an SLO breach taking at least 10%, a re-probe every 5 minutes; re-read the table after changing it): past the knee, static capacity runs every worker at its reported 128 and the p99 TPOT leaves the SLO (20 ms at 512: no 10 s window within it at 200% of the knee). Adaptive capacity holds the knee where the pool can meet the SLO: at 200% of the knee (staged load), in the cold start, the long-prompt half of the mix shift and the bulk flood, the pool's limit tracks 206-326 where the knee is 313 (76-92 where it is 92) and goodput is 92-97% of the attainable, against 2-65% for static capacity; interactive is never shed while bulk gets in, and nothing is shed at 90% of the knee. The changes of this session, each for a reason the table shows (17 bounds missed before them, 9 now; over seeds 1-3, 12/14/14 with one pool limit and 9/14/8 with the per-worker limits): with `tpot_slo_ms` set the TPOT ratio is taken against max(baseline, min(0.9 x SLO, 1.5 x baseline)), because TPOT rises with the batch long before the knee (at the step from 50% to 90% load a baseline learnt at half load read a 1.26 ratio, cut the limit from 512 to 149 and shed 3% of the stage; now none is shed); a re-probe every 5 minutes instead of every minute (each probe dips the limit a step or two, and those dips took it out of the 20% band); a limit per worker (below); and an SLO breach takes at least 10%, since per-worker p90s are noisier and +5% on a low reading against -1 to -3% on a small breach ratcheted the limits up into the SLO. What it still misses: (1) the strict convergence reading where the limit leaves the band for a window or two late in a phase (staged load at 200%: 73 s; after the slowdown: 124 s); (2) the pool's p99 windows within the SLO at 61% in the long-prompt half of the mix shift and 90% in the bulk flood: each worker's p90 is held at 13 ms and the p99 over all of them crosses 15 ms. The TTFT floor matters: without it (TTFT ratios against baselines of 30-60 ms) prefill jitter passed the 1.25 ratio in 39% of windows and the limit collapsed to 20-30, shedding most of the load even at half the knee.",
    "",
    experiment
      ? `The third row of each phase runs the same arrivals with \`${experiment.label}\` (policy.adaptive_tuning: more samples behind each p90, so less noise), as a diagnosis, not a shipped setting: in the overloaded phases of the staged load, the cold start, the mix shift and the bulk flood its goodput then reaches 93-98% of the attainable with 83-100% of the TPOT windows in the SLO, but the limit still takes 55-161 s to settle where the bound is 30 s (staged load excepted); the slow worker and the incident still fall short (below).`
      : "",
    "",
    "Where the bounds themselves bite. Slow worker: the knee column is the fleet's under one limit with least-loaded routing (66 of 512, 35 req/s: the slow worker gets as many requests as a fast one, so the fleet's p99 is the slow worker's). With a limit per worker, routing gives the slow worker only what its own limit allows: during the slowdown the pool runs 171-265, settles 21 s after it starts and serves 76.8 req/s within the SLO (218% of that one-limit knee, 98% of the TPOT windows within the SLO), where one pool limit fell to 20-32 and served 0-6 req/s. Incident: every worker 2x slower, so routing has nowhere better to send work; their TPOT floor (2 x 5.8 ms of step time, about 12.5 ms at p90 with prefill) is near `tpot_slo_ms` 13, the SLO rule holds the limit at 23-31 where the p99-based knee is 43, it never stays in the 20% band, and goodput after that reading is 1.8 req/s of 14.1; after it the pool is back at 512 and serving the offered load within the SLO, but the busiest worker's TPOT baseline reads 17% under the one before (a baseline re-learnt by a probe at lower concurrency, not drift upward: the bound is within 10% either way).",
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
