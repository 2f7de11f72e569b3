import assert from "node:assert/strict";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { mulberry32 as prng } from "@sluice/scheduler/core/random.js";
import {
  type AdaptiveDecision,
  AdaptiveLimit,
  type AdaptiveLimitOptions,
} from "../../src/capacity/adaptive-limit.js";

// The adaptive limit's test bench, shared by the adaptive-limit-*.test.ts files: a simulated pool
// with a knee, the band a converged limit must sit in, and the option bounds every test starts from.

// ---------------------------------------------------------------------------------------------
// A simulated worker pool with a knee, driven window by window (1 window = windowMs = 1 s).

export interface WorkerModel {
  /** Concurrency up to which latency is flat. */
  knee: number;
  /** TPOT at or below the knee, ms. */
  baseTpotMs: number;
  /** Past the knee latency is base * (1 + slope * (c - knee)). */
  slope: number;
  /** TTFT = (ttftFixedMs + ttftPerTokenMs * promptTokens) * load factor. */
  ttftFixedMs: number;
  ttftPerTokenMs: number;
  /** A worker-wide slowdown (1 = none): every latency is multiplied by it. */
  slowdown: number;
}

export const KNEE = 16;
export const BASE_TPOT = 20;

export function worker(overrides: Partial<WorkerModel> = {}): WorkerModel {
  return {
    knee: KNEE,
    baseTpotMs: BASE_TPOT,
    slope: 0.5,
    ttftFixedMs: 30,
    ttftPerTokenMs: 0.1,
    slowdown: 1,
    ...overrides,
  };
}

export function loadFactor(w: WorkerModel, c: number): number {
  return (c <= w.knee ? 1 : 1 + w.slope * (c - w.knee)) * w.slowdown;
}

export const shortPrompt = (r: () => number) => 100 + Math.floor(r() * 100);
export const longPrompt = (r: () => number) => 8000 + Math.floor(r() * 4000);

/**
 * Fluid model: each window the pool runs c = min(limit, demand) requests, reports that level and
 * the queue behind it, and max(12, c) completions whose TPOT and TTFT follow the model at c, with
 * +-5% jitter.
 */
export class Sim {
  readonly clock = new ManualClock();
  readonly ctl: AdaptiveLimit;
  readonly model: WorkerModel;
  readonly rand: () => number;
  demand = 100;
  prompt: (r: () => number) => number = shortPrompt;
  /** Share of the limit the scheduler's reservations hold back for idle higher classes. */
  reserved = 0;
  /** Tell the controller about those slots (setHeldBack), as the gateway does. */
  reportHeld = true;
  /** What ran, per window. */
  readonly ran: number[] = [];

  constructor(options: Partial<AdaptiveLimitOptions> = {}, model = worker(), seed = 1) {
    this.model = model;
    this.rand = prng(seed);
    this.ctl = new AdaptiveLimit(
      { minCapacity: 1, maxCapacity: 256, initialCapacity: 64, ...options },
      this.clock,
    );
  }

  window(): AdaptiveDecision | undefined {
    const room = Math.floor(this.ctl.limit * (1 - this.reserved));
    const c = Math.min(room, this.demand);
    this.ran.push(c);
    this.ctl.sampleUsage(c, this.demand - c);
    this.ctl.setHeldBack(this.reportHeld && this.demand > c ? this.ctl.limit - room : 0);
    const f = loadFactor(this.model, c);
    const n = c > 0 ? Math.max(12, c) : 0;
    for (let i = 0; i < n; i++) {
      const promptTokens = this.prompt(this.rand);
      const jitter = () => 0.95 + 0.1 * this.rand();
      this.ctl.observe({
        kind: "ok",
        promptTokens,
        ttftMs: (this.model.ttftFixedMs + this.model.ttftPerTokenMs * promptTokens) * f * jitter(),
        tpotMs: this.model.baseTpotMs * f * jitter(),
      });
    }
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

export const LOW = 0.8 * KNEE; // 12.8
export const HIGH = 1.25 * KNEE; // 20
export const inBand = (limit: number) => limit >= LOW && limit <= HIGH;

/** Windows until the limit is in the band (1-based), or Infinity. */
export function windowsToBand(limits: number[]): number {
  const i = limits.findIndex(inBand);
  return i < 0 ? Number.POSITIVE_INFINITY : i + 1;
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
