/**
 * The load client of the streaming case. autocannon does not report time to first byte, so this client
 * is a small loopback one of its own, built on undici: a Pool of `connections` keep-alive connections
 * (pipelining 1), and `pool.dispatch` with a minimal handler per request, with no stream objects and no
 * promises per request. For each request it records:
 * - time to first byte (TTFB): from the dispatch call to the first byte of the response body (the
 *   first SSE event). sluice holds the worker's status and headers until that byte, so the first body
 *   byte, not the status line, is the moment every target is compared on;
 * - the total time: from the dispatch call to the end of the body.
 * A response counts when it is a 2xx whose body ends with the stream's `data: [DONE]` event.
 *
 * Two modes:
 * - maximum load (no `rate`): closed loop, `connections` requests in flight, each one sent again as soon
 *   as the last one ends;
 * - fixed rate: open loop, with requests dispatched on a timer at `rate` per second whatever the answers
 *   do. Timers have a 1 ms resolution, so requests due in the same millisecond go together (at 2,000/s,
 *   two per millisecond); times start at the dispatch call, not at the due time (like the autocannon
 *   runs: no coordinated-omission correction). A request due while every connection is busy waits in the
 *   pool, and that wait counts.
 */
import { type Dispatcher, Pool } from "undici";
import type { RunResult } from "./load.js";
import { Samples } from "./load.js";
import { REQUEST_PATH, type RequestVariant } from "./workload.js";

export interface StreamLoadOptions {
  connections: number;
  durationS: number;
  /** Requests per second; absent = as fast as the target answers. */
  rate?: number | undefined;
  variants: RequestVariant[];
}

export interface StreamRunResult extends RunResult {
  ttfbP50Ms: number;
  ttfbP99Ms: number;
}

const DONE = Buffer.from("data: [DONE]\n\n");

interface Prepared {
  method: "POST";
  path: string;
  headers: Record<string, string>;
  body: Buffer;
}

class StreamRequest implements Dispatcher.DispatchHandler {
  private readonly t0 = performance.now();
  private status = 0;
  private firstByte = -1;
  /** The body's last bytes, enough to see the `[DONE]` event. */
  private tail: Buffer | undefined;

  constructor(private readonly run: Run) {}

  onConnect(): void {}

  onHeaders(statusCode: number): boolean {
    this.status = statusCode;
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.firstByte < 0) this.firstByte = performance.now();
    this.tail =
      chunk.length >= DONE.length || this.tail === undefined
        ? chunk
        : Buffer.concat([this.tail, chunk]).subarray(-DONE.length);
    return true;
  }

  onComplete(): void {
    const ok =
      this.status >= 200 &&
      this.status < 300 &&
      this.tail !== undefined &&
      this.tail.length >= DONE.length &&
      this.tail.subarray(this.tail.length - DONE.length).equals(DONE);
    this.run.ended(ok, this.t0, this.firstByte, performance.now());
  }

  onError(): void {
    this.run.ended(false, this.t0, -1, performance.now());
  }
}

class Run {
  readonly ttfb = new Samples();
  readonly total = new Samples();
  ok = 0;
  failures = 0;
  inflight = 0;
  private next = 0;
  private stopAt = Number.POSITIVE_INFINITY;
  private onIdle: (() => void) | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly prepared: Prepared[],
    /** Closed loop: send the next request when one ends. */
    private readonly closed: boolean,
  ) {}

  start(stopAt: number): void {
    this.stopAt = stopAt;
  }

  send(): void {
    const options = this.prepared[this.next]!;
    this.next = (this.next + 1) % this.prepared.length;
    this.inflight++;
    this.pool.dispatch(options, new StreamRequest(this));
  }

  ended(ok: boolean, t0: number, firstByte: number, end: number): void {
    this.inflight--;
    // Only requests that ended within the measured window count.
    if (end <= this.stopAt) {
      if (ok) {
        this.ok++;
        this.ttfb.push(firstByte - t0);
        this.total.push(end - t0);
      } else this.failures++;
    }
    if (this.closed && end < this.stopAt) this.send();
    else if (this.inflight === 0) this.onIdle?.();
  }

  /** Resolves once no request is in flight. */
  idle(): Promise<void> {
    if (this.inflight === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.onIdle = resolve;
    });
  }
}

/** One run against `baseUrl`: maximum load, or `rate` requests per second. */
export async function runStreamLoad(baseUrl: string, options: StreamLoadOptions): Promise<StreamRunResult> {
  const { connections, durationS, rate, variants } = options;
  const pool = new Pool(baseUrl, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const prepared: Prepared[] = variants.map((v) => ({
    method: "POST",
    path: REQUEST_PATH,
    headers: v.headers,
    body: Buffer.from(v.body),
  }));
  const run = new Run(pool, prepared, rate === undefined);
  try {
    const t0 = performance.now();
    const stopAt = t0 + durationS * 1000;
    run.start(stopAt);
    if (rate === undefined) {
      for (let i = 0; i < connections; i++) run.send();
    } else {
      const interval = 1000 / rate;
      let due = t0;
      await new Promise<void>((resolve) => {
        const tick = () => {
          const now = performance.now();
          while (due <= now && due < stopAt) {
            run.send();
            due += interval;
          }
          if (due >= stopAt) resolve();
          else setTimeout(tick, Math.max(0, due - performance.now()));
        };
        tick();
      });
    }
    if (rate === undefined) await new Promise((resolve) => setTimeout(resolve, stopAt - performance.now()));
    await run.idle();
    const [ttfbP50, ttfbP99] = run.ttfb.percentiles(0.5, 0.99);
    const [p50, p99] = run.total.percentiles(0.5, 0.99);
    return {
      requests: run.ok,
      rps: run.ok / durationS,
      p50Ms: p50!,
      p99Ms: p99!,
      ttfbP50Ms: ttfbP50!,
      ttfbP99Ms: ttfbP99!,
      failures: run.failures,
    };
  } finally {
    await pool.close();
  }
}
