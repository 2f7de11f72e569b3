/**
 * What an engine's /metrics reports about finished requests: token counters, finish reasons and
 * the latency histograms (time to first token, time waiting, end to end, per output token). Each
 * Job reports its timeline here once it has finished; the engines' signal files pick what they
 * export and under which names.
 */

import { HistogramState } from "./exposition.js";

/** One request's timeline in performance.now() milliseconds, and its lengths. */
export interface FinishedRequest {
  readonly arrivedAt: number;
  /** When it first got a running slot and its KV (its time waiting ends there). */
  readonly scheduledAt: number;
  readonly firstTokenAt: number | undefined;
  readonly finishedAt: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
  readonly finishReason: "length" | "stop";
  /** Times the engine preempted it (vLLM) or retracted it (SGLang) to free KV. */
  readonly preemptions: number;
}

/** Bucket bounds of the histograms an engine keeps, in seconds (or tokens). */
interface HistogramBounds {
  readonly timeToFirstToken: readonly number[];
  readonly queueTime: readonly number[];
  readonly e2eLatency: readonly number[];
  readonly timePerOutputToken: readonly number[];
}

export class EngineStats {
  promptTokens = 0;
  generationTokens = 0;
  finished = 0;
  readonly finishReasons = new Map<string, number>();
  readonly timeToFirstToken: HistogramState;
  readonly queueTime: HistogramState;
  readonly e2eLatency: HistogramState;
  readonly timePerOutputToken: HistogramState;

  constructor(private readonly bounds: HistogramBounds) {
    this.timeToFirstToken = new HistogramState(bounds.timeToFirstToken);
    this.queueTime = new HistogramState(bounds.queueTime);
    this.e2eLatency = new HistogramState(bounds.e2eLatency);
    this.timePerOutputToken = new HistogramState(bounds.timePerOutputToken);
  }

  record(r: FinishedRequest): void {
    this.finished++;
    this.promptTokens += r.promptTokens;
    this.generationTokens += r.outputTokens;
    this.finishReasons.set(r.finishReason, (this.finishReasons.get(r.finishReason) ?? 0) + 1);
    this.queueTime.observe((r.scheduledAt - r.arrivedAt) / 1000);
    this.e2eLatency.observe((r.finishedAt - r.arrivedAt) / 1000);
    if (r.firstTokenAt !== undefined) {
      this.timeToFirstToken.observe((r.firstTokenAt - r.arrivedAt) / 1000);
      if (r.outputTokens > 1) {
        this.timePerOutputToken.observe((r.finishedAt - r.firstTokenAt) / 1000 / (r.outputTokens - 1));
      }
    }
  }

  /** A fresh set of the same histograms (resetStats). */
  fresh(): EngineStats {
    return new EngineStats(this.bounds);
  }
}
