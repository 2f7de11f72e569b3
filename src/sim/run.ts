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
 */
import { AdaptiveCapacity } from "../capacity/adaptive.js";
import type { AdaptiveLimitSnapshot } from "../capacity/adaptive-limit.js";
import { LoadShedding, type LoadSheddingStatus } from "../capacity/load-shedding.js";
import { CapacityNotifier, type CapacitySource } from "../capacity/source.js";
import { BudgetBook, type BudgetHold } from "../core/budgets.js";
import { CLASS_COUNT, CLASS_RANK, classOfRank, type PriorityClass } from "../core/class.js";
import { requiredReservation } from "../core/config.js";
import { EventQueue, SimClock } from "./clock.js";
import { FairnessGroup, type Window } from "./fairness.js";
import { OUTCOME_INDEX, type Outcome, RequestLog } from "./log.js";
import { type AdmissionPolicy, createPolicy, type SimTicket } from "./policies.js";
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

class SimRequest {
  state = QUEUED;
  ticket: SimTicket | undefined;
  hold: BudgetHold | undefined;
  job: Job | undefined;
  admittedAt = Number.NaN;
  firstAt = Number.NaN;
  controller: AbortController | undefined;
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

interface TenantRuntime {
  readonly index: number;
  readonly spec: ResolvedTenant;
  readonly weight: number;
  /** Requested class and its effective (clamped) rank, with cumulative probabilities. */
  readonly mix: { requested: PriorityClass; rank: number; cum: number }[];
  readonly sizes: () => { prompt: number; output: number; maxTokens: number; estPrompt: number };
  readonly classRng: Rng;
  readonly thinkRng: Rng;
  /** The session header's value for a request of user `user` (-1: open loop), or undefined. */
  readonly session: (user: number) => string | undefined;
  arrivals: OpenArrivals | undefined;
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
export interface CapacityRun {
  mode: "static" | "adaptive";
  controller: AdaptiveLimitSnapshot | undefined;
  shedding: LoadSheddingStatus | undefined;
}

export interface RunResult {
  policy: PolicyName;
  log: RequestLog;
  series: Series;
  groups: FairnessGroup[];
  workers: { name: string; stats: WorkerStats }[];
  promotions: number[];
  clamps: number;
  /** Per class: sum over samples of in-flight, and of the class's entitlement (see report.ts), per window. */
  entitlement: { window: string; cls: number; inflight: number; entitled: number; samples: number }[];
  capacity: CapacityRun;
  endMs: number;
  events: number;
}

export interface RunOptions {
  /** Called every `progressEveryMs` of simulated time (default 60 s), for --watch. */
  onProgress?:
    | ((info: { simMs: number; queued: number; inflight: number; done: number }) => void)
    | undefined;
  progressEveryMs?: number | undefined;
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
  if (spec.trace) {
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
  if (spec.arrival.process !== "closed") {
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
  };
}

function codeOf(err: unknown): Outcome {
  const code = (err as { code?: string }).code;
  if (code !== undefined && code in OUTCOME_INDEX) return code as Outcome;
  throw err;
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
  const groups: FairnessGroup[] = [];
  for (let r = 0; r < CLASS_COUNT; r++) {
    const members = tenants.filter((t) => classesOf[t.index]!.includes(r));
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
  const sluice = SLUICE_POLICIES.includes(policyName);
  const budgets = sluice
    ? new BudgetBook({ policies: scenario.tenantPolicies, pricing: scenario.pricing, clock })
    : undefined;
  // Issue 12's gateway features, for the sluice policies: shedding at the door when configured, and
  // adaptive capacity for sluice-adaptive (and sluice under capacity_mode: adaptive).
  const shedding = sluice && scenario.shedding ? new LoadShedding(scenario.shedding, clock) : undefined;
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

  // --- workers and capacity ---
  const listener: WorkerListener = {
    firstToken(job, t) {
      const req = job.ref as SimRequest;
      req.firstAt = t;
      req.ticket!.markFirstByte();
    },
    finished(job, t) {
      const req = job.ref as SimRequest;
      const tokens = req.prompt + req.output;
      // The gateway's sample at the end of a stream: TTFT from dispatch, then the decode pace.
      adaptive?.sample({
        kind: "ok",
        ttftMs: req.firstAt - req.admittedAt,
        promptTokens: req.prompt,
        tpotMs: req.output >= 2 ? (t - req.firstAt) / (req.output - 1) : undefined,
      });
      shedding?.served(classOfRank(req.cls), req.tenant.spec.key, tokens);
      policy.adjustCost(req.ticket!, tokens);
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
      if (!Number.isNaN(req.firstAt))
        shedding?.served(classOfRank(req.cls), req.tenant.spec.key, req.estimate);
      leaveFleet(req);
      req.ticket!.release();
      end(req, reason, t);
    },
  };
  const workers = scenario.workers.map((w, i) => new Worker(i, w.name, w.profile, clock, listener));
  let pin: number | undefined;
  const fleetCapacity = () => workers.reduce((s, w) => s + (w.up ? w.profile.maxRunning : 0), 0);
  // What the workers report (healthy ones only), as the gateway's discovered capacity source.
  const reported = new CapacityNotifier();
  const discovered: CapacitySource = {
    get capacity() {
      return fleetCapacity();
    },
    subscribe: (listener) => reported.subscribe(listener),
  };
  const adaptive = adaptiveMode
    ? new AdaptiveCapacity(
        discovered,
        {
          ...scenario.capacity.tuning,
          minCapacity: scenario.capacity.minCapacity,
          maxCapacity: scenario.capacity.maxCapacity,
          tpotSloMs: scenario.capacity.tpotSloMs,
          ttftSloMs: scenario.capacity.ttftSloMs,
        },
        clock,
      )
    : undefined;
  const capacity = () => scenario.capacityPin ?? pin ?? adaptive?.capacity ?? fleetCapacity();
  const policy: AdmissionPolicy = createPolicy(policyName, scenario, capacity(), clock);
  let liveCapacity = capacity();
  adaptive?.subscribe(() => applyCapacity());
  const applyCapacity = () => {
    const c = capacity();
    if (c !== liveCapacity) {
      liveCapacity = c;
      policy.setCapacity(c);
    }
  };
  let rr = 0;
  const route = (): Worker | undefined => {
    let best: Worker | undefined;
    if (scenario.routing === "round_robin") {
      for (let i = 0; i < workers.length; i++) {
        const w = workers[(rr + i) % workers.length]!;
        if (w.up) {
          rr = (rr + i + 1) % workers.length;
          return w;
        }
      }
      return undefined;
    }
    if (scenario.routing === "power_of_two") {
      const up = workers.filter((w) => w.up);
      if (up.length === 0) return undefined;
      const a = up[routeRng.below(up.length)]!;
      const b = up[routeRng.below(up.length)]!;
      return b.profile.maxRunning - b.load > a.profile.maxRunning - a.load ? b : a;
    }
    for (const w of workers) {
      if (!w.up) continue;
      if (best === undefined || w.profile.maxRunning - w.load > best.profile.maxRunning - best.load) best = w;
    }
    return best;
  };

  // --- request lifecycle ---
  let handled = 0;
  const end = (req: SimRequest, outcome: Outcome, t: number) => {
    req.state = DONE;
    liveSet.delete(req);
    live--;
    done++;
    const admitted = !Number.isNaN(req.admittedAt);
    const first = req.firstAt;
    const ok = outcome === "ok";
    log.add({
      tenant: req.tenant.index,
      cls: req.cls,
      outcome: OUTCOME_INDEX[outcome],
      arrival: req.arrival,
      wait: admitted ? req.admittedAt - req.arrival : Number.NaN,
      ttft: Number.isNaN(first) ? Number.NaN : first - req.arrival,
      tpot: ok && req.output > 1 ? (t - first) / (req.output - 1) : Number.NaN,
      e2e: ok ? t - req.arrival : Number.NaN,
      prompt: req.prompt,
      output: req.output,
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
    adaptive?.inflight(-1);
    groups[req.cls]!.finished(req.estimate);
  };
  /** The request left the admission queue (admitted or not): the queue counts and its wait. */
  const leaveQueue = (req: SimRequest, now: number) => {
    queued[req.cls]!--;
    adaptive?.queued(-1);
    if (shedding) {
      const cls = classOfRank(req.cls);
      shedding.queue(cls, req.tenant.spec.key, -1);
      shedding.queueWait(cls, now - req.arrival);
    }
  };
  const onPreempted = (req: SimRequest) => {
    if (req.state !== ADMITTED) return;
    if (req.job?.worker) req.job.worker.abort(req.job);
    if (req.hold) budgets!.refund(req.hold);
    leaveFleet(req);
    groups[req.cls]!.undone(req.tenant.index, req.prompt + req.output, clock.now());
    end(req, "scheduler_preempted", clock.now());
  };
  const onAdmit = (req: SimRequest, ticket: SimTicket) => {
    handled++;
    const now = clock.now();
    const g = groups[req.cls]!;
    g.dispatched(req.tenant.index, req.prompt + req.output, req.estimate, now);
    g.left(req.tenant.index, now);
    inflight[req.cls]!++;
    adaptive?.inflight(1);
    leaveQueue(req, now);
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
    ticket.onPreempt(() => onPreempted(req));
    if (req.state !== ADMITTED) return; // preempted before this reaction ran
    const worker = route();
    if (worker === undefined) {
      if (req.hold) budgets!.refund(req.hold);
      leaveFleet(req);
      ticket.release();
      end(req, "no_healthy_workers", now);
      return;
    }
    const job = new Job(req.prompt, req.output, req.maxTokens, req);
    req.job = job;
    worker.submit(job);
  };
  const onReject = (req: SimRequest, err: unknown) => {
    handled++;
    const now = clock.now();
    groups[req.cls]!.left(req.tenant.index, now);
    leaveQueue(req, now);
    if (req.hold) budgets!.refund(req.hold);
    end(req, codeOf(err), now);
  };

  const arrive = (tenant: TenantRuntime, user: number) => {
    const now = clock.now();
    let m = tenant.mix[0]!;
    if (tenant.mix.length > 1) {
      const u = tenant.classRng.next();
      m = tenant.mix.find((x) => u < x.cum) ?? tenant.mix[tenant.mix.length - 1]!;
    }
    const s = tenant.sizes();
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
    live++;
    liveSet.add(req);
    bump(series.classes[m.rank]!.arrivals, now);
    if (budgets?.governs(tenant.spec.key)) {
      const verdict = budgets.check(tenant.spec.key, undefined, {
        inputTokens: s.estPrompt,
        outputTokens: s.maxTokens,
      });
      if (!verdict.ok) {
        end(req, verdict.code, now);
        return;
      }
      req.hold = verdict;
    }
    const cs = series.classes[m.rank]!;
    if (shedding) {
      // Shedding at the door, after the budgets and before the queue, as in the gateway.
      const cls = classOfRank(m.rank);
      const verdict = shedding.check(cls, tenant.spec.key, tenant.session(user));
      if (verdict.shed) {
        if (req.hold) budgets!.refund(req.hold);
        bump(cs.shed, now);
        end(req, "load_shed", now);
        return;
      }
      shedding.queue(cls, tenant.spec.key, 1);
    }
    bump(cs.passed, now);
    adaptive?.queued(1);
    queued[m.rank]!++;
    groups[m.rank]!.queued(tenant.index, now);
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
    policy.acquire({ priority: m.requested, tenant: tenant.spec.key, cost: req.estimate, signal }).then(
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
      clock.at(ph.fromMs, () => {
        for (const i of ws) workers[i]!.up = false; // stop routing there first
        reported.changed(fleetCapacity());
        applyCapacity();
        for (const i of ws) workers[i]!.fail();
      });
      if (Number.isFinite(ph.toMs)) {
        clock.at(ph.toMs, () => {
          for (const i of ws) workers[i]!.recover();
          reported.changed(fleetCapacity());
          applyCapacity();
        });
      }
    }
    if (ph.capacity !== undefined) {
      const c = ph.capacity;
      clock.at(ph.fromMs, () => {
        pin = c;
        applyCapacity();
      });
      if (Number.isFinite(ph.toMs)) {
        clock.at(ph.toMs, () => {
          pin = undefined;
          applyCapacity();
        });
      }
    }
  }

  // --- sampling ticks: occupancy per class and the lowest classes' entitlement ---
  const entitlement = windows.flatMap((w) =>
    [0, 1, 2].map((cls) => ({ window: w.name, cls, inflight: 0, entitled: 0, samples: 0 })),
  );
  const tick = () => {
    const now = clock.now();
    const b = Math.round(now / bucketMs) - 1; // the bucket that just ended
    series.t[b] = (b * bucketMs) / 1000;
    series.capacity[b] = liveCapacity;
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
    if (adaptive) {
      const snap = adaptive.controller.snapshot();
      series.tpotBaseline[b] = snap.tpotBaselineMs ?? Number.NaN;
      series.tpotP90[b] = snap.tpotP90Ms ?? Number.NaN;
    }
    // Entitlement of class c: the capacity no higher class holds, by reservation or by use.
    const reserved = reservations(liveCapacity);
    for (const e of entitlement) {
      const w = windows.find((x) => x.name === e.window)!;
      if (now <= w.fromMs || now > w.toMs || queued[e.cls] === 0) continue;
      let held = 0;
      for (let h = e.cls + 1; h < CLASS_COUNT; h++) held += Math.max(reserved[h]!, inflight[h]!);
      e.inflight += inflight[e.cls]!;
      e.entitled += Math.max(0, liveCapacity - held);
      e.samples++;
    }
    if (now < endArrivals || live > 0) clock.at(now + bucketMs, tick);
  };
  const reservations = (cap: number): number[] => {
    const out = [0, 0, 0, 0];
    let remaining = cap;
    for (let r = CLASS_COUNT - 1; r >= 0; r--) {
      const want = requiredReservation(
        scenario.classes[(["bulk", "default", "interactive", "system"] as const)[r]!],
        cap,
      );
      out[r] = Math.min(want, Math.max(0, remaining));
      remaining -= out[r]!;
    }
    return out;
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
  adaptive?.start();
  shedding?.start();
  try {
    await loop();
  } finally {
    Error.stackTraceLimit = stackLimit;
    adaptive?.stop();
    shedding?.stop();
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
      if (policy.settled() !== handled) {
        let spins = 0;
        while (policy.settled() !== handled) {
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
      if (live === 0 && ev.t >= endArrivals && queue.peekTime() > endArrivals) {
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
    log.add({
      tenant: req.tenant.index,
      cls: req.cls,
      outcome: OUTCOME_INDEX.unfinished,
      arrival: req.arrival,
      wait: admitted ? req.admittedAt - req.arrival : Number.NaN,
      ttft: Number.isNaN(req.firstAt) ? Number.NaN : req.firstAt - req.arrival,
      tpot: Number.NaN,
      e2e: Number.NaN,
      prompt: req.prompt,
      output: req.output,
    });
  }
  return {
    policy: policyName,
    log,
    series,
    groups,
    workers: workers.map((w) => ({ name: w.name, stats: w.stats })),
    promotions: policy.promotions(),
    clamps: policy.clamps(),
    entitlement,
    capacity: {
      mode: adaptive ? "adaptive" : "static",
      controller: adaptive?.controller.snapshot(),
      shedding: shedding?.status(),
    },
    endMs: finalT,
    events,
  };
}
