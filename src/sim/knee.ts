/**
 * The knee of a simulated fleet (`sluice simulate <scenario> --knee`): the concurrency past which
 * the p99 time per output token exceeds the SLO. A sweep runs the scenario's fleet at fixed
 * concurrencies: every tenant becomes a closed loop with no think time (so exactly `c` requests are
 * in flight), sharing the `c` users in proportion to its request rate (open loop; the rate in force
 * during `phase` when one is named) or its users (closed loop), with its own prompt and output
 * sizes. The named phase's slowdowns and failures apply for the whole sweep run. Admission never
 * binds (every request is sent as `system` on the fleet's reported capacity), so the workers alone
 * set the latency. Each point measures the completions after a warm-up: throughput, and TPOT
 * p50/p99 (nearest rank).
 *
 * The knee is the largest concurrency of the grid whose p99 TPOT is within the SLO, refined by
 * linear interpolation to the next point (concurrency and throughput alike); `peak` is where the
 * throughput is highest, for fleets whose throughput stops rising before the SLO binds.
 */
import { OUTCOME_INDEX } from "./log.js";
import { runPolicy } from "./run.js";
import type { ResolvedPhase, ResolvedTenant, Scenario } from "./scenario.js";

interface KneePoint {
  concurrency: number;
  throughput_rps: number;
  tpot_p50_ms: number | null;
  tpot_p99_ms: number | null;
}

interface KneeResult {
  phase: string | null;
  slo_ms: number;
  points: KneePoint[];
  /** Interpolated where p99 TPOT crosses the SLO; null when even the lowest point exceeds it. */
  knee: { concurrency: number; throughput_rps: number } | null;
  peak: { concurrency: number; throughput_rps: number };
}

interface KneeOptions {
  /** Take the rates, slowdowns and failures of this phase. */
  phase?: string | undefined;
  /** TPOT SLO, ms (default: the lowest tpot_ms of the classes the tenants send). */
  sloMs?: number | undefined;
  /** Concurrencies to run (default: 32 steps up to the fleet's reported capacity). */
  concurrencies?: number[] | undefined;
  /** Simulated seconds per point (default 120), the first `warmupSecs` (default 30) not measured. */
  durationSecs?: number | undefined;
  warmupSecs?: number | undefined;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/** Splits `total` users by weight (largest remainder, ties to the first). */
export function apportion(weights: number[], total: number): number[] {
  const sum = weights.reduce((a, b) => a + b, 0);
  const exact = weights.map((w) => (sum > 0 ? (w / sum) * total : 0));
  const out = exact.map(Math.floor);
  let left = total - out.reduce((a, b) => a + b, 0);
  const order = exact
    .map((x, i) => ({ i, frac: x - Math.floor(x) }))
    .sort((a, b) => b.frac - a.frac || a.i - b.i);
  for (const { i } of order) {
    if (left <= 0) break;
    if (weights[i]! > 0) {
      out[i]!++;
      left--;
    }
  }
  return out;
}

function tenantWeight(t: ResolvedTenant, phase: ResolvedPhase | undefined): number {
  if (t.arrival.process === "closed") return t.arrival.users;
  if (t.arrival.process === "replay") {
    // The trace's mean rate.
    const tr = t.arrival.trace;
    const span = tr.t[tr.order[tr.order.length - 1]!]! / 1000 / t.arrival.speed;
    return span > 0 ? tr.t.length / span : tr.t.length;
  }
  const r = phase?.rate;
  if (r?.tenants.includes(t.name)) return r.rate ?? t.arrival.rate * (r.multiplier ?? 1);
  return t.arrival.rate;
}

export async function kneeSweep(scenario: Scenario, options: KneeOptions = {}): Promise<KneeResult> {
  const phase =
    options.phase === undefined ? undefined : scenario.phases.find((p) => p.name === options.phase);
  if (options.phase !== undefined && phase === undefined) {
    throw new Error(`--knee-phase: no phase named ${options.phase} in ${scenario.file}`);
  }
  if (scenario.pools.length > 1) {
    // One concurrency for workers of different models has no knee: sweep each pool on its own.
    throw new Error(
      `--knee: the workers of ${scenario.file} form several model pools (${scenario.pools.map((p) => p.name).join(", ")}); sweep each in a scenario of its own`,
    );
  }
  const sent = new Set(scenario.tenants.flatMap((t) => t.mix.map((m) => m.cls)));
  const sloMs =
    options.sloMs ?? Math.min(...[...sent].map((c) => scenario.slo[c].tpotMs ?? Number.POSITIVE_INFINITY));
  if (!Number.isFinite(sloMs))
    throw new Error("--knee: no TPOT SLO (give --knee-slo-ms or slo.<class>.tpot_ms)");
  const fleet = scenario.workers.reduce((s, w) => s + w.profile.maxRunning, 0);
  const step = Math.max(1, Math.round(fleet / 32));
  const grid =
    options.concurrencies ?? Array.from({ length: Math.floor(fleet / step) }, (_, i) => (i + 1) * step);
  const durationMs = (options.durationSecs ?? 120) * 1000;
  const warmMs = Math.min(durationMs / 2, (options.warmupSecs ?? 30) * 1000);
  const weights = scenario.tenants.map((t) => tenantWeight(t, phase));
  const points: KneePoint[] = [];
  for (const c of grid) {
    const users = apportion(weights, c);
    const tenants: ResolvedTenant[] = [];
    scenario.tenants.forEach((t, i) => {
      if (users[i]! <= 0) return;
      tenants.push({
        ...t,
        mix: [{ cls: "system", p: 1 }],
        arrival: { process: "closed", users: users[i]!, thinkMs: 0 },
        // A replay's rows become the closed loop's sizes, sampled.
        trace: t.arrival.process === "replay" ? { trace: t.arrival.trace, order: "random" } : t.trace,
        retry: undefined,
        diurnal: undefined,
        patienceMs: undefined,
      });
    });
    const effects: ResolvedPhase[] = phase
      ? [
          {
            ...phase,
            name: "sweep",
            fromMs: 0,
            toMs: Number.POSITIVE_INFINITY,
            rate: undefined,
            capacity: undefined,
          },
        ]
      : [];
    const sweep: Scenario = {
      ...scenario,
      durationMs,
      drainMs: 0,
      tenants,
      phases: effects,
      tenantPolicies: new Map(),
      defaultMaxClass: "system",
      capacityPin: undefined,
      policies: ["sluice"],
      expectations: [],
      capacity: { ...scenario.capacity, mode: "static" },
      shedding: undefined,
    };
    const run = await runPolicy(sweep, "sluice");
    const log = run.log;
    const tpot: number[] = [];
    let done = 0;
    for (let i = 0; i < log.size; i++) {
      if (log.outcome[i] !== OUTCOME_INDEX.ok) continue;
      const end = log.arrival[i]! + log.e2e[i]!;
      if (end < warmMs || end >= durationMs) continue;
      done++;
      if (!Number.isNaN(log.tpot[i]!)) tpot.push(log.tpot[i]!);
    }
    tpot.sort((a, b) => a - b);
    const at = (p: number) =>
      tpot.length === 0 ? null : r3(tpot[Math.max(0, Math.ceil(p * tpot.length) - 1)]!);
    points.push({
      concurrency: c,
      throughput_rps: r3((done * 1000) / (durationMs - warmMs)),
      tpot_p50_ms: at(0.5),
      tpot_p99_ms: at(0.99),
    });
  }
  let knee: KneeResult["knee"] = null;
  for (let i = 0; i < points.length; i++) {
    const p = points[i]!;
    if (p.tpot_p99_ms === null || p.tpot_p99_ms > sloMs) {
      if (i > 0) {
        const a = points[i - 1]!;
        const f = p.tpot_p99_ms === null ? 0 : (sloMs - a.tpot_p99_ms!) / (p.tpot_p99_ms - a.tpot_p99_ms!);
        knee = {
          concurrency: r3(a.concurrency + f * (p.concurrency - a.concurrency)),
          throughput_rps: r3(a.throughput_rps + f * (p.throughput_rps - a.throughput_rps)),
        };
      }
      break;
    }
    knee = { concurrency: p.concurrency, throughput_rps: p.throughput_rps };
  }
  const peak = points.reduce((best, p) => (p.throughput_rps > best.throughput_rps ? p : best), points[0]!);
  return {
    phase: phase?.name ?? null,
    slo_ms: sloMs,
    points,
    knee,
    peak: { concurrency: peak.concurrency, throughput_rps: peak.throughput_rps },
  };
}

/** The sweep as a table, with the knee stated. */
export function kneeTable(scenario: Scenario, k: KneeResult): string {
  const lines = [
    `knee sweep of ${scenario.name}${k.phase ? ` during ${k.phase}` : ""}: ${scenario.workers.length} workers, TPOT SLO ${k.slo_ms} ms (p99)`,
    "",
    "concurrency  throughput/s  tpot p50  tpot p99",
  ];
  for (const p of k.points) {
    lines.push(
      `${String(p.concurrency).padStart(11)}  ${p.throughput_rps.toFixed(2).padStart(12)}  ${(p.tpot_p50_ms ?? Number.NaN).toFixed(2).padStart(8)}  ${(p.tpot_p99_ms ?? Number.NaN).toFixed(2).padStart(8)}`,
    );
  }
  lines.push(
    "",
    k.knee
      ? `knee: concurrency ${k.knee.concurrency}, ${k.knee.throughput_rps} requests/s (p99 TPOT reaches ${k.slo_ms} ms)`
      : `knee: none (p99 TPOT exceeds ${k.slo_ms} ms at the lowest concurrency)`,
    `throughput peak: concurrency ${k.peak.concurrency}, ${k.peak.throughput_rps} requests/s`,
  );
  return `${lines.join("\n")}\n`;
}
