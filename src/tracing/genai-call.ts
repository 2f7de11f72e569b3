/**
 * One finished request as GenAI metrics see it, and the port they are recorded through. Kept apart
 * from the metrics SDK (genai-metrics.ts) so the span code can hand a request over without loading
 * it: with metrics off, the gateway never imports the SDK.
 */
import type { GenAiOperation } from "./genai-attributes.js";

export interface FinishedCall {
  /** Undefined for a route that is no GenAI operation: only the queue wait is recorded then. */
  readonly operation: GenAiOperation | undefined;
  /** `gen_ai.provider.name`: the worker's engine, or PROVIDER_UNKNOWN. */
  readonly provider: string;
  readonly requestModel: string | undefined;
  readonly responseModel: string | undefined;
  /** The worker that served it (the last attempt's). */
  readonly serverAddress: string | undefined;
  readonly serverPort: number | undefined;
  /** The gateway's error code, or the worker's 4xx/5xx status; undefined when it succeeded. */
  readonly errorType: string | undefined;
  /** Arrival to the request's end, seconds. */
  readonly durationS: number;
  /** Arrival to the first token of a successful stream, seconds; undefined otherwise. */
  readonly timeToFirstTokenS: number | undefined;
  /** A successful stream's time per output token after the first, seconds. */
  readonly timePerOutputTokenS: number | undefined;
  /** The worker's reported usage (never an estimate). */
  readonly inputTokens: number | undefined;
  readonly outputTokens: number | undefined;
  /** Time waiting for a slot, seconds; undefined when the request never queued for one. */
  readonly queueWaitS: number | undefined;
  readonly effectiveClass: string | undefined;
  readonly pool: string | undefined;
  /** How it got (or did not get) its slot: fast, queued, rejected. */
  readonly admission: string;
}

/** Where finished requests go when GenAI metrics are on. */
export interface FinishedCallSink {
  record(call: FinishedCall): void;
}
