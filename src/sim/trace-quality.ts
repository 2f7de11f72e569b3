/**
 * `npm run bench:traces`: scheduling quality on real production traces (issue 36, deliverable 4).
 * Replays the Azure LLM inference trace 2023 (conversation interactive weight 2, code default
 * weight 1) and the Mooncake conversation trace (split in two tenants, scenarios/mooncake-conv.yaml)
 * at the speeds where peak demand is about 1x, 2x and 3x the fleet, under fifo, strict, sluice and
 * sluice with preemption off; marks the Azure targets; sweeps preempt_after_secs (the frontier);
 * checks the sustained-overload hour and the 2:1 fair shares; and rewrites its section of
 * BENCHMARKS.md (between its markers). `--no-write` only prints.
 *
 * Peak demand (the rule the speeds come from): a request's work is its prompt plus output tokens;
 * the offered work of the busiest 10 s window of the trace (windows aligned on the trace's start),
 * per second, divided by the fleet's throughput at the concurrency the scheduler admits (the highest
 * of `sluice simulate --knee`'s sweep up to the fleet's capacity, sampling the trace's own sizes)
 * times the trace's mean work per request. Speed k / ratio(1) puts the peak at k times the fleet.
 * (The knee proper, where p99 TPOT reaches the SLO, is a quarter of the capacity on the 70B
 * profile: demand above it is served, only slower, so it is no measure of overload.)
 */
import { cpus, loadavg, totalmem } from "node:os";
import { fileURLToPath } from "node:url";
import { CLASSES_HIGH_TO_LOW, type PriorityClass } from "@sluice/scheduler/core/class.js";
import { BUILTIN_CLASS_DEFAULTS, type ClassSettingsTable } from "@sluice/scheduler/core/config.js";
import { simulate } from "./index.js";
import { kneeSweep } from "./knee.js";
import { rewriteSection } from "./output.js";
import type { PolicyReport } from "./report.js";
import { loadScenario, type PolicyName, type Scenario } from "./scenario.js";

const root = (p: string) => fileURLToPath(new URL(`../../${p}`, import.meta.url));
const START = "<!-- trace-quality:start -->";
const END = "<!-- trace-quality:end -->";
const WINDOW_MS = 10_000;

export type Variant = "fifo" | "strict" | "sluice" | "sluice-no-preempt";
export const VARIANTS: readonly Variant[] = ["fifo", "strict", "sluice", "sluice-no-preempt"];

/** The class settings with one change for every class. */
function withClasses(s: Scenario, change: (c: ClassSettingsTable[PriorityClass]) => object): Scenario {
  const classes = Object.fromEntries(
    Object.entries(s.classes).map(([k, v]) => [k, { ...v, ...change(v) }]),
  ) as unknown as ClassSettingsTable;
  return { ...s, classes };
}

/** Runs one variant: a policy, or sluice with `can_preempt: false` for every class. */
export async function runVariant(s: Scenario, v: Variant): Promise<PolicyReport> {
  const policy: PolicyName = v === "sluice-no-preempt" ? "sluice" : v;
  const scenario = v === "sluice-no-preempt" ? withClasses(s, () => ({ can_preempt: false })) : s;
  const report = await simulate({ ...scenario, policies: [policy] });
  return report.policies[policy]!;
}

/** The scenario with every tenant's client retrying up to `attempts` times (those that retry). */
function withAttempts(s: Scenario, attempts: number): Scenario {
  return {
    ...s,
    tenants: s.tenants.map((t) => ({ ...t, retry: t.retry && { ...t.retry, maxAttempts: attempts } })),
  };
}

/** sluice with every class's preempt_after_secs set to `secs`. */
export async function runPreemptAfter(s: Scenario, secs: number): Promise<PolicyReport> {
  const report = await simulate({
    ...withClasses(s, () => ({ preempt_after_secs: secs })),
    policies: ["sluice"],
  });
  return report.policies.sluice!;
}

/** Offered work (prompt + output tokens) per second in the trace's busiest 10 s window, at speed 1. */
export function peakWork(s: Scenario): { peak: number; mean: number; meanPerRequest: number } {
  const buckets = new Map<number, number>();
  let total = 0;
  let n = 0;
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  for (const t of s.tenants) {
    if (t.arrival.process !== "replay") continue;
    const tr = t.arrival.trace;
    const speed = t.arrival.speed;
    for (const i of tr.order) {
      const at = tr.t[i]! / speed;
      const work = tr.prompt[i]! + tr.output[i]!;
      const b = Math.floor(at / WINDOW_MS);
      buckets.set(b, (buckets.get(b) ?? 0) + work);
      total += work;
      n++;
      if (at < first) first = at;
      if (at > last) last = at;
    }
  }
  const peak = Math.max(...buckets.values()) / (WINDOW_MS / 1000);
  const span = Math.max(WINDOW_MS, last - first) / 1000;
  return { peak, mean: total / span, meanPerRequest: n > 0 ? total / n : 0 };
}

/** The fleet's work throughput at its capacity, tokens/s, for this trace's mix. */
export async function fleetWork(s: Scenario, meanPerRequest: number): Promise<number> {
  const k = await kneeSweep(s);
  return k.peak.throughput_rps * meanPerRequest;
}

export interface ClassRow {
  requests: number;
  refused: number;
  lost: number;
  waitP50: number | null;
  waitP99: number | null;
  ttftP99: number | null;
  preemptedPrefillShare: number;
  goodputRps: number;
  promotions: number;
}

export function classRow(r: PolicyReport, cls: PriorityClass): ClassRow | undefined {
  const c = r.classes[cls];
  if (!c) return undefined;
  const refused = Object.values(c.rejected).reduce((a, b) => a + (b ?? 0), 0);
  const prefill = r.workers.reduce((a, w) => a + w.prefill_tokens, 0);
  return {
    requests: c.requests,
    refused,
    lost: c.requests - c.completed,
    waitP50: c.queue_wait_ms.p50,
    waitP99: c.queue_wait_ms.p99,
    ttftP99: c.ttft_ms.p99,
    preemptedPrefillShare: prefill > 0 ? c.preempted_prefill_tokens / prefill : 0,
    goodputRps: c.goodput_rps,
    promotions: c.starvation_promotions,
  };
}

const ms = (v: number | null) =>
  v === null ? "–" : v >= 10000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`;
const pct = (v: number, d = 1) => `${(v * 100).toFixed(d)}%`;
const int = (v: number) => v.toLocaleString("en-US");

/** The Azure targets for sluice at one speed, given strict's run: [label, met, figure]. */
export function azureTargets(sluice: PolicyReport, strict: PolicyReport): [string, boolean, string][] {
  const i = classRow(sluice, "interactive")!;
  const si = classRow(strict, "interactive")!;
  const d = classRow(sluice, "default")!;
  const bound = 1.25 * (si.waitP99 ?? 0);
  return [
    ["interactive: none refused", i.refused === 0, `${int(i.refused)} refused`],
    [
      "interactive: wait p99 <= 1.25x strict's",
      (i.waitP99 ?? 0) <= bound,
      `${ms(i.waitP99)} vs ${ms(bound)}${si.waitP99 === 0 ? " (strict preempts on arrival: 0 ms)" : ""}`,
    ],
    [
      "default: <= 2% lost after retries",
      d.lost <= 0.02 * d.requests,
      `${pct(d.lost / Math.max(1, d.requests))} (${int(d.lost)} of ${int(d.requests)})`,
    ],
    [
      "default: <= 2% of prefill thrown away",
      d.preemptedPrefillShare <= 0.02,
      pct(d.preemptedPrefillShare, 2),
    ],
  ];
}

interface TraceRun {
  speed: number;
  ratio: number;
  reports: Record<Variant, PolicyReport>;
}

async function traceTable(
  file: string,
  label: string,
): Promise<{ runs: TraceRun[]; fleet: number; peak: number; mean: number; scenario: Scenario }> {
  const base = loadScenario(root(file));
  const w = peakWork(base);
  const fleet = await fleetWork(base, w.meanPerRequest);
  const runs: TraceRun[] = [];
  for (const k of [1, 2, 3]) {
    const speed = Math.round(((k * fleet) / w.peak) * 100) / 100;
    const s = loadScenario(root(file), { speed });
    const reports = {} as Record<Variant, PolicyReport>;
    for (const v of VARIANTS) {
      const t0 = performance.now();
      reports[v] = await runVariant(s, v);
      process.stderr.write(
        `${label} speed ${speed} ${v}: ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
      );
    }
    runs.push({ speed, ratio: (w.peak * speed) / fleet, reports });
  }
  return { runs, fleet, peak: w.peak, mean: w.mean, scenario: base };
}

function qualityRows(runs: TraceRun[], classes: PriorityClass[]): string[] {
  const rows = [
    "| speed (peak / fleet) | class | policy | requests | refused | lost | wait p50 | wait p99 | TTFT p99 | prefill thrown away | goodput |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const run of runs) {
    for (const cls of classes) {
      for (const v of VARIANTS) {
        const c = classRow(run.reports[v], cls);
        if (!c) continue;
        rows.push(
          `| ${run.speed}x (${run.ratio.toFixed(2)}) | ${cls} | ${v} | ${int(c.requests)} | ${int(c.refused)} | ${int(c.lost)} | ${ms(c.waitP50)} | ${ms(c.waitP99)} | ${ms(c.ttftP99)} | ${pct(c.preemptedPrefillShare, 2)} | ${c.goodputRps.toFixed(2)}/s |`,
        );
      }
    }
  }
  return rows;
}

/** The workers' state in sluice's run at one speed: busy fraction, KV preemptions. */
function engineNote(run: TraceRun): string {
  const w = run.reports.sluice.workers;
  const busy = w.reduce((a, x) => a + x.busy_fraction, 0) / Math.max(1, w.length);
  const kv = w.reduce((a, x) => a + x.kv_preemptions, 0);
  return `at ${run.speed}x the workers are busy ${pct(busy, 0)} of the time, with ${int(kv)} KV preemptions`;
}

const FRONTIER_SECS = [0, 0.05, 0.1, 0.25, 0.5, 1];
/** The larger client retry budget the frontier is also swept at (the scenarios' is 3). */
const RETRY_BUDGET = 5;

async function main(argv: string[]): Promise<void> {
  const write = !argv.includes("--no-write");
  const started = new Date();
  const load = loadavg().map((x) => x.toFixed(1));
  const t0 = performance.now();
  const classes = CLASSES_HIGH_TO_LOW.filter((c) => c === "interactive" || c === "default");

  const azure = await traceTable("scenarios/azure-conv-code-hour.yaml", "azure");
  const mooncake = await traceTable("scenarios/mooncake-conv.yaml", "mooncake");

  // Targets at the 2x and 3x speeds.
  const targetRows = ["| speed (peak / fleet) | target | met | sluice |", "| --- | --- | :---: | --- |"];
  for (const run of azure.runs.slice(1)) {
    for (const [label, met, fig] of azureTargets(run.reports.sluice, run.reports.strict)) {
      targetRows.push(
        `| ${run.speed}x (${run.ratio.toFixed(2)}) | ${label} | ${met ? "met" : "**missed**"} | ${fig} |`,
      );
    }
  }

  // The frontier: preempt_after_secs at the 2x and 3x speeds, then with a larger retry budget.
  const frontier = [
    "| speed (peak / fleet) | client attempts | preempt_after_secs | interactive wait p99 (strict's) | interactive refused | default lost | prefill thrown away (of all) | targets met |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
  ];
  const frontierRow = (
    run: TraceRun,
    attempts: number,
    secs: number,
    r: PolicyReport,
    strict: PolicyReport,
  ) => {
    const i = classRow(r, "interactive")!;
    const d = classRow(r, "default")!;
    const sp = classRow(strict, "interactive")!.waitP99;
    const prefill = r.workers.reduce((a, w) => a + w.prefill_tokens, 0);
    const thrown = CLASSES_HIGH_TO_LOW.reduce((a, c) => a + (r.classes[c]?.preempted_prefill_tokens ?? 0), 0);
    const met = azureTargets(r, strict).filter(([, ok]) => ok).length;
    frontier.push(
      `| ${run.speed}x (${run.ratio.toFixed(2)}) | ${attempts} | ${secs} | ${ms(i.waitP99)} (${ms(sp)}) | ${int(i.refused)} | ${pct(d.lost / Math.max(1, d.requests))} (${int(d.lost)}) | ${pct(prefill > 0 ? thrown / prefill : 0, 2)} | ${met}/4 |`,
    );
  };
  for (const run of azure.runs.slice(1)) {
    const s = loadScenario(root("scenarios/azure-conv-code-hour.yaml"), { speed: run.speed });
    for (const secs of FRONTIER_SECS) {
      frontierRow(run, 3, secs, await runPreemptAfter(s, secs), run.reports.strict);
    }
    process.stderr.write(`frontier at ${run.speed}: done\n`);
  }
  // What moves it: the clients' retry budget (a preempted request comes back as load; strict again
  // on the same budget).
  {
    const run = azure.runs[2]!;
    const s = withAttempts(
      loadScenario(root("scenarios/azure-conv-code-hour.yaml"), { speed: run.speed }),
      RETRY_BUDGET,
    );
    const strict = await runVariant(s, "strict");
    for (const secs of [0, 0.05, 0.1, 0.25]) {
      frontierRow(run, RETRY_BUDGET, secs, await runPreemptAfter(s, secs), strict);
    }
  }

  // Sustained overload: the 100 req/s hour, with fleet-128.yaml and with the built-in classes.
  const hour = loadScenario(root("scenarios/hour-100rps.yaml"));
  const hourRows = [
    "| classes | policy | interactive refused | interactive wait p99 | bulk admitted | bulk promotions | bulk share of admissions | minimum (starvation_max_share) |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  let hourMet = true;
  const hourCases: [string, Scenario][] = [
    ["`policies/fleet-128.yaml`", hour],
    ["built-in", { ...hour, classes: BUILTIN_CLASS_DEFAULTS }],
  ];
  for (const [label, sc] of hourCases) {
    const refused: number[] = [];
    for (const v of ["strict", "sluice"] as const) {
      const r = await runVariant(sc, v);
      const i = classRow(r, "interactive")!;
      refused.push(i.refused);
      const b = r.classes.bulk!;
      const admittedAll = CLASSES_HIGH_TO_LOW.reduce((a, c) => a + (r.classes[c]?.queue_wait_ms.n ?? 0), 0);
      const share = b.queue_wait_ms.n / Math.max(1, admittedAll);
      if (v === "sluice" && share < sc.classes.bulk.starvation_max_share) hourMet = false;
      hourRows.push(
        `| ${label} | ${v} | ${int(i.refused)} | ${ms(i.waitP99)} | ${int(b.queue_wait_ms.n)} | ${int(b.starvation_promotions)} | ${pct(share)} | ${pct(sc.classes.bulk.starvation_max_share)} |`,
      );
    }
    if (refused[1]! > refused[0]!) hourMet = false;
    process.stderr.write(`hour-100rps (${label}): done\n`);
  }

  // Fair shares: both services in default at 2:1.
  const fairScenario = loadScenario(root("scenarios/azure-fair-share-hour.yaml"));
  const fair = (await simulate(fairScenario)).policies.sluice!.fairness.all!.default!;
  const fairRows = [
    "| measured over | backlogged | conv share (2) | code share (1) | largest deviation | within 5% |",
    "| --- | ---: | ---: | ---: | ---: | :---: |",
    `| every stretch where both wait | ${fair.backlogged_s} s | ${pct(fair.tenants.conv!.share ?? 0)} | ${pct(fair.tenants.code!.share ?? 0)} | ${pct(fair.share_error ?? 0)} | ${(fair.share_error ?? 1) <= 0.05 ? "met" : "**missed**"} |`,
    `| stretches of 10 s or more | ${fair.sustained.backlogged_s} s | ${pct(fair.sustained.shares.conv ?? 0)} | ${pct(fair.sustained.shares.code ?? 0)} | ${pct(fair.sustained.share_error ?? 0)} | ${(fair.sustained.share_error ?? 1) <= 0.05 ? "met" : "**missed**"} |`,
  ];

  const seconds = ((performance.now() - t0) / 1000).toFixed(0);
  const cpu = cpus()[0]?.model.trim() ?? "unknown CPU";
  const section = [
    "## Scheduling quality on production traces (`npm run bench:traces`)",
    "",
    `- Date: ${started.toISOString().replace(/\.\d+Z$/, "Z")} (whole bench ${seconds} s)`,
    `- Machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}; load average at start ${load.join(" / ")}`,
    "",
    "Method: `sluice simulate` replays each trace (seed 1, virtual time, the worker model of docs/simulate.md: a model, not a measurement) under `fifo` (the legacy limiter), `strict` (the reference scheduler: preempts on arrival, unbounded promotion), `sluice`, and `sluice-no-preempt` (sluice with `can_preempt: false` for every class). Clients re-send 429 and 503 up to three times after the Retry-After; *refused* and *lost* count requests (not attempts) after those retries, *lost* = not completed. *Prefill thrown away*: prefill tokens the workers had computed for requests the scheduler then preempted, as a share of all prefill the fleet computed. Goodput: completions within the class's SLO, per second.",
    "",
    `Peak demand: a request's work is its prompt + output tokens; the ratio is the offered work of the trace's busiest 10 s window (aligned on its start) per second over the fleet's throughput at the concurrency the scheduler admits (the highest point of \`--knee\`'s sweep, the trace's own sizes) in the same tokens. Azure hour (\`scenarios/azure-conv-code-hour.yaml\`, two 70B workers, \`policies/fleet-128.yaml\`): fleet ${int(Math.round(azure.fleet))} tokens/s, peak ${int(Math.round(azure.peak))} tokens/s (${(azure.peak / azure.fleet).toFixed(2)}x), mean ${(azure.mean / azure.fleet).toFixed(2)}x at speed 1. Mooncake (\`scenarios/mooncake-conv.yaml\`, the shipped ten minutes, eight 70B workers; split into kimi-chat interactive and kimi-api default by a row's second prefix block modulo 2): fleet ${int(Math.round(mooncake.fleet))} tokens/s, peak ${(mooncake.peak / mooncake.fleet).toFixed(2)}x at speed 1. The speeds below put the peak at about 1x, 2x and 3x.`,
    "",
    "### Azure LLM trace 2023, the hour: conversation interactive (weight 2), code default (weight 1)",
    "",
    ...qualityRows(azure.runs, classes),
    "",
    "Targets (sluice, at the 2x and 3x speeds):",
    "",
    ...targetRows,
    "",
    "### Mooncake conversation trace, ten minutes, split in two tenants",
    "",
    ...qualityRows(mooncake.runs, classes),
    "",
    `Inside the engines (sluice's runs): ${mooncake.runs.map((run) => engineNote(run)).join("; ")}. The Mooncake prompts average 14k tokens: the workers are prefill-bound long before the scheduler's capacity (64 per worker) is reached, so requests wait inside the engines (TTFT above) where no priority applies, and the admission queue forms only at 3x. A capacity that follows the workers' latency (\`sluice-adaptive\`, docs/adaptive.md) is the remedy the table does not show.`,
    "",
    "### The preemption frontier (Azure hour, sluice, `preempt_after_secs` for every class)",
    "",
    ...frontier,
    "",
    `Reading it: \`preempt_after_secs\` trades interactive wait against default requests lost, one for the other; the prefill thrown away stays small either way (the victim is the request with the least prefill computed). \`targets met\` counts the four Azure targets above. Strict preempts on arrival, so wherever its interactive p99 is 0 ms, "at most 1.25x strict's" can only be met by preempting on arrival too (0), and then the default class pays the preemptions. What moves the frontier is not the knob: a preempted request is lost only when its client gives up, so the clients' retry budget (the last rows, ${RETRY_BUDGET} attempts instead of 3, strict on the same budget) moves the loss axis, at some wait; a larger interactive reservation did not move it (interactive waits when the whole fleet is busy, not for its reservation), and requeueing a victim inside the gateway instead of answering 503 \`scheduler_preempted\` would, but the contract fixes that answer.`,
    "",
    `### Sustained overload (\`scenarios/hour-100rps.yaml\`, 360,000 requests): ${hourMet ? "met" : "**missed**"}`,
    "",
    "Target: interactive refusals at most strict's, and bulk at least its `starvation_max_share` of all admissions (the minimum a starving class is promised while higher classes wait; measured here over the whole hour). With `fleet-128.yaml` the interactive requests strict refuses are preemptions by `system` (arrival preempts at once).",
    "",
    ...hourRows,
    "",
    "### Fair shares: both Azure services in `default` at weights 2:1, the hour at 3x (`scenarios/azure-fair-share-hour.yaml`)",
    "",
    ...fairRows,
    "",
    "A request's tokens count evenly over its time in the fleet, inside the stretches where both services have a request waiting (docs/simulate.md, \"Fairness measures\"). The sustained row leaves out stretches under 10 s: thousands of them last milliseconds (one conversation request waiting while the fair queue, which counts conversation's in-flight work as received, serves code first), and one dispatch decides each. The fair queue itself holds the weights since starvation promotion admits the class's fair head (docs/fairness.md: it admitted the oldest waiter, and a class whose waiters had all aged past the 30 s mark ran oldest-first).",
  ].join("\n");
  process.stdout.write(`${section}\n`);
  if (write) {
    rewriteSection(root("BENCHMARKS.md"), START, END, section);
    process.stderr.write("rewrote the trace-quality section of BENCHMARKS.md\n");
  }
}

const invoked = process.argv[1] !== undefined && /[\\/]sim[\\/]trace-quality\.(ts|js)$/.test(process.argv[1]);
if (invoked) {
  main(process.argv.slice(2)).catch((err) => {
    process.stderr.write(`bench:traces: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  });
}
