/**
 * One autocannon run against one target (the non-streaming case). Latencies are recorded here from each
 * response's own timing (autocannon's histogram keeps whole milliseconds, too coarse for a 0.5 ms
 * target), without autocannon's coordinated-omission correction.
 */
import { setTimeout as sleep } from "node:timers/promises";
import autocannon, { type Result } from "autocannon";
import { REQUEST_PATH, type RequestVariant, rotated } from "./workload.js";

export interface LoadOptions {
  connections: number;
  durationS: number;
  /** Requests per second over all connections; absent = as fast as the target answers. */
  rate?: number | undefined;
  /** What to send: each connection cycles through these (prebuilt by autocannon). */
  variants: RequestVariant[];
}

export interface RunResult {
  /** 2xx responses. */
  requests: number;
  /** 2xx responses per second. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Connection errors, timeouts and non-2xx answers. */
  failures: number;
}

/** A growable list of numbers, with nearest-rank percentiles. */
export class Samples {
  private data = new Float64Array(1 << 16);
  length = 0;
  push(value: number): void {
    if (this.length === this.data.length) {
      const bigger = new Float64Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.length++] = value;
  }
  /** Nearest-rank percentiles (q in 0..1) of what was recorded. */
  percentiles(...qs: number[]): number[] {
    const sorted = this.data.subarray(0, this.length).sort();
    return qs.map((q) =>
      sorted.length === 0
        ? Number.NaN
        : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!,
    );
  }
}

function start(
  baseUrl: string,
  connections: number,
  durationS: number,
  rate: number | undefined,
  variants: RequestVariant[],
  samples: Samples,
) {
  const instance = autocannon({
    url: baseUrl + REQUEST_PATH,
    requests: variants.map((v) => ({ method: "POST", path: REQUEST_PATH, headers: v.headers, body: v.body })),
    connections,
    duration: durationS,
    pipelining: 1,
    timeout: 10,
    ...(rate !== undefined ? { overallRate: rate } : {}),
  });
  instance.on("response", (_client, statusCode, _bytes, ms) => {
    if (statusCode >= 200 && statusCode < 300) samples.push(ms);
  });
  return instance;
}

/**
 * As fast as the target answers (no `rate`), or at `rate` requests per second.
 *
 * autocannon's `overallRate` gives each connection a quota per second that it spends at once, back to
 * back, when its one-second window opens; one instance with all the connections thus sends the whole
 * second's load in a saturating burst and then idles. For a steady rate the connections are split into
 * single-connection instances, each with its share of `overallRate`, their starts staggered across one
 * second so that their windows open one after another.
 */
export async function runLoad(baseUrl: string, options: LoadOptions): Promise<RunResult> {
  const samples = new Samples();
  const { connections, durationS, rate, variants } = options;
  let results: Result[];
  if (rate === undefined) {
    results = [await start(baseUrl, connections, durationS, undefined, variants, samples)];
  } else {
    const total = Math.max(connections, Math.round(rate));
    const share = (i: number) => Math.floor(total / connections) + (i < total % connections ? 1 : 0);
    results = await Promise.all(
      Array.from({ length: connections }, async (_, i) => {
        await sleep((i * 1000) / connections);
        return start(baseUrl, 1, durationS, share(i), rotated(variants, i), samples);
      }),
    );
  }
  const [p50, p99] = samples.percentiles(0.5, 0.99);
  return {
    requests: results.reduce((sum, r) => sum + r["2xx"], 0),
    // Each instance's own rate, summed: the staggered instances cover slightly different windows.
    rps: results.reduce((sum, r) => sum + r["2xx"] / r.duration, 0),
    p50Ms: p50!,
    p99Ms: p99!,
    failures: results.reduce((sum, r) => sum + r.errors + r.timeouts + r.non2xx, 0),
  };
}
