/**
 * The adaptive-capacity benchmark (issue 12): runs scenarios/adaptive-*.yaml under `sluice`
 * (static capacity at the workers' reported maximum) and `sluice-adaptive` on the same arrivals,
 * sweeps each phase's knee (knee.ts), and rewrites the "Adaptive capacity and shedding in the
 * simulator" section of BENCHMARKS.md between its markers (appended at the end the first time).
 *
 *   node --import tsx src/sim/adaptive-bench.ts [--no-write] [--experiment key=value ...]
 *
 * `--experiment tpot_slo_ms=12` adds a column with the controller run on that setting, for
 * diagnosis; the shipped scenarios run their own.
 */
import { cpus, loadavg, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import type { CapacityWindow } from "./capacity-report.js";
import { simulate } from "./index.js";
import { kneeSweep } from "./knee.js";
import { rewriteSection } from "./output.js";
import type { PolicyReport, Report } from "./report.js";
import { loadScenario, type Scenario } from "./scenario.js";
import { classSummaries } from "./table.js";

const ADAPTIVE_SCENARIOS = [
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
  /** `w` undefined: the policy has nothing to show in this window (no fixed limit keeps the bound). */
  cells: { policy: string; w: CapacityWindow | undefined }[];
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

function policyLabel(policy: string, experiment: string | undefined): string {
  if (policy === "experiment") return `sluice-adaptive, ${experiment}`;
  if (policy === "best-fixed") return "best fixed limit";
  return policy;
}

/** Seeds of the robustness table (seed 1 is the scenarios' own). */
const SEEDS = [1, 2, 3] as const;

/**
 * Pinned limits swept for the best-fixed-limit reference: what an operator who knew each phase in
 * advance could do with one static number (the same arrivals, the same shedding).
 */
const FIXED_LIMITS = [
  16, 20, 24, 28, 32, 36, 40, 44, 48, 56, 64, 72, 80, 88, 96, 112, 128, 144, 160, 192, 224, 256, 288, 320,
  384, 448, 512,
] as const;

/** A window's TPOT bound: every class with an SLO has >= 95% of its 10 s windows within it. */
function meetsTpotBound(w: CapacityWindow): boolean {
  const shares = Object.values(w.classes)
    .map((c) => c?.tpot_slo_attainment)
    .filter((v): v is number => v !== null && v !== undefined);
  return shares.length > 0 && shares.every((v) => v >= 0.95);
}

/**
 * Per phase, the pinned limit with the most goodput among those that keep the TPOT bound (static
 * capacity at that pin for the whole run), or undefined when no pin keeps it.
 */
async function bestFixedLimits(
  scenario: Scenario,
  windows: string[],
  limits: readonly number[] = FIXED_LIMITS,
): Promise<Map<string, CapacityWindow | undefined>> {
  const best = new Map<string, CapacityWindow | undefined>(windows.map((w) => [w, undefined]));
  for (const pin of limits) {
    const report = await simulate({ ...scenario, policies: ["sluice"], capacityPin: pin });
    for (const name of windows) {
      const w = report.policies.sluice!.capacity.windows[name]!;
      const held = best.get(name);
      if (meetsTpotBound(w) && (held === undefined || w.goodput_rps > held.goodput_rps)) best.set(name, w);
    }
  }
  return best;
}

function adaptiveTable(rows: Row[], experiment: string | undefined): string {
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
        } | ${first ? r.offered.toFixed(1) : ""} | ${policyLabel(c.policy, experiment)}${c.w === undefined ? ": none meets the TPOT bound" : ""} | ${c.w === undefined ? "- | - | - | - | -" : cell(c.w, attainable)} |`,
      );
    });
  }
  return out.join("\n");
}

/** The operator's settings an experiment may change, by YAML key. */
const EXPERIMENT_KEYS = {
  tpot_slo_ms: "tpotSloMs",
  ttft_slo_ms: "ttftSloMs",
  adaptive_min_capacity: "minCapacity",
  adaptive_max_capacity: "maxCapacity",
} as const;

type ExperimentSettings = Partial<
  Pick<Scenario["capacity"], (typeof EXPERIMENT_KEYS)[keyof typeof EXPERIMENT_KEYS]>
>;

function parseExperiment(argv: string[]): { label: string; settings: ExperimentSettings } | undefined {
  const pairs: string[] = [];
  argv.forEach((a, i) => {
    if (a === "--experiment" && argv[i + 1] !== undefined) pairs.push(argv[i + 1]!);
  });
  if (pairs.length === 0) return undefined;
  const settings: ExperimentSettings = {};
  for (const p of pairs) {
    const [k, v] = p.split("=");
    const option = EXPERIMENT_KEYS[k as keyof typeof EXPERIMENT_KEYS];
    if (option === undefined || !Number.isFinite(Number(v)))
      throw new Error(
        `--experiment ${p}: unknown key or value (keys: ${Object.keys(EXPERIMENT_KEYS).join(", ")})`,
      );
    settings[option] = Number(v);
  }
  return { label: pairs.join(", "), settings };
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
  const missed: string[] = [];
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
        capacity: { ...scenario.capacity, ...experiment.settings },
      };
      exp = await simulate(variant);
    }
    for (const p of Object.values(report.policies)) {
      for (const c of Object.values(p!.capacity.windows.all!.classes)) inversions += c?.shed_inversions ?? 0;
    }
    const windows = scenario.phases.length > 0 ? scenario.phases.map((p) => p.name) : ["all"];
    const fixed = await bestFixedLimits(scenario, windows);
    for (const w of windows) {
      const k = await kneeSweep(scenario, { phase: w === "all" ? undefined : w });
      const cells: Row["cells"] = (["sluice", "sluice-adaptive"] as const).map((p) => ({
        policy: p,
        w: report.policies[p]!.capacity.windows[w]!,
      }));
      cells.push({ policy: "best-fixed", w: fixed.get(w) });
      if (exp) cells.push({ policy: "experiment", w: exp.policies["sluice-adaptive"]!.capacity.windows[w]! });
      rows.push({
        scenario: name,
        window: w,
        knee: k.knee,
        offered: offeredRps(report.policies.sluice!, scenario, w),
        cells,
      });
    }
    // The same bounds on other arrivals: the checks are single runs, and a bound at the edge of
    // what the fleet can do passes or fails with the seed.
    const bySeed: string[] = [];
    for (const seed of SEEDS) {
      const r =
        seed === scenario.seed
          ? report
          : await simulate({
              ...loadScenario(root(`scenarios/${name}.yaml`), { seed }),
              policies: ["sluice-adaptive"],
            });
      const all = r.policies["sluice-adaptive"]!.expectations;
      bySeed.push(`${all.filter((e) => !e.pass).length}/${all.length}`);
    }
    missed.push(`| ${name} | ${bySeed.join(" | ")} |`);
    process.stderr.write(`${name}: done\n`);
  }
  const seconds = ((performance.now() - t0) / 1000).toFixed(0);
  const cpu = cpus()[0]?.model.trim() ?? "unknown CPU";
  const section = [
    "## Adaptive capacity and shedding in the simulator (`npm run simulate -- scenarios/adaptive-*.yaml`)",
    "",
    `- Date: ${started.toISOString().replace(/\.\d+Z$/, "Z")}; machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}; load average at start ${load.join(" / ")}. Regenerate with \`node --import tsx src/sim/adaptive-bench.ts\` (${seconds} s here, with the knee sweeps, the fixed-limit sweep and two more seeds).`,
    `- Wall time per scenario (both policies, report included): ${timings.join(", ")}.`,
    "",
    "Method: each scenario runs on the same arrivals (seed 1) under `sluice` (the core at the workers' reported capacity, 4 x `max_num_seqs` 128 = 512) and `sluice-adaptive` (the core with the adaptive controller, `src/capacity/adaptive.ts` over `adaptive-limit.ts` with its defaults and `tpot_slo_ms: 13`). Both shed at the door as configured (`load_shedding.max_queue_wait_ms: 1000`; the bulk flood adds keyed shedding of bulk sessions). Workers: BLIS's Llama 3.1 8B / H100 step model (docs/simulate.md), a model, not a measurement. SLO: p99 time per output token 15 ms, TTFT 2 s from arrival (bulk 30 s).",
    "",
    "- **Knee**: the concurrency where the p99 TPOT reaches the SLO, from `sluice simulate <scenario> --knee [--knee-phase <phase>]`: the fleet at fixed concurrency (closed loop, no think time, the phase's mix, slowdowns and failures), 120 s per point, the first 30 s not measured, interpolated between grid points. `none`: the SLO cannot be met at any concurrency.",
    "- **Converged**: seconds from the phase's start until the limit stays within ±20% of its final median (the median over the phase's second half). Goodput and TPOT windows count only after that.",
    "- **Goodput**: requests arriving after convergence that completed within their class's SLO (TTFT from arrival incl. queueing, mean TPOT), per second; in brackets, against what is attainable: the knee's throughput, or the offered load when lower.",
    "- **p99 TPOT windows in SLO**: per class, the share of 10 s windows (after convergence) whose p99 TPOT, over the requests completing in them, is within the SLO; n/a when the limit never converged in the phase.",
    `- **Shed**: share of the phase's arrivals refused at the door (503 \`load_shed\`). Requests shed in a second in which a lower class got in (\`shed_inversions\`), over every run: ${inversions}.`,
    `- **Best fixed limit**: what one static number, chosen knowing the phase, can do. The same arrivals under static capacity pinned at each of ${FIXED_LIMITS.length} limits from ${FIXED_LIMITS[0]} to ${FIXED_LIMITS[FIXED_LIMITS.length - 1]} (same shedding); per phase, the pin with the most goodput among those that keep every class's p99 TPOT within the SLO in >= 95% of the windows. It is what an operator who knew each phase in advance could set by hand, one number per phase; \`none\` when no pin keeps the TPOT bound.`,
    "",
    adaptiveTable(rows, experiment?.label),
    "",
    "Bounds of each scenario's `expect:` list that sluice-adaptive misses, on the scenario's arrivals (seed 1) and on two other draws of them:",
    "",
    `| Scenario | ${SEEDS.map((s) => `seed ${s}`).join(" | ")} |`,
    `| --- | ${SEEDS.map(() => "---:").join(" | ")} |`,
    ...missed,
    "",
    "Reading (written against the controller and shedding of 2026-11-25 (SLO breaches in a row taking growing cuts, a stale TPOT baseline re-based instead of probed, a cold start's undone step going back to what ran instead of the reported capacity, a stream's TTFT sent at its first token, a TPOT p90 within 10% of the set point (0.97 x `tpot_slo_ms`) weighed over windows instead of obeyed in each): one controller per worker, sampled at each dispatch to its worker and handed the admission queue's level at each release and window close (a request let in at once is not queued work), a running stream's decode pace marked every 5 s, a cold start that compares windows measured at one level each (no ramp-up window as its first reference, each step judged by samples that began after in flight was first reported within it, and a step it undoes set back to the level that ran, not to the reported capacity), probe steps that double while they cost nothing (x0.9, x0.81, then x0.66), an increase that doubles after a window well under its reference, a breach ceiling (a level that missed the SLO by more than 10% binds increases for 30 s, doubling to 5 minutes), 250 ms TTFT floor, `adaptive_slo_reference` 0.9 capped at 1.5x the baseline, an SLO breach taking at least 10% (the n-th in a row past the margin n x 10%, up to 30%; proportionally more, up to half, past twice the ceiling), a re-probe every 5 minutes taken in turns by the workers (a TPOT far under its baseline re-based at once), a prioritizer whose threshold refuses a fraction of its level, and the scheduler's reservations sized at the workers' reported 512 and scaled with the limit (the slots they hold back from waiting work counted as run); re-read the table after changing either): past the knee, static capacity at the reported 512 runs every worker at 128 and the p99 TPOT leaves the SLO (no 10 s window within it at 200% of the knee, goodput 1-4% of the attainable). Adaptive capacity holds the pool near the knee: at 200% of the knee, at 100%, in the cold start and in the bulk flood its limit's median is 266-268 where the knee is 313-321, goodput is 91-93% of the attainable, and 100% of the TPOT windows are in the SLO; interactive is never shed while bulk gets in (0 inversions), and not at all in the bulk flood. At 50% and 90% of the knee almost nothing is shed (0.38% and 0.46% of interactive; 3% of bulk before the bulk flood), and the cold starts under half load converge within 10-12 s: the limit comes down to the demand that ran and climbs with it (medians of 155 in the staged load's half phase and 165 before the bulk flood, where the cold start's undo went back to the reported 512 before). An idle limit no longer grows: after the bulk flood the limit stays at 261 under half the knee's load, and after the incident it climbs back to the demand (185, against 210 before it, where the cold start's undo left it), where it used to climb to the reported 512 on every arrival. Against the best fixed limit, which knows each phase in advance: adaptive serves within 5% of it or more in every phase but the incident (95% of it there), and far more where one number cannot fit the whole run (the slow worker: 76.3 req/s against 25.8 during the slowdown, since each worker gets its own limit; the cold start: 98.6 against 75.3). Where adaptive still misses a bound, the best fixed limit shows which misses are the controller's: (1) the long-prompt half of the mix shift (79% of the windows in the SLO where a fixed 80 keeps 97%; 72% to 79% in the mean over seeds 1-12 with the SLO band): the controllers hold each worker's TPOT p90 near the 13 ms `tpot_slo_ms` and settle at 85, but long prompts spread TPOT more (each 3,000-16,000-token prefill stalls every decode on its worker, and moves the mean TPOT of a short answer most: p99 16.6 ms under 100 output tokens, 13.5 ms at 200 and more), so the same p90 gives window p99s over the 15 ms SLO in a fifth of the windows, and a fixed limit meets both that bound and the goodput bound only within a few percent of 80; (2) the incident (below). Over seeds 1-12 the six scenarios miss 52 bounds, over seeds 13-24 53 (58 and 67 before the SLO band; 59 before a stream's TTFT went to the controller at its first token, 69 before a cold start's undone step went back to what ran, 77 before breaches in a row took growing cuts and a stale baseline was re-based, 81 before the workers' re-probes took turns). The slow worker's first phase, a gap before, is in its bounds (100% of its windows; it missed on 10 seeds of 12 before the cold start's undo went to what ran, now on none): one worker's cold-start probe ended first and its limit went back to the reported 128 while the others were still stepping down, least-loaded routing sent it the pool's overflow and its TPOT p90 reached 24 ms. So is the cold start (100%). The slow worker's last phase converges in 9 s, and during the slowdown the limit converges in 3 s (439 s while the four workers' re-probes stepped every limit down at once).",
    "",
    experiment
      ? `The third row of each phase runs the same arrivals with \`${experiment.label}\` (policy.adaptive_tuning: more samples behind each p90, so less noise), as a diagnosis, not a shipped setting: in the overloaded phases of the staged load, the cold start, the mix shift and the bulk flood its goodput then reaches 93-98% of the attainable with 83-100% of the TPOT windows in the SLO, but the limit still takes 55-161 s to settle where the bound is 30 s (staged load excepted); the slow worker and the incident still fall short (below).`
      : "",
    "",
    "Where the bounds themselves bite. Slow worker: the knee column is the fleet's under one limit with least-loaded routing (66 of 512, 35 req/s: the slow worker gets as many requests as a fast one, so the fleet's p99 is the slow worker's), which is why adaptive's goodput reads 216% of it. Incident: every worker 2x slower, so the TPOT floor (2 x 5.8 ms of step time) is near the SLO and the p99 curve is flat (14.1 ms at concurrency 32, 15.4 at 48, from the knee sweep): the best fixed limit (36) serves 11.2 req/s within the SLO, 79% of the knee's 14.1, so issue 12's 90% bound is out of reach there for any single limit. Adaptive holds a median of 33 and serves 10.6 req/s within the SLO on these arrivals (75%, 95% of the best fixed limit's; the mean over seeds 1-12 is 10.6 req/s, 75%; it was 9.6 before the SLO band weighed p90s near the SLO over windows, and 9.4 before a cold start's undo went to what ran and a stream's TTFT to its first token; with SLO breaches in a row taking growing cuts the limit comes down from about 200 to about 35 in 20 s, where steps of 10% took 40 s with every window out of the SLO); after the descent the pool's limit stays within 27-40 (median 32; it was 22-41 around 31 before the band, when each worker's limit of 6-9 moved on every p90 over or under the SLO), and it stays within ±20% of its median only for the last 10 minutes (convergence 1201 s; the bound misses on 23 seeds of 24, 24 before the band), so the bounds read after convergence are read over those minutes (98% of their windows in the SLO). Before the prioritizer's fractional threshold the same phase served 1.8 req/s within the SLO out of 10.4 served: with one tenant the whole-level threshold refused all of it or none, a second at a time, and the mean queue wait was 3.1 s under a 1 s bound. After the incident the pool is back at the demand within 18 s (the limit climbs 10% a window from 30 while the latency reads well under its reference; at 5% it took 46-66 s, and with a probe at the incident's end, whose steps each read as free while latency fell, 36 s) and serves the offered load within the SLO (on 3 seeds of 24 a later SLO cut or re-probe takes the pool's limit out of the ±20% band, 5 before the band; at 60% of the knee the limit is not in use, and each worker's sits where its demand left it). The workers' median TPOT baseline reads 11% under the one before (a known gap: the bound is 10% either way): the incident did not become the new normal, which would read above it; under it, the baseline follows the TPOT of the limit's path out of the incident (the limit after it sits at the demand, 185, and queues a little more than the 210 the cold start left before it), and 2 seeds of 24 miss the bound with the band or without.",
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
