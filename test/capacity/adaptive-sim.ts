import assert from "node:assert/strict";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import {
  type AdaptiveDecision,
  AdaptiveLimit,
  type AdaptiveLimitOptions,
  type EngineView,
} from "../../src/capacity/adaptive-limit.js";

// The adaptive limit's test bench, shared by the adaptive-limit tests: one simulated engine driven
// window by window (1 window = 1 s), whose TPOT grows linearly with the batch, as a real engine's
// step time does, and which queues what it cannot run or hold in KV.

export interface EngineModel {
  /** TPOT of a lone request, ms. */
  floorMs: number;
  /** TPOT added per request in the batch, ms. */
  perRequestMs: number;
  /** Most requests it runs at once; more wait inside it. */
  maxRunning: number;
  /** KV tokens it holds, and each request's footprint. */
  kvTokens: number;
  tokensPerRequest: number;
  /** Export its running / waiting / KV use (a /metrics the controller can read). */
  exportsSignals: boolean;
  /** Every latency x this (a slow GPU, an incident). */
  slowdown: number;
  /** Past this many running, TPOT x (1 + kneeSlowdown x the excess), as `mock-worker --knee` (0: none). */
  knee: number;
  kneeSlowdown: number;
}

/** TPOT 10 ms alone, 20 ms at 40 requests: with tpot_slo_ms 20 the set point (0.97) sits near 38. */
export function engine(overrides: Partial<EngineModel> = {}): EngineModel {
  return {
    floorMs: 10,
    perRequestMs: 0.25,
    maxRunning: 256,
    kvTokens: 1_000_000,
    tokensPerRequest: 1000,
    exportsSignals: true,
    slowdown: 1,
    knee: 0,
    kneeSlowdown: 0.5,
    ...overrides,
  };
}

export const SLO_MS = 20;

export class Sim {
  readonly clock = new ManualClock();
  readonly ctl: AdaptiveLimit;
  readonly rand: () => number;
  /** Requests that want to run (the rest of the limit stays idle). */
  demand = 200;
  /** Worker overloads (429/503) to report in the next window. */
  overloads = 0;
  /** Answers carry token timings (false: answers without token counts give no TPOT). */
  timed = true;
  /** What ran, per window. */
  readonly ran: number[] = [];

  constructor(
    options: Partial<AdaptiveLimitOptions> = {},
    readonly model = engine(),
    seed = 1,
  ) {
    this.rand = prng(seed);
    this.ctl = new AdaptiveLimit(
      { minCapacity: 1, maxCapacity: 256, initialCapacity: 256, tpotSloMs: SLO_MS, ...options },
      this.clock,
    );
  }

  /** What the engine says with `sent` requests on it. */
  view(sent: number): EngineView | undefined {
    const m = this.model;
    if (!m.exportsSignals) return undefined;
    const kvRoom = Math.floor(m.kvTokens / m.tokensPerRequest);
    const running = Math.min(sent, m.maxRunning, kvRoom);
    const kvUtilization = (running * m.tokensPerRequest) / m.kvTokens;
    return { running, waiting: sent - running, kvUtilization, maxRunning: m.maxRunning };
  }

  /** TPOT at `running` requests, with +-5% jitter. */
  tpot(running: number): number {
    const m = this.model;
    const pastKnee = m.knee > 0 ? Math.max(0, running - m.knee) : 0;
    const jitter = 0.95 + 0.1 * this.rand();
    return (m.floorMs + m.perRequestMs * running) * m.slowdown * (1 + m.kneeSlowdown * pastKnee) * jitter;
  }

  window(): AdaptiveDecision | undefined {
    const sent = Math.min(this.ctl.limit, this.demand);
    this.ran.push(sent);
    this.ctl.sampleUsage(sent, this.demand - sent);
    const view = this.view(sent);
    this.ctl.sampleEngine(view);
    const running = view?.running ?? sent;
    // Each running request reports a pace mark that began within this window.
    if (this.timed) {
      for (let i = 0; i < running; i++)
        this.ctl.observe({ kind: "ok", tpotMs: this.tpot(running), spanMs: 500 });
    }
    for (let i = 0; i < this.overloads; i++) this.ctl.observe({ kind: "overload" });
    this.overloads = 0;
    this.clock.advance(1000);
    return this.ctl.tick();
  }

  /** Runs `n` windows; returns the limit after each. */
  run(n: number): number[] {
    const limits: number[] = [];
    for (let i = 0; i < n; i++) {
      this.window();
      limits.push(this.ctl.limit);
    }
    return limits;
  }
}

export function range(limits: number[]): [number, number] {
  return [Math.min(...limits), Math.max(...limits)];
}

export function configError(fn: () => unknown, what: string): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `${what}: expected a ConfigError, got ${String(err)}`);
    return err;
  }
  assert.fail(`${what}: expected a ConfigError`);
}

export const BOUNDS = { minCapacity: 1, maxCapacity: 256, initialCapacity: 64 };
