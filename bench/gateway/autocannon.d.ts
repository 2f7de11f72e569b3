/** The slice of autocannon 8's API the gateway bench uses (the package ships no types). */
declare module "autocannon" {
  import type { EventEmitter } from "node:events";

  export interface Options {
    url: string;
    method?: "GET" | "POST" | "PUT" | "DELETE" | "PATCH" | "HEAD" | "OPTIONS";
    headers?: Record<string, string>;
    body?: string | Buffer;
    /** A sequence each connection cycles through; each entry overrides the defaults above. */
    requests?: Array<{
      method?: Options["method"];
      path?: string;
      headers?: Record<string, string>;
      body?: string | Buffer;
    }>;
    connections?: number;
    /** Seconds. */
    duration?: number;
    pipelining?: number;
    /** Seconds before a request counts as timed out. */
    timeout?: number;
    /** Requests per second over all connections (a per-connection quota, refilled once a second). */
    overallRate?: number;
    connectionRate?: number;
    ignoreCoordinatedOmission?: boolean;
    skipAggregateResult?: boolean;
  }

  export interface Histogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    p50: number;
    p90: number;
    p99: number;
    total: number;
    sent?: number;
  }

  export interface Result {
    url: string;
    requests: Histogram;
    latency: Histogram;
    throughput: Histogram;
    errors: number;
    timeouts: number;
    mismatches: number;
    non2xx: number;
    resets: number;
    /** Seconds, to 10 ms. */
    duration: number;
    start: Date;
    finish: Date;
    "1xx": number;
    "2xx": number;
    "3xx": number;
    "4xx": number;
    "5xx": number;
    statusCodeStats: Record<string, { count: number }>;
  }

  /** An EventEmitter that is also a promise of the result. */
  export interface Instance extends EventEmitter, PromiseLike<Result> {
    stop(): void;
    on(
      event: "response",
      listener: (client: unknown, statusCode: number, bytes: number, ms: number) => void,
    ): this;
    on(event: "start" | "done" | "tick", listener: (...args: unknown[]) => void): this;
    on(event: string, listener: (...args: unknown[]) => void): this;
  }

  function autocannon(options: Options): Instance;
  export default autocannon;
}
