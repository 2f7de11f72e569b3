/**
 * One simulated run: a scenario under one admission policy, on virtual time.
 *
 * The loop pops the next event (an arrival, a worker's step boundary, a phase edge, a scheduler
 * timer, a sampling tick), runs it, and, when the run settled any acquire promise during it, yields
 * to the microtask queue until every reaction has run, before time moves on. Reactions run in the
 * order the promises were settled, and every settlement happens inside an event at a known instant,
 * so the run is deterministic: same scenario, seed and policy, same bytes out.
 *
 * The gateway's part is mirrored request by request: budgets (BudgetBook) are checked before
 * admission, the estimate (prompt estimate + max_tokens) is the scheduler's cost, an admitted
 * request goes to the least-loaded healthy worker, the first token marks the permit's first byte,
 * the end reports the actual tokens (adjustCost) and settles the budget hold, and a preemption
 * closes the request on its worker before the preemptor is routed.
 *
 * Model pools (docs/gateway.md): a request goes to the pool of its model (model_not_found when no
 * worker serves it; no_healthy_workers at once when none of the pool's workers is up) and never
 * leaves it. Under the sluice policies each pool is its own admission gate, as in the gateway: its
 * own scheduler and capacity, adaptive limit and shedding; fifo and strict keep one gate for the
 * fleet (the legacy limiter and the reference scheduler have no pools) and only route by pool.
 * Budgets are fleet-wide.
 */

import { BudgetBook, type BudgetHold } from "@sluice/scheduler/core/budgets.js";
import {
  CLASS_COUNT,
  CLASS_RANK,
  classOfRank,
  PRIORITY_CLASSES,
  type PriorityClass,
} from "@sluice/scheduler/core/class.js";
import { Slots } from "@sluice/scheduler/core/slots.js";
import {
  type OutputPrediction,
  OutputPredictor,
  predictionErrorRatio,
} from "../accounting/output-prediction.js";
import { PoolTicket, type TicketCounters } from "../accounting/pool-ticket.js";
import { AdaptiveCapacity, heldBackOf } from "../capacity/adaptive.js";
import type { AdaptiveLimitSnapshot } from "../capacity/adaptive-limit.js";
import { Periodic } from "../capacity/periodic.js";
import { CapacityNotifier, type CapacitySource } from "../contracts/capacity-source.js";
import { ERROR_TABLE } from "../contracts/error-table.js";
import { LoadShedding, type LoadSheddingStatus, resolveShedding } from "../shedding/load-shedding.js";
import { EventQueue, SimClock } from "./clock.js";
import { FairnessGroup, type Window } from "./fairness.js";
import { SimKvCapacity } from "./kv-gate.js";
import { NO_POOL, OUTCOME_INDEX, type Outcome, REJECTIONS, RequestLog } from "./log.js";
import { type AdmissionPolicy, createPolicy, type SimTicket } from "./policies.js";
import { SimPool } from "./pool-routing.js";
import type { ReplayTrace } from "./replay.js";
import { Rng } from "./rng.js";
import { type PolicyName, type ResolvedTenant, type Scenario, SLUICE_POLICIES } from "./scenario.js";
import { Job, Worker, type WorkerListener, type WorkerStats } from "./worker.js";
import {
  burstyArrivals,
  lengthSampler,
  type OpenArrivals,
  poissonArrivals,
  RateCurve,
  type RateShape,
} from "./workload.js";

const QUEUED = 0;
const ADMITTED = 1;
const DONE = 2;
/** How often the simulated gateway looks for streams due a pace mark (adaptive capacity), ms. */
const PACE_CHECK_MS = 250;

class SimRequest {
  state = QUEUED;
  /** 1 for the first send, 2 for the first retry, ... */
  attempt = 1;
  /** Block ids of its prompt's prefix (replayed traces with prefix_blocks), for the workers' prefix caches. */
  blocks: readonly number[] | undefined;
  /** Its first attempt's id: every attempt of one request shares it. */
  id = 0;
  /** When its first attempt was sent (ms). */
  firstArrival = 0;
  sizes!: Sizes;
  /** Prefill tokens the worker had computed when the scheduler preempted it. */
  preemptedPrefill = 0;
  ticket: SimTicket | undefined;
  /** Its counts in its gate (queue, in flight, served), as the gateway's lease holds them. */
  counts: PoolTicket | undefined;
  hold: BudgetHold | undefined;
  /** Its output length as the gateway would predict it at arrival. */
  prediction: OutputPrediction | undefined;
  /** |predicted − actual| / actual once it completed (NaN: not measured). */
  predictionError = Number.NaN;
  job: Job | undefined;
  workerUrl: string | undefined = undefined;
  /** Its KV footprint (capacity_unit kv_tokens), and the worker holding it while it runs there. */
  kvFootprint = 0;
  kvWorker: Worker | undefined;
  admittedAt = Number.NaN;
  firstAt = Number.NaN;
  controller: AbortController | undefined;
  /** Its model's pool, the gate it is admitted through and its fairness group (once the pool is known). */
  pool: PoolRun | undefined;
  gate: Gate | undefined;
  fair: FairnessGroup | undefined;
  constructor(
    readonly tenant: TenantRuntime,
    readonly user: number,
    readonly requested: PriorityClass,
    readonly cls: number,
    readonly arrival: number,
    readonly prompt: number,
    readonly output: number,
    readonly maxTokens: number,
    readonly estimate: number,
  ) {}
}

type Sizes = { prompt: number; output: number; maxTokens: number; estPrompt: number };

/** Outcomes that are refusals (the gateway's), as opposed to failures on the worker. */
const REFUSALS: ReadonlySet<Outcome> = new Set(REJECTIONS);

interface TenantRuntime {
  readonly index: number;
  readonly spec: ResolvedTenant;
  readonly weight: number;
  /** Requested class and its effective (clamped) rank, with cumulative probabilities. */
  readonly mix: { requested: PriorityClass; rank: number; cum: number }[];
  readonly sizes: () => { prompt: number; output: number; maxTokens: number; estPrompt: number };
  /** Replay: the trace and the next row (in time order) to send. */
  readonly replay: { trace: ReplayTrace; speed: number; startMs: number; cursor: number } | undefined;
  readonly classRng: Rng;
  readonly thinkRng: Rng;
  /** The session header's value for a request of user `user` (-1: open loop), or undefined. */
  readonly session: (user: number) => string | undefined;
  arrivals: OpenArrivals | undefined;
}

/**
 * One admission queue with its capacity: a model pool's under the sluice policies (the gateway runs
 * one scheduler per pool), the whole fleet's under fifo and strict.
 */
interface Gate {
  readonly policy: AdmissionPolicy;
  readonly adaptive: AdaptiveCapacity | undefined;
  readonly shedding: LoadShedding | undefined;
  /** Where its requests' pool tickets count: adaptive capacity and shedding. */
  readonly counters: TicketCounters;
  /** Capacity in KV tokens (src/sim/kv-gate.ts); undefined when the gate counts requests. */
  readonly kv: SimKvCapacity | undefined;
  /** The workers whose healthy max_running make its discovered capacity. */
  readonly workers: readonly Worker[];
  /** What those workers report, for the adaptive controller. */
  readonly reported: CapacityNotifier;
  /** The capacity its policy has now. */
  liveCapacity: number;
  /** The capacity the scheduler's reservations are sized at (adaptive: the fleet's size). */
  reservedAt: number | undefined;
  /** Per class rank. */
  readonly inflight: number[];
  readonly queued: number[];
}

/** A pool's part of a run: its routing, its gate, and its counters. */
interface PoolRun {
  readonly pool: SimPool;
  readonly gate: Gate;
  inflight: number;
  queued: number;
  readonly series: PoolSeries;
}

/** Per bucket, one pool's capacity (its gate's, or its healthy workers' under a fleet gate), in flight and queued. */
interface PoolSeries {
  capacity: number[];
  inflight: number[];
  queued: number[];
}

/** Counters per time bucket, per class and per tenant. */
export interface Series {
  /** Bucket start times (s). */
  t: number[];
  capacity: number[];
  classes: {
    arrivals: number[];
    admitted: number[];
    completed: number[];
    rejected: number[];
    inflight: number[];
    queued: number[];
    waitMaxMs: number[];
    waitSumMs: number[];
    /** Refused at the door (load_shed). */
    shed: number[];
    /** Let in at the door (queued for admission). */
    passed: number[];
  }[];
  tenants: { tokens: number[]; completed: number[] }[];
  /** Mean KV-cache occupancy over healthy workers, 0..1, sampled at the bucket's end. */
  kv: number[];
  /** The adaptive controller's TPOT baseline and last TPOT p90 (ms, NaN when none), at the bucket's end. */
  tpotBaseline: number[];
  tpotP90: number[];
}

/** How the run's capacity was set, and the controller's and shedding's last state. */
interface CapacityRun {
  mode: "static" | "adaptive";
  controller: AdaptiveLimitSnapshot | undefined;
  shedding: LoadSheddingStatus | undefined;
}

/** One pool's figures beyond the request log. */
interface PoolRunResult {
  name: string;
  series: PoolSeries;
  /** Its own gate's capacity mode and controller (sluice policies), else undefined. */
  capacity: CapacityRun | undefined;
}

export interface RunResult {
  policy: PolicyName;
  log: RequestLog;
  series: Series;
  /** Per pool and class: index pool * CLASS_COUNT + class rank (one pool: by class rank). */
  groups: FairnessGroup[];
  /** `models`: requests sent to the worker, by the model they asked for. */
  workers: { name: string; stats: WorkerStats; models: Record<string, number> }[];
  /** Per scenario pool, in its order. */
  pools: PoolRunResult[];
  promotions: number[];
  clamps: number;
  /** Per class: sum over samples of in-flight, and of the class's entitlement (see report.ts), per window. */
  entitlement: { window: string; cls: number; inflight: number; entitled: number; samples: number }[];
  capacity: CapacityRun;
  endMs: number;
  events: number;
  /** Per class rank: prefill tokens the workers had computed for requests the scheduler then preempted. */
  preemptedPrefillTokens: number[];
  /** Per class rank: attempts re-sent by clients (tenants' `retry`). */
  retries: number[];
  /** One row per request attempt, when RunOptions.attempts asked for them (--export-requests). */
  attempts: AttemptRow[] | undefined;
}

/** One request attempt, as --export-requests writes it (docs/simulate.md). Times are ms from the start. */
export interface AttemptRow {
  request: number;
  tenant: string;
  cls: PriorityClass;
  attempt: number;
  arrival: number;
  admitted: number;
  firstToken: number;
  end: number;
  /** ok, retried (refused, and the client sent it again), refused, failed, unfinished. */
  outcome: "ok" | "retried" | "refused" | "failed" | "unfinished";
  /** The stable error code ("" when ok). */
  code: string;
  /** The HTTP status the client saw (0 when it never got one). */
  status: number;
  prompt: number;
  output: number;
  cachedPrompt: number;
  worker: string;
  preemptedPrefill: number;
  recomputed: number;
}

export interface RunOptions {
  /** Called every `progressEveryMs` of simulated time (default 60 s), for --watch. */
  onProgress?:
    | ((info: { simMs: number; queued: number; inflight: number; done: number }) => void)
    | undefined;
  progressEveryMs?: number | undefined;
  /** Keep one row per request attempt (RunResult.attempts). */
  attempts?: boolean | undefined;
}

function effectiveRank(scenario: Scenario, key: string, requested: PriorityClass): number {
  const max = scenario.tenantPolicies.get(key)?.max_class ?? scenario.defaultMaxClass;
  return Math.min(CLASS_RANK[requested], CLASS_RANK[max]);
}

/** Tenant index -> the classes (ranks) it sends in, after its max_class clamp. */
export function tenantClasses(scenario: Scenario): number[][] {
  return scenario.tenants.map((t) => [...new Set(t.mix.map((m) => effectiveRank(scenario, t.key, m.cls)))]);
}

export function tenantWeight(scenario: Scenario, key: string): number {
  return scenario.tenantPolicies.get(key)?.weight ?? 1;
}

/** The windows every measure is reported over: the whole run, then each phase. */
export function windowsOf(scenario: Scenario): Window[] {
  return [
    { name: "all", fromMs: 0, toMs: Number.POSITIVE_INFINITY },
    ...scenario.phases.map((p) => ({ name: p.name, fromMs: p.fromMs, toMs: p.toMs })),
  ];
}

function buildTenant(scenario: Scenario, spec: ResolvedTenant, index: number): TenantRuntime {
  const seed = scenario.seed;
  const sizeRng = Rng.stream(seed, `tenant:${spec.name}:sizes`);
  let sizes: TenantRuntime["sizes"];
  const maxTok = spec.maxTokens ? lengthSampler(spec.maxTokens, sizeRng) : undefined;
  const err = spec.promptEstimateError;
  const finish = (prompt: number, rawOutput: number) => {
    const maxTokens = maxTok ? maxTok() : rawOutput;
    const output = Math.max(1, Math.min(rawOutput, maxTokens));
    const estPrompt =
      err > 0 ? Math.max(1, Math.round(prompt * (1 + err * (2 * sizeRng.next() - 1)))) : prompt;
    return { prompt, output, maxTokens: Math.max(maxTokens, output), estPrompt };
  };
  const a0 = spec.arrival;
  const replay =
    a0.process === "replay"
      ? { trace: a0.trace, speed: a0.speed, startMs: a0.startMs, cursor: firstRow(a0.trace, a0.startMs) }
      : undefined;
  if (replay) {
    // The row being sent is the one before the cursor (arrivals move it).
    sizes = () => {
      const i = replay.trace.order[replay.cursor - 1]!;
      return finish(replay.trace.prompt[i]!, replay.trace.output[i]!);
    };
  } else if (spec.trace) {
    const { trace, order } = spec.trace;
    let cursor = 0;
    sizes = () => {
      const i = order === "sequential" ? cursor++ % trace.prompt.length : sizeRng.below(trace.prompt.length);
      return finish(trace.prompt[i]!, trace.output[i]!);
    };
  } else {
    const p = lengthSampler(spec.prompt!, sizeRng);
    const o = lengthSampler(spec.output!, sizeRng);
    sizes = () => {
      const prompt = p();
      return finish(prompt, o());
    };
  }
  let cum = 0;
  const mix = spec.mix.map((m) => {
    cum += m.p;
    return { requested: m.cls, rank: effectiveRank(scenario, spec.key, m.cls), cum };
  });
  mix[mix.length - 1]!.cum = 1;
  let arrivals: OpenArrivals | undefined;
  if (spec.arrival.process === "poisson" || spec.arrival.process === "bursty") {
    const shape: RateShape = {
      base: spec.arrival.rate,
      pieces: scenario.phases
        .filter((ph) => ph.rate?.tenants.includes(spec.name))
        .map((ph) => ({
          from: ph.fromMs,
          to: ph.toMs,
          multiplier: ph.rate!.multiplier,
          rate: ph.rate!.rate,
        })),
      diurnal: spec.diurnal,
    };
    const curve = new RateCurve(shape);
    const rng = Rng.stream(seed, `tenant:${spec.name}:arrivals`);
    arrivals =
      spec.arrival.process === "poisson"
        ? poissonArrivals(curve, rng)
        : burstyArrivals(curve, spec.arrival.onMs, spec.arrival.offMs, rng);
  }
  const sessions = spec.sessions;
  const sessionRng = Rng.stream(seed, `tenant:${spec.name}:sessions`);
  const session =
    sessions === undefined
      ? () => undefined
      : (user: number) => `${spec.name}-${user >= 0 ? user % sessions : sessionRng.below(sessions)}`;
  return {
    index,
    spec,
    weight: tenantWeight(scenario, spec.key),
    mix,
    sizes,
    classRng: Rng.stream(seed, `tenant:${spec.name}:classes`),
    thinkRng: Rng.stream(seed, `tenant:${spec.name}:think`),
    session,
    arrivals,
    replay,
  };
}

/** The first row (in time order) at or after `startMs` of trace time. */
function firstRow(trace: ReplayTrace, startMs: number): number {
  let lo = 0;
  let hi = trace.order.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (trace.t[trace.order[mid]!]! < startMs) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function codeOf(err: unknown): Outcome {
  const code = (err as { code?: string }).code;
  if (code !== undefined && code in OUTCOME_INDEX) return code as Outcome;
  throw err;
}

function capacityRun(gate: Gate): CapacityRun {
  return {
    mode: gate.adaptive ? "adaptive" : "static",
    controller: gate.adaptive?.snapshot(),
    shedding: gate.shedding?.status(),
  };
}

/** Element-wise sum of the gates' per-class counts. */
function sumOver(gates: readonly Gate[], counts: (gate: Gate) => number[]): number[] {
  const out = [0, 0, 0, 0];
  for (const g of gates) {
    const c = counts(g);
    for (let r = 0; r < out.length; r++) out[r]! += c[r]!;
  }
  return out;
}

export async function runPolicy(
  scenario: Scenario,
  policyName: PolicyName,
  options: RunOptions = {},
): Promise<RunResult> {
  const queue = new EventQueue();
  const clock = new SimClock(queue, scenario.epochStartMs);
  const endArrivals = scenario.durationMs;
  const endMs = scenario.durationMs + scenario.drainMs;
  const bucketMs = scenario.bucketMs;
  const tenants = scenario.tenants.map((t, i) => buildTenant(scenario, t, i));
  const log = new RequestLog();
  const routeRng = Rng.stream(scenario.seed, "routing");
  const windows = windowsOf(scenario);
  const classesOf = tenantClasses(scenario);
  // Fair shares are kept per pool and class, as in the gateway: tenants of different pools never
  // compete for the same slots.
  const groups: FairnessGroup[] = [];
  for (let k = 0; k < scenario.pools.length; k++) {
    const models = scenario.pools[k]!.models;
    for (let r = 0; r < CLASS_COUNT; r++) {
      const members = tenants.filter((t) => models.includes(t.spec.model) && classesOf[t.index]!.includes(r));
      groups.push(
        new FairnessGroup(
          r,
          members.map((t) => t.index),
          members.map((t) => t.weight),
          tenants.length,
          windows,
        ),
      );
    }
  }
  // Output lengths predicted as the gateway predicts them (accounting/output-prediction.ts), on the
  // simulated clock; the last resort is the largest worker's KV less the prompt, as the gateway
  // falls back on the largest context a worker reports.
  const predictor = new OutputPredictor(() => clock.now());
  const contextTokens = Math.max(1, ...scenario.workers.map((w) => w.profile.kvTokens));
  const sluice = SLUICE_POLICIES.includes(policyName);
  const budgets = sluice
    ? new BudgetBook({ policies: scenario.tenantPolicies, pricing: scenario.pricing, clock })
    : undefined;
  // Issue 12's gateway features, for the sluice policies, per gate: shedding at the door when
  // configured, and adaptive capacity for sluice-adaptive (and sluice under capacity_mode: adaptive).
  const adaptiveMode =
    policyName === "sluice-adaptive" || (policyName === "sluice" && scenario.capacity.mode === "adaptive");

  // --- series ---
  const series: Series = {
    t: [],
    capacity: [],
    classes: Array.from({ length: CLASS_COUNT }, () => ({
      arrivals: [],
      admitted: [],
      completed: [],
      rejected: [],
      inflight: [],
      queued: [],
      waitMaxMs: [],
      waitSumMs: [],
      shed: [],
      passed: [],
    })),
    tenants: tenants.map(() => ({ tokens: [], completed: [] })),
    kv: [],
    tpotBaseline: [],
    tpotP90: [],
  };
  const bump = (arr: number[], t: number, by = 1) => {
    const b = Math.floor(t / bucketMs);
    while (arr.length <= b) arr.push(0);
    arr[b]! += by;
  };
  const inflight = [0, 0, 0, 0];
  const queued = [0, 0, 0, 0];
  let live = 0; // requests queued or admitted
  let done = 0;
  const liveSet = new Set<SimRequest>();
  // The work a preemption throws away: counted per class, and what sluice's victim choice minimises.
  const requestOfTicket = new WeakMap<SimTicket, SimRequest>();
  const prefillOfTicket = (ticket: SimTicket): number => {
    const job = requestOfTicket.get(ticket)?.job;
    return job?.worker ? job.worker.computedPrefill(job) : 0;
  };

  // --- workers and capacity ---
  const listener: WorkerListener = {
    firstToken(job, t) {
      const req = job.ref as SimRequest;
      req.firstAt = t;
      req.ticket!.markFirstByte();
      // The gateway's TTFT sample goes at a stream's first event (src/gateway/lease.ts firstToken).
      const ttftMs = t - req.admittedAt;
      req.gate!.adaptive?.sample(
        { kind: "ok", ttftMs, promptTokens: req.prompt, spanMs: ttftMs },
        req.workerUrl,
      );
    },
    finished(job, t) {
      const req = job.ref as SimRequest;
      const tokens = req.prompt + req.output;
      const gate = req.gate!;
      // The gateway's sample at the end of a stream: the decode pace (of what the pace marks did
      // not cover, when the stream ran long enough to have some); its TTFT went at the first token.
      const marked = job.paceMarks > 0;
      const since = marked ? job.paceAt : req.firstAt;
      const decoded = marked ? job.finishIter - job.paceIter : req.output - 1;
      if (decoded >= 1) {
        gate.adaptive?.sample(
          { kind: "ok", tpotMs: (t - since) / decoded, spanMs: t - req.admittedAt },
          req.workerUrl,
        );
      }
      req.counts!.served(classOfRank(req.cls), tokens);
      // The answer teaches the predictor unless it stopped at its own limit, and says how far off it was.
      const capped = req.tenant.spec.maxTokens !== undefined && req.output >= req.maxTokens;
      if (!capped) predictor.learn(req.tenant.spec.key, req.tenant.spec.modelNamed, req.output);
      if (req.prediction !== undefined) {
        req.predictionError = predictionErrorRatio(req.prediction.tokens, req.output, capped) ?? Number.NaN;
      }
      gate.policy.adjustCost(req.ticket!, tokens);
      req.fair!.completed(req.tenant.index, req.admittedAt, t, tokens);
      if (req.hold) budgets!.settle(req.hold, { inputTokens: req.prompt, outputTokens: req.output });
      leaveFleet(req);
      req.ticket!.release();
      bump(series.tenants[req.tenant.index]!.tokens, t, tokens);
      bump(series.tenants[req.tenant.index]!.completed, t);
      bump(series.classes[req.cls]!.completed, t);
      end(req, "ok", t);
    },
    failed(job, t, reason) {
      const req = job.ref as SimRequest;
      // Served but cut short: the estimate stands; nothing came out: the hold goes back.
      if (req.hold) {
        if (Number.isNaN(req.firstAt)) budgets!.refund(req.hold);
        else budgets!.settle(req.hold, undefined);
      }
      // A reset or a context-length refusal is no overload signal (the gateway counts only a
      // worker's 429/503 and upstream timeouts); what was served still counts for shedding.
      if (!Number.isNaN(req.firstAt)) req.counts!.served(classOfRank(req.cls), req.estimate);
      leaveFleet(req);
      req.ticket!.release();
      end(req, reason, t);
    },
  };
  const workers = scenario.workers.map((w, i) => new Worker(i, w.name, w.profile, clock, listener));
  /** Per worker: requests sent to it, by the model they asked for. */
  const servedModels = workers.map(() => new Map<string, number>());
  let pin: number | undefined;
  const healthyCapacity = (ws: readonly Worker[]) =>
    ws.reduce((s, w) => s + (w.up ? w.profile.maxRunning : 0), 0);
  const capacityOf = (gate: Omit<Gate, "policy" | "liveCapacity" | "reservedAt">) =>
    scenario.capacityPin ??
    pin ??
    gate.adaptive?.capacity ??
    gate.kv?.capacityOf(gate.workers) ??
    healthyCapacity(gate.workers);
  const buildGate = (ws: readonly Worker[], poolName: string | undefined): Gate => {
    // What the workers report (healthy ones only), as the gateway's discovered capacity source.
    const reported = new CapacityNotifier();
    const discovered: CapacitySource = {
      get capacity() {
        return healthyCapacity(ws);
      },
      subscribe: (listener) => reported.subscribe(listener),
    };
    const adaptive = adaptiveMode
      ? new AdaptiveCapacity(
          discovered,
          {
            minCapacity: scenario.capacity.minCapacity,
            // A pool's limit is bounded by what its workers report.
            maxCapacity:
              poolName === undefined
                ? scenario.capacity.maxCapacity
                : Math.min(scenario.capacity.maxCapacity, healthyCapacity(ws)),
            tpotSloMs: scenario.capacity.tpotSloMs,
            ttftSloMs: scenario.capacity.ttftSloMs,
            kvTargetUtilization: scenario.capacity.kv.targetUtilization,
            workers: () => ws.filter((w) => w.up),
          },
          clock,
        )
      : undefined;
    // As in the gateway: adaptive capacity sheds by the classes' queue timeouts unless configured.
    const sheddingOptions = sluice
      ? resolveShedding(scenario.shedding, scenario.classes, adaptiveMode)
      : undefined;
    const candidate = sheddingOptions ? new LoadShedding(sheddingOptions, clock) : undefined;
    const shedding = candidate?.enabled ? candidate : undefined;
    const parts = {
      adaptive,
      shedding,
      counters: { feedback: adaptive, shedding, now: () => clock.now() },
      kv:
        sluice && scenario.capacity.kv.unit === "kv_tokens"
          ? new SimKvCapacity(scenario.capacity.kv)
          : undefined,
      workers: ws,
      reported,
      inflight: [0, 0, 0, 0],
      queued: [0, 0, 0, 0],
    };
    const start = capacityOf(parts);
    const gate: Gate = {
      ...parts,
      policy: createPolicy(policyName, scenario, start, clock, poolName, prefillOfTicket),
      liveCapacity: start,
      reservedAt: undefined,
    };
    adaptive?.subscribe(() => applyCapacity(gate));
    adaptive?.setHeldBack(() => heldBackOf(gate.policy.scheduler?.snapshot().classes ?? null));
    applyCapacity(gate);
    return gate;
  };
  // Reservations are sized at the fleet's size under an adaptive limit, as in the gateway.
  const reservedAtOf = (gate: Omit<Gate, "policy" | "liveCapacity" | "reservedAt">) =>
    (scenario.capacityPin ?? pin) === undefined ? gate.adaptive?.reservedAt : undefined;
  const applyCapacity = (gate: Gate) => {
    const c = capacityOf(gate);
    const at = reservedAtOf(gate);
    if (c !== gate.liveCapacity || at !== gate.reservedAt) {
      gate.liveCapacity = c;
      gate.reservedAt = at;
      gate.policy.setCapacity(c, at);
    }
  };
  // Under the sluice policies one gate per pool; else (or with one pool) one for the fleet.
  const gatePerPool = sluice && scenario.pools.length > 1;
  const fleetGate = gatePerPool ? undefined : buildGate(workers, undefined);
  const pools: PoolRun[] = scenario.pools.map((p, i) => {
    const pool = new SimPool(
      i,
      p.name,
      p.models,
      p.workers.map((w) => ({ worker: workers[w]!, models: scenario.workers[w]!.models })),
      scenario.routing,
      routeRng,
    );
    return {
      pool,
      gate: fleetGate ?? buildGate(pool.workers, p.name),
      inflight: 0,
      queued: 0,
      series: { capacity: [], inflight: [], queued: [] },
    };
  });
  const gates: Gate[] = fleetGate ? [fleetGate] : pools.map((p) => p.gate);
  /** The model -> its pool. */
  const poolOfModel = new Map<string, PoolRun>();
  for (const p of pools) for (const m of p.pool.models) poolOfModel.set(m, p);
  const tenantPool = tenants.map((t) => poolOfModel.get(t.spec.model));
  // The fleet-wide views (capacity controller, shedding status) follow the largest gate, as the
  // gateway's fleet-wide series follow its largest pool.
  const mainGate = gates.reduce((a, b) => (b.liveCapacity > a.liveCapacity ? b : a));
  const onlyPolicy = gates.length === 1 ? gates[0]!.policy : undefined;
  const settled = onlyPolicy
    ? () => onlyPolicy.settled()
    : () => gates.reduce((n, g) => n + g.policy.settled(), 0);

  // --- request lifecycle ---
  let handled = 0;
  let nextId = 0;
  /** Retries scheduled and not yet sent (the run does not end before them). */
  let pendingRetries = 0;
  const retries = [0, 0, 0, 0];
  const preemptedPrefill = [0, 0, 0, 0];
  const attempts: AttemptRow[] | undefined = options.attempts ? [] : undefined;
  const record = (req: SimRequest, outcome: AttemptRow["outcome"], code: Outcome | "", t: number) => {
    if (attempts === undefined) return;
    const row =
      code === "" || code === "unfinished" ? undefined : ERROR_TABLE[code as keyof typeof ERROR_TABLE];
    attempts.push({
      request: req.id,
      tenant: req.tenant.spec.name,
      cls: PRIORITY_CLASSES[req.cls]!,
      attempt: req.attempt,
      arrival: req.arrival,
      admitted: req.admittedAt,
      firstToken: req.firstAt,
      end: outcome === "unfinished" ? Number.NaN : t,
      outcome,
      code: code === "ok" ? "" : code,
      status: code === "ok" ? 200 : (row?.status ?? (code === "context_length" ? 400 : 0)),
      prompt: req.prompt,
      output: req.output,
      cachedPrompt: req.job?.cached ?? 0,
      worker: req.workerUrl ?? "",
      preemptedPrefill: req.preemptedPrefill,
      recomputed: req.job?.recomputed ?? 0,
    });
  };
  /** The delay before a client re-sends a refused attempt, or undefined when it gives up. */
  const retryDelay = (req: SimRequest, outcome: Outcome, retryAfterSecs: number | undefined) => {
    const policy = req.tenant.spec.retry;
    if (policy === undefined || req.attempt >= policy.maxAttempts) return undefined;
    const row = ERROR_TABLE[outcome as keyof typeof ERROR_TABLE];
    if (row === undefined || !policy.statuses.includes(row.status)) return undefined;
    // The Retry-After the gateway would send (its error table's rule, or the error's own figure),
    // else the backoff of OpenAI's and most HTTP clients: 1 s, 2 s, 4 s, capped at 8 s.
    const after = typeof row.retryAfter === "number" ? row.retryAfter : retryAfterSecs;
    if (policy.honorRetryAfter && after !== undefined) return after * 1000;
    return Math.min(8000, 1000 * 2 ** (req.attempt - 1));
  };
  const end = (req: SimRequest, outcome: Outcome, t: number, retryAfterSecs?: number) => {
    req.state = DONE;
    liveSet.delete(req);
    live--;
    done++;
    const delay = outcome === "ok" ? undefined : retryDelay(req, outcome, retryAfterSecs);
    if (delay !== undefined) {
      // The client sends it again: the same request, a new attempt.
      retries[req.cls]!++;
      record(req, "retried", outcome, t);
      pendingRetries++;
      clock.at(t + delay, () => {
        pendingRetries--;
        send(
          req.tenant,
          req.user,
          req.requested,
          req.cls,
          req.sizes,
          req.blocks,
          req.attempt + 1,
          req.id,
          req.firstArrival,
        );
      });
      return;
    }
    record(req, outcome === "ok" ? "ok" : REFUSALS.has(outcome) ? "refused" : "failed", outcome, t);
    const admitted = !Number.isNaN(req.admittedAt);
    const first = req.firstAt;
    const ok = outcome === "ok";
    log.add({
      tenant: req.tenant.index,
      pool: req.pool?.pool.index ?? NO_POOL,
      cls: req.cls,
      outcome: OUTCOME_INDEX[outcome],
      // A retried request counts once, from its first send (the client's view); its queue wait
      // is the last attempt's (the scheduler's).
      arrival: req.firstArrival,
      wait: admitted ? req.admittedAt - req.arrival : Number.NaN,
      ttft: Number.isNaN(first) ? Number.NaN : first - req.firstArrival,
      tpot: ok && req.output > 1 ? (t - first) / (req.output - 1) : Number.NaN,
      e2e: ok ? t - req.firstArrival : Number.NaN,
      prompt: req.prompt,
      output: req.output,
      predictionError: ok ? req.predictionError : Number.NaN,
      engineQueue: req.job ? req.job.engineQueueMs(t) : Number.NaN,
      enginePreemptions: req.job?.preemptions ?? 0,
    });
    if (!ok) bump(series.classes[req.cls]!.rejected, t);
    const spec = req.tenant.spec;
    if (spec.arrival.process === "closed") {
      let think = spec.arrival.thinkMs > 0 ? req.tenant.thinkRng.exponential(spec.arrival.thinkMs) : 0;
      // A rejected user retries no sooner than a second later (the contract's Retry-After: 1).
      if (!ok) think = Math.max(think, 1000);
      const next = t + think;
      if (next < endArrivals) clock.at(next, () => arrive(req.tenant, req.user));
    }
  };
  const leaveFleet = (req: SimRequest) => {
    inflight[req.cls]!--;
    req.pool!.inflight--;
    const gate = req.gate!;
    gate.inflight[req.cls]!--;
    if (req.kvWorker !== undefined) gate.kv!.ended(req.kvWorker, req.kvFootprint);
    req.kvWorker = undefined;
    req.counts!.ended();
    req.fair!.finished(req.estimate);
  };
  /** The request left the admission queue: the run's series of queued requests. */
  const leaveQueue = (req: SimRequest) => {
    queued[req.cls]!--;
    req.pool!.queued--;
    req.gate!.queued[req.cls]!--;
  };
  const onPreempted = (req: SimRequest) => {
    if (req.state !== ADMITTED) return;
    if (req.job?.worker) {
      // The prefill it had computed is thrown away (issue 36: the cost of a preemption).
      const lost = req.job.worker.computedPrefill(req.job);
      req.preemptedPrefill = lost;
      preemptedPrefill[req.cls]! += lost;
      req.job.worker.abort(req.job);
    }
    if (req.hold) budgets!.refund(req.hold);
    leaveFleet(req);
    req.fair!.undone(req.tenant.index, req.prompt + req.output, clock.now());
    end(req, "scheduler_preempted", clock.now(), 1);
  };
  const onAdmit = (req: SimRequest, ticket: SimTicket) => {
    handled++;
    const now = clock.now();
    const g = req.fair!;
    g.dispatched(req.tenant.index, req.prompt + req.output, req.estimate, now);
    g.left(req.tenant.index, now);
    inflight[req.cls]!++;
    req.pool!.inflight++;
    req.gate!.inflight[req.cls]!++;
    req.counts!.admitted();
    leaveQueue(req);
    req.state = ADMITTED;
    req.ticket = ticket;
    req.admittedAt = now;
    const wait = now - req.arrival;
    const cs = series.classes[req.cls]!;
    bump(cs.admitted, now);
    bump(cs.waitSumMs, now, wait);
    const b = Math.floor(now / bucketMs);
    while (cs.waitMaxMs.length <= b) cs.waitMaxMs.push(0);
    if (wait > cs.waitMaxMs[b]!) cs.waitMaxMs[b] = wait;
    requestOfTicket.set(ticket, req);
    ticket.onPreempt(() => onPreempted(req));
    if (req.state !== ADMITTED) return; // preempted before this reaction ran
    const kv = req.gate!.kv;
    const worker = req.pool!.pool.route(
      req.tenant.spec.model,
      kv === undefined ? undefined : (ws) => kv.candidates(ws, req.kvFootprint),
    );
    if (worker === undefined) {
      if (req.hold) budgets!.refund(req.hold);
      leaveFleet(req);
      ticket.release();
      end(req, "no_healthy_workers", now);
      return;
    }
    // A 0-token prompt still takes one forward pass (the engine's BOS token).
    const job = new Job(Math.max(1, req.prompt), req.output, req.maxTokens, req);
    if (req.blocks !== undefined) {
      job.prefixBlocks = req.blocks;
      job.blockTokens = req.tenant.replay!.trace.prefixBlockTokens;
    }
    req.job = job;
    req.workerUrl = worker.url;
    const served = servedModels[worker.index]!;
    served.set(req.tenant.spec.model, (served.get(req.tenant.spec.model) ?? 0) + 1);
    worker.submit(job);
    if (kv !== undefined) {
      kv.dispatched(worker, req.kvFootprint);
      req.kvWorker = worker;
    }
    req.gate!.adaptive?.dispatched(worker.url);
  };
  const onReject = (req: SimRequest, err: unknown) => {
    handled++;
    const now = clock.now();
    req.fair!.left(req.tenant.index, now);
    req.counts!.notAdmitted();
    leaveQueue(req);
    if (req.hold) budgets!.refund(req.hold);
    let code = codeOf(err);
    // Queued in a pool whose workers all left: the answer is theirs being gone, not the wait.
    if (
      (code === "scheduler_queue_timeout" || code === "admission_queue_timeout") &&
      !req.pool!.pool.healthy
    ) {
      code = "no_healthy_workers";
    }
    end(req, code, now, (err as { retryAfterSecs?: number }).retryAfterSecs);
  };

  const arrive = (tenant: TenantRuntime, user: number, blocks?: readonly number[]) => {
    let m = tenant.mix[0]!;
    if (tenant.mix.length > 1) {
      const u = tenant.classRng.next();
      m = tenant.mix.find((x) => u < x.cum) ?? tenant.mix[tenant.mix.length - 1]!;
    }
    const id = nextId++;
    send(tenant, user, m.requested, m.rank, tenant.sizes(), blocks, 1, id, clock.now());
  };
  const send = (
    tenant: TenantRuntime,
    user: number,
    requested: PriorityClass,
    rank: number,
    s: Sizes,
    blocks: readonly number[] | undefined,
    attempt: number,
    id: number,
    firstArrival: number,
  ) => {
    const now = clock.now();
    const m = { requested, rank };
    const req = new SimRequest(
      tenant,
      user,
      m.requested,
      m.rank,
      now,
      s.prompt,
      s.output,
      s.maxTokens,
      s.estPrompt + s.maxTokens,
    );
    req.sizes = s;
    req.prediction = predictor.predict({
      tenant: tenant.spec.key,
      model: tenant.spec.modelNamed,
      maxTokens: tenant.spec.maxTokens !== undefined ? s.maxTokens : undefined,
      contextTokens: contextTokens - s.estPrompt,
    });
    req.blocks = blocks;
    req.attempt = attempt;
    req.id = id;
    req.firstArrival = firstArrival;
    live++;
    liveSet.add(req);
    bump(series.classes[m.rank]!.arrivals, now);
    // The pool of its model, before the tenant's limits, as in the gateway.
    const pool = tenantPool[tenant.index];
    if (pool === undefined) {
      end(req, "model_not_found", now);
      return;
    }
    req.pool = pool;
    if (!pool.pool.healthy) {
      end(req, "no_healthy_workers", now);
      return;
    }
    const gate = pool.gate;
    req.gate = gate;
    if (gate.kv !== undefined) {
      // Its footprint, at arrival as in the gateway's lease: the mean moves the gate's capacity.
      // The expected output (learned) or the request's cap, as in the gateway; else no output part,
      // and the mean does not move.
      const maxOut = tenant.spec.maxTokens !== undefined ? s.maxTokens : undefined;
      const expected = req.prediction?.expectedTokens;
      const known = expected !== undefined || maxOut !== undefined;
      const output = expected ?? (maxOut !== undefined ? Number.POSITIVE_INFINITY : 0);
      req.kvFootprint = gate.kv.footprintOf(s.estPrompt, output, maxOut);
      if (known && gate.kv.observe(req.kvFootprint)) applyCapacity(gate);
    }
    if (budgets?.governs(tenant.spec.key)) {
      const verdict = budgets.check(tenant.spec.key, tenant.spec.modelNamed, {
        inputTokens: s.estPrompt,
        outputTokens: s.maxTokens,
      });
      if (!verdict.ok) {
        end(req, verdict.code, now, verdict.retryAfterSecs);
        return;
      }
      req.hold = verdict;
    }
    const cs = series.classes[m.rank]!;
    const shedding = gate.shedding;
    let shedClass: PriorityClass | undefined;
    if (shedding) {
      // Shedding at the door, after the budgets and before the queue, as in the gateway.
      const cls = classOfRank(m.rank);
      const verdict = shedding.check(cls, tenant.spec.key, tenant.session(user));
      if (verdict.shed) {
        if (req.hold) budgets!.refund(req.hold);
        bump(cs.shed, now);
        end(req, "load_shed", now, verdict.retryAfterSecs);
        return;
      }
      shedClass = cls;
    }
    bump(cs.passed, now);
    // Shedding weighs the queue by a learnt prediction, as the gateway's lease does.
    const predicted = req.prediction?.learned ? req.prediction.tokens : undefined;
    req.counts = new PoolTicket(gate.counters, tenant.spec.key, predicted);
    req.counts.queued(shedClass);
    queued[m.rank]!++;
    pool.queued++;
    gate.queued[m.rank]!++;
    req.fair = groups[pool.pool.index * CLASS_COUNT + m.rank]!;
    req.fair.queued(tenant.index, now);
    let signal: AbortSignal | undefined;
    const patience = tenant.spec.patienceMs;
    if (patience !== undefined) {
      const controller = new AbortController();
      req.controller = controller;
      signal = controller.signal;
      clock.at(now + patience, () => {
        if (req.state === QUEUED) controller.abort();
      });
    }
    gate.policy.acquire({ priority: m.requested, tenant: tenant.spec.key, cost: req.estimate, signal }).then(
      (ticket) => onAdmit(req, ticket),
      (err) => onReject(req, err),
    );
  };

  // --- arrivals ---
  for (const tenant of tenants) {
    const a = tenant.spec.arrival;
    if (a.process === "closed") {
      for (let u = 0; u < a.users; u++) {
        const start = a.thinkMs > 0 ? tenant.thinkRng.next() * a.thinkMs : 0;
        clock.at(start, () => arrive(tenant, u));
      }
      continue;
    }
    const replay = tenant.replay;
    if (replay) {
      // One arrival event at a time, from the trace's rows in time order: linear in the rows.
      const { trace, speed, startMs } = replay;
      const hasBlocks = trace.blocks.length > 0;
      const next = () => {
        if (replay.cursor >= trace.order.length) return;
        const i = trace.order[replay.cursor]!;
        const at = (trace.t[i]! - startMs) / speed;
        if (at >= endArrivals) return;
        clock.at(at, () => {
          replay.cursor++;
          const blocks = hasBlocks
            ? Array.from(trace.blocks.subarray(trace.blockStart[i]!, trace.blockStart[i + 1]!))
            : undefined;
          arrive(tenant, -1, blocks);
          next();
        });
      };
      next();
      continue;
    }
    const src = tenant.arrivals!;
    const schedule = (after: number) => {
      const t = src.next(after, endArrivals);
      if (t < endArrivals) {
        clock.at(t, () => {
          arrive(tenant, -1);
          schedule(t);
        });
      }
    };
    schedule(0);
  }

  // --- phases ---
  for (const ph of scenario.phases) {
    if (ph.slowdown) {
      const { workers: ws, factor } = ph.slowdown;
      clock.at(ph.fromMs, () => {
        for (const i of ws) workers[i]!.setSlowdown(factor);
      });
      if (Number.isFinite(ph.toMs)) {
        clock.at(ph.toMs, () => {
          for (const i of ws) workers[i]!.setSlowdown(1);
        });
      }
    }
    if (ph.fail) {
      const ws = ph.fail.workers;
      const touched = gates.filter((g) => ws.some((i) => g.workers.includes(workers[i]!)));
      clock.at(ph.fromMs, () => {
        for (const i of ws) workers[i]!.up = false; // stop routing there first
        for (const g of touched) {
          g.reported.changed(healthyCapacity(g.workers));
          applyCapacity(g);
        }
        for (const i of ws) workers[i]!.fail();
      });
      if (Number.isFinite(ph.toMs)) {
        clock.at(ph.toMs, () => {
          for (const i of ws) workers[i]!.recover();
          for (const g of touched) {
            g.reported.changed(healthyCapacity(g.workers));
            applyCapacity(g);
          }
        });
      }
    }
    if (ph.capacity !== undefined) {
      const c = ph.capacity;
      clock.at(ph.fromMs, () => {
        pin = c;
        for (const g of gates) applyCapacity(g);
      });
      if (Number.isFinite(ph.toMs)) {
        clock.at(ph.toMs, () => {
          pin = undefined;
          for (const g of gates) applyCapacity(g);
        });
      }
    }
  }

  // --- sampling ticks: occupancy per class and the lowest classes' entitlement ---
  const entitlement = windows.flatMap((w) =>
    [0, 1, 2].map((cls) => ({ window: w.name, cls, inflight: 0, entitled: 0, samples: 0 })),
  );
  // Each entry's window, by position (a search by name for every entry made each tick quadratic
  // in the phases: 21 s of CPU per policy-hour with 704 phases, issue 36).
  const entitlementWindows = windows.flatMap((w) => [w, w, w]);
  const tick = () => {
    const now = clock.now();
    const b = Math.round(now / bucketMs) - 1; // the bucket that just ended
    series.t[b] = (b * bucketMs) / 1000;
    let liveCapacity = 0;
    for (const g of gates) liveCapacity += g.liveCapacity;
    series.capacity[b] = liveCapacity;
    for (const p of pools) {
      p.series.capacity[b] = gatePerPool ? p.gate.liveCapacity : p.pool.capacity;
      p.series.inflight[b] = p.inflight;
      p.series.queued[b] = p.queued;
    }
    for (let r = 0; r < CLASS_COUNT; r++) {
      const cs = series.classes[r]!;
      while (cs.inflight.length <= b) cs.inflight.push(0);
      while (cs.queued.length <= b) cs.queued.push(0);
      cs.inflight[b] = inflight[r]!;
      cs.queued[b] = queued[r]!;
    }
    let kv = 0;
    let up = 0;
    for (const w of workers) {
      if (!w.up) continue;
      up++;
      kv += w.kvTokensUsed / w.profile.kvTokens;
    }
    series.kv[b] = up > 0 ? kv / up : 0;
    const adaptive = mainGate.adaptive;
    if (adaptive) {
      // One controller per worker: the fleet's signal is the median over the workers (the
      // snapshot's own fields are those of the worker with the highest ratio, a biased pick).
      const snap = adaptive.snapshot();
      const perWorker = snap.workers ?? [];
      series.tpotBaseline[b] =
        perWorker.length > 0
          ? medianOf(perWorker.map((w) => w.tpotBaselineMs))
          : (snap.tpotBaselineMs ?? Number.NaN);
      series.tpotP90[b] =
        perWorker.length > 0 ? medianOf(perWorker.map((w) => w.tpotP90Ms)) : (snap.tpotP90Ms ?? Number.NaN);
    }
    // Entitlement of class c: the capacity no higher class holds, by reservation or by use, in
    // each gate where the class has waiters.
    const reserved = gates.map((g) => reservations(g.liveCapacity, g.reservedAt));
    for (let k = 0; k < entitlement.length; k++) {
      const e = entitlement[k]!;
      const w = entitlementWindows[k]!;
      if (now <= w.fromMs || now > w.toMs) continue;
      let sampled = false;
      gates.forEach((g, k) => {
        if (g.queued[e.cls] === 0) return;
        let held = 0;
        for (let h = e.cls + 1; h < CLASS_COUNT; h++) held += Math.max(reserved[k]![h]!, g.inflight[h]!);
        e.inflight += g.inflight[e.cls]!;
        e.entitled += Math.max(0, g.liveCapacity - held);
        sampled = true;
      });
      if (sampled) e.samples++;
    }
    if (now < endArrivals || live > 0 || pendingRetries > 0) clock.at(now + bucketMs, tick);
  };
  // The scheduler's own arithmetic (clamped highest class first, scaled under an adaptive limit).
  const reservations = (cap: number, at: number | undefined): number[] => {
    const slots = new Slots(scenario.classes, cap);
    if (at !== undefined) slots.setCapacity(cap, at);
    return slots.reserved;
  };
  clock.at(bucketMs, tick);

  // --- the loop ---
  const progressEvery = options.progressEveryMs ?? 60_000;
  let nextProgress = progressEvery;
  let events = 0;
  let lastT = 0;
  let sameInstant = 0;
  // Rejections are typed errors; their stack traces are never looked at here and cost a fifth of
  // the run under overload. Restored when the loop ends.
  const stackLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  // The gateway's pace marks while streams run (lease.ts): every decoding request's pace since
  // its last mark, once that is paceIntervalMs old; looked at every quarter of a second.
  const paceMarks = gates.flatMap((g) => {
    const adaptive = g.adaptive;
    if (adaptive === undefined) return [];
    return [
      new Periodic(clock, PACE_CHECK_MS, () => {
        const now = clock.now();
        for (const w of g.workers) {
          w.paceMarks(now, adaptive.paceIntervalMs, (_, tpotMs, spanMs) =>
            adaptive.sample({ kind: "ok", tpotMs, spanMs }, w.url),
          );
        }
      }),
    ];
  });
  for (const g of gates) {
    g.adaptive?.start();
    g.shedding?.start();
  }
  for (const p of paceMarks) p.start();
  try {
    await loop();
  } finally {
    Error.stackTraceLimit = stackLimit;
    for (const g of gates) {
      g.adaptive?.stop();
      g.shedding?.stop();
    }
    for (const p of paceMarks) p.stop();
  }
  async function loop(): Promise<void> {
    for (;;) {
      const ev = queue.pop();
      if (ev === undefined || ev.t > endMs) break;
      if (ev.t === clock.current) {
        if (++sameInstant > 5_000_000) {
          throw new Error(
            `simulator: over 5,000,000 events at t=${ev.t} ms without time moving (a timer that keeps re-arming at the same instant?)`,
          );
        }
      } else sameInstant = 0;
      clock.current = ev.t;
      lastT = ev.t;
      ev.fn();
      events++;
      if (settled() !== handled) {
        let spins = 0;
        while (settled() !== handled) {
          await null;
          if (++spins > 1000) throw new Error("simulator: an admission promise did not settle");
        }
      }
      if (options.onProgress && ev.t >= nextProgress) {
        nextProgress += progressEvery;
        options.onProgress({
          simMs: ev.t,
          queued: queued.reduce((a, b) => a + b, 0),
          inflight: inflight.reduce((a, b) => a + b, 0),
          done,
        });
      }
      if (live === 0 && pendingRetries === 0 && ev.t >= endArrivals && queue.peekTime() > endArrivals) {
        // Nothing left to do but timers of an idle system.
        break;
      }
    }
  }
  const finalT = Math.max(lastT, clock.current);
  for (const g of groups) g.close(finalT);
  // Still queued or running when the drain ran out: logged as unfinished, never as served.
  for (const req of [...liveSet]) {
    liveSet.delete(req);
    const admitted = !Number.isNaN(req.admittedAt);
    record(req, "unfinished", "unfinished", finalT);
    log.add({
      tenant: req.tenant.index,
      pool: req.pool?.pool.index ?? NO_POOL,
      cls: req.cls,
      outcome: OUTCOME_INDEX.unfinished,
      arrival: req.firstArrival,
      wait: admitted ? req.admittedAt - req.arrival : Number.NaN,
      ttft: Number.isNaN(req.firstAt) ? Number.NaN : req.firstAt - req.firstArrival,
      tpot: Number.NaN,
      e2e: Number.NaN,
      prompt: req.prompt,
      output: req.output,
      predictionError: Number.NaN,
      engineQueue: req.job ? req.job.engineQueueMs(finalT) : Number.NaN,
      enginePreemptions: req.job?.preemptions ?? 0,
    });
  }
  return {
    policy: policyName,
    log,
    series,
    groups,
    workers: workers.map((w, i) => ({
      name: w.name,
      stats: w.stats,
      models: Object.fromEntries([...servedModels[i]!].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
    })),
    pools: pools.map((p) => ({
      name: p.pool.name,
      series: p.series,
      capacity: gatePerPool ? capacityRun(p.gate) : undefined,
    })),
    promotions: sumOver(gates, (g) => g.policy.promotions()),
    clamps: gates.reduce((n, g) => n + g.policy.clamps(), 0),
    entitlement,
    capacity: capacityRun(mainGate),
    endMs: finalT,
    events,
    preemptedPrefillTokens: preemptedPrefill,
    retries,
    attempts,
  };
}

/** Median of the known values (NaN when none is). */
function medianOf(values: (number | null)[]): number {
  const known = values.filter((v): v is number => v !== null).sort((a, b) => a - b);
  if (known.length === 0) return Number.NaN;
  const mid = known.length >> 1;
  return known.length % 2 === 1 ? known[mid]! : (known[mid - 1]! + known[mid]!) / 2;
}
