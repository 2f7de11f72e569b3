/**
 * What tenants send: token-length distributions, CSV traces, and open-loop arrival processes
 * (Poisson and bursty on/off, both modulated by rate phases and a diurnal curve by thinning).
 * Closed-loop users are driven by the simulator itself (run.ts): they send again after a response
 * and a think time.
 */
import { readFileSync } from "node:fs";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import type { Rng } from "./rng.js";

export type LengthSpec =
  | { dist: "fixed"; value: number }
  | { dist: "uniform"; min: number; max: number }
  | { dist: "lognormal"; median: number; sigma: number; min?: number | undefined; max?: number | undefined }
  | { dist: "normal"; mean: number; stddev: number; min?: number | undefined; max?: number | undefined };

/** A sampler of positive integer token counts. */
export function lengthSampler(spec: LengthSpec, rng: Rng): () => number {
  const clamp = (x: number, min = 1, max = Number.POSITIVE_INFINITY) =>
    Math.min(Math.max(Math.round(x), Math.max(1, min)), max);
  switch (spec.dist) {
    case "fixed":
      return () => spec.value;
    case "uniform": {
      const span = spec.max - spec.min + 1;
      return () => spec.min + rng.below(span);
    }
    case "lognormal": {
      const mu = Math.log(spec.median);
      return () => clamp(Math.exp(mu + spec.sigma * rng.normal()), spec.min, spec.max);
    }
    case "normal":
      return () => clamp(spec.mean + spec.stddev * rng.normal(), spec.min, spec.max);
  }
}

export interface Trace {
  readonly path: string;
  readonly prompt: Int32Array;
  readonly output: Int32Array;
}

/**
 * Reads a CSV of requests with a header row naming `prompt_tokens` and `output_tokens` (other
 * columns are ignored, in any order). Errors name the file and line.
 */
export function loadTrace(path: string, label: string): Trace {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(label, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? err}`);
  }
  const lines = text.split(/\r?\n/);
  const header = (lines[0] ?? "").split(",").map((h) => h.trim().toLowerCase());
  const pi = header.indexOf("prompt_tokens");
  const oi = header.indexOf("output_tokens");
  if (pi < 0 || oi < 0) {
    throw new ConfigError(label, `${path}: line 1: the header must name prompt_tokens and output_tokens`);
  }
  const prompt: number[] = [];
  const output: number[] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "" || line.startsWith("#")) continue;
    const cells = line.split(",");
    const p = Number(cells[pi]);
    const o = Number(cells[oi]);
    if (!Number.isInteger(p) || p < 1 || !Number.isInteger(o) || o < 1) {
      throw new ConfigError(
        label,
        `${path}: line ${i + 1}: prompt_tokens and output_tokens must be integers >= 1`,
      );
    }
    prompt.push(p);
    output.push(o);
  }
  if (prompt.length === 0) throw new ConfigError(label, `${path}: no requests in the trace`);
  return { path, prompt: Int32Array.from(prompt), output: Int32Array.from(output) };
}

/** Piecewise-constant rate multipliers or overrides (from phases), times an optional diurnal curve. */
export interface RateShape {
  /** Base rate (req/s) before phases. */
  base: number;
  /** Phase pieces in time order: [startMs, endMs) -> multiplier on base, or an absolute rate. */
  pieces: { from: number; to: number; multiplier?: number | undefined; rate?: number | undefined }[];
  diurnal?: { periodMs: number; amplitude: number; peakMs: number } | undefined;
}

/**
 * Instantaneous rate (req/s) at time t, and its maximum over the run. The phases are painted once
 * onto a sorted timeline of segments (later phases win where they overlap), so `at` is a binary
 * search: with hundreds of phases (a trace approximated by rate phases) the cost per arrival
 * stays logarithmic, where a scan over every phase made the run quadratic (issue 36).
 */
export class RateCurve {
  readonly max: number;
  /** Segment starts, ascending; segment i is [bounds[i], bounds[i + 1]). */
  private readonly bounds: number[];
  /** The base rate's override on each segment (NaN: none). */
  private readonly rates: Float64Array;
  constructor(private readonly shape: RateShape) {
    let m = shape.base;
    for (const p of shape.pieces) m = Math.max(m, p.rate ?? shape.base * (p.multiplier ?? 1));
    this.max = m * (1 + (shape.diurnal?.amplitude ?? 0));
    const edges = new Set<number>();
    for (const p of shape.pieces) {
      edges.add(p.from);
      edges.add(p.to);
    }
    this.bounds = [...edges].sort((a, b) => a - b);
    this.rates = new Float64Array(this.bounds.length).fill(Number.NaN);
    for (const p of shape.pieces) {
      const r = p.rate ?? shape.base * (p.multiplier ?? 1);
      for (let i = this.segment(p.from); i < this.bounds.length && this.bounds[i]! < p.to; i++)
        this.rates[i] = r;
    }
  }

  /** The segment holding t (-1: before the first edge). */
  private segment(t: number): number {
    let lo = 0;
    let hi = this.bounds.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.bounds[mid]! <= t) lo = mid + 1;
      else hi = mid;
    }
    return lo - 1;
  }

  at(t: number): number {
    let r = this.shape.base;
    const i = this.segment(t);
    if (i >= 0 && !Number.isNaN(this.rates[i]!)) r = this.rates[i]!;
    const d = this.shape.diurnal;
    if (d !== undefined) r *= 1 + d.amplitude * Math.cos((2 * Math.PI * (t - d.peakMs)) / d.periodMs);
    return Math.max(0, r);
  }
}

export interface OpenArrivals {
  /** The next arrival strictly after `t` (ms), or +Infinity when none comes before `end`. */
  next(t: number, end: number): number;
}

/** Non-homogeneous Poisson arrivals by thinning. */
export function poissonArrivals(curve: RateCurve, rng: Rng): OpenArrivals {
  return {
    next(t, end) {
      if (curve.max <= 0) return Number.POSITIVE_INFINITY;
      const meanGap = 1000 / curve.max;
      for (;;) {
        t += rng.exponential(meanGap);
        if (t >= end) return Number.POSITIVE_INFINITY;
        if (rng.next() * curve.max < curve.at(t)) return t;
      }
    },
  };
}

/**
 * Bursty on/off arrivals (a two-state Markov-modulated Poisson process): Poisson at the curve's
 * rate during "on" periods, nothing during "off"; both period lengths are exponential with the given
 * means. The first period is "on" and starts at time 0.
 */
export function burstyArrivals(curve: RateCurve, onMs: number, offMs: number, rng: Rng): OpenArrivals {
  let on = true;
  let periodEnd = rng.exponential(onMs);
  return {
    next(t, end) {
      if (curve.max <= 0) return Number.POSITIVE_INFINITY;
      const meanGap = 1000 / curve.max;
      for (;;) {
        if (t >= end) return Number.POSITIVE_INFINITY;
        if (!on) {
          t = Math.max(t, periodEnd);
          on = true;
          periodEnd = t + rng.exponential(onMs);
          continue;
        }
        const candidate = t + rng.exponential(meanGap);
        if (candidate >= periodEnd) {
          t = periodEnd;
          on = false;
          periodEnd = t + rng.exponential(offMs);
          continue;
        }
        t = candidate;
        if (t >= end) return Number.POSITIVE_INFINITY;
        if (rng.next() * curve.max < curve.at(t)) return t;
      }
    },
  };
}
