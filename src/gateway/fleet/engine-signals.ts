/**
 * The workers' engine signals (docs/capacity.md): recognising each worker's engine when it joins,
 * then scraping its Prometheus endpoint on an interval. A reading sets what the engine reports of
 * its capacity (vLLM: max sequences, KV blocks; SGLang: /get_server_info's numbers) and the load
 * other clients hold on it (src/capacity/engine-signals/engine-load.ts), which narrows the room
 * this gateway gives the worker until the next reading.
 *
 * A worker that exports nothing usable keeps today's behaviour (configured capacity, else
 * /get_server_info's, else 64). A problem is logged once as a WARN naming the worker and what was
 * wrong, and once more (INFO) when the signals come back.
 */
import type { Clock, TimerHandle } from "@sluice/scheduler/core/clock.js";
import type { Logger } from "pino";
import {
  EngineSignalError,
  exportsFamily,
  readSglang,
  readVllm,
} from "../../capacity/engine-signals/engine-reading.js";
import { type PrometheusSample, parsePrometheusText } from "../../capacity/engine-signals/prometheus-text.js";
import type { EngineSignalOptions } from "../options.js";
import type { Worker } from "./workers.js";

/** A reported max concurrency above this is not believed (as for SGLang's max_running_requests). */
const MAX_BELIEVED_RUNNING = 16_384;

type Get = (worker: Worker, path: string, timeoutMs: number) => Promise<{ status: number; body: string }>;

interface EngineSignalReaderOptions {
  readonly settings: EngineSignalOptions;
  readonly workers: readonly Worker[];
  readonly logger: Logger;
  readonly clock: Clock;
  readonly get: Get;
  /** A reading moved some worker's capacity or foreign load: re-derive the pools' capacity. */
  readonly changed: () => void;
  /**
   * Narrow rooms by foreign load (default true). Off with shared state: the other replicas'
   * requests, which the engine counts too, are already counted by the shared admission.
   */
  readonly countForeignLoad?: boolean;
}

/** What a `/metrics` request gave: samples, or why there are none (`absent`: 404, not an error under auto). */
type MetricsAnswer =
  | { kind: "samples"; samples: PrometheusSample[] }
  | { kind: "absent"; problem: string }
  | { kind: "failed"; problem: string };

/** This gateway's in-flight requests on a worker and their prompt tokens, now. */
interface OwnNow {
  readonly requests: number;
  readonly promptTokens: number;
}

function ownNow(worker: Worker): OwnNow {
  return { requests: worker.inflight, promptTokens: worker.promptTokensInFlight };
}

function round(value: number | undefined): number | null {
  return value === undefined ? null : Number(value.toFixed(4));
}

export class EngineSignalReader {
  private timer: TimerHandle | undefined;
  private closed = false;
  private started = false;

  constructor(private readonly options: EngineSignalReaderOptions) {}

  /** Periodic scrapes are on (a positive interval). */
  get live(): boolean {
    return this.options.settings.scrapeIntervalMs > 0;
  }

  /**
   * A worker joined (or came back, possibly as another engine): decide its engine and take a first
   * reading. Called after /get_server_info was read (`worker.sglangInfo`).
   */
  async recognise(worker: Worker): Promise<void> {
    worker.engineLoad.clear();
    // Its KV size as /get_server_info says (SGLang, with or without --enable-metrics); a reading
    // replaces it. A worker that came back as another engine keeps nothing of the old one's.
    worker.kvCapacityTokens = worker.sglangInfo?.maxTotalNumTokens;
    const setting = worker.engineSetting;
    if (setting === "openai") {
      this.settle(worker, "openai", false, "configured");
      return;
    }
    const ownBefore = ownNow(worker);
    const answer = await this.fetchMetrics(worker);
    if (setting === "vllm" || setting === "sglang") {
      this.settle(worker, setting, true, "configured");
      this.apply(worker, answer, ownBefore);
      return;
    }
    const samples = answer.kind === "samples" ? answer.samples : undefined;
    if (samples !== undefined && exportsFamily(samples, "vllm:")) {
      this.settle(worker, "vllm", true, "vllm: series at /metrics");
    } else if (samples !== undefined && exportsFamily(samples, "sglang:")) {
      this.settle(worker, "sglang", true, "sglang: series at /metrics");
    } else if (worker.sglangInfo !== undefined) {
      // SGLang serves /metrics only with --enable-metrics: without it, capacity alone.
      this.settle(worker, "sglang", false, "/get_server_info (no sglang: series at /metrics)");
    } else if (worker.modelCardsLikeVllm) {
      // vLLM always serves /metrics: one without vllm: series (a proxy in front of it?) is worth a word.
      this.settle(
        worker,
        "vllm",
        false,
        "vLLM's /v1/models cards (max_model_len or owned_by vllm; no vllm: series at /metrics)",
      );
      if (answer.kind !== "failed") {
        this.problem(
          worker,
          "/metrics: no vllm: series although /v1/models looks like vLLM's (max_model_len or owned_by vllm)",
        );
      }
    } else {
      this.settle(worker, "openai", false, "neither /get_server_info nor vllm:/sglang: series at /metrics");
    }
    if (answer.kind === "failed") this.problem(worker, `/metrics: ${answer.problem}`);
    else if (worker.scrapesMetrics) this.apply(worker, answer, ownBefore);
  }

  /** The worker's engine and last reading, for the admin status (`workers[].engine_signals`). */
  statusOf(worker: Worker): Record<string, unknown> | null {
    const last = worker.engineLoad.latest;
    if (last === undefined && worker.engineProblem === undefined) return null;
    const age = worker.engineLoad.ageSeconds(this.options.clock.now());
    const r = last?.reading;
    return {
      max_running: r?.maxRunning ?? null,
      max_running_source: r?.maxRunningSource ?? null,
      kv_capacity_tokens: worker.kvCapacityTokens ?? null,
      running: r?.running ?? null,
      waiting: r?.waiting ?? null,
      kv_utilization: r?.kvUtilization ?? null,
      foreign: last?.foreign ?? null,
      estimated_open: worker.engineLoad.estimatedOpen(worker.inflight) ?? null,
      estimated_kv_utilization: round(worker.engineLoad.estimatedKvUtilization(worker.promptTokensInFlight)),
      age_seconds: age === undefined ? null : Number(age.toFixed(3)),
      scrapes: worker.engineLoad.scrapes,
      failed_scrapes: worker.engineLoad.failures,
      problem: worker.engineProblem ?? null,
    };
  }

  /** Starts the periodic scrapes (none when the interval is 0). */
  start(): void {
    this.started = true;
    this.arm();
  }

  /** Arms the next round, while some worker exports signals (no timer otherwise). */
  private arm(): void {
    if (!this.live || !this.started || this.closed || this.timer !== undefined) return;
    if (!this.options.workers.some((w) => w.scrapesMetrics)) return;
    this.timer = this.options.clock.setTimer(() => {
      this.timer = undefined;
      void this.scrapeAll().finally(() => this.arm());
    }, this.options.settings.scrapeIntervalMs);
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.options.clock.clearTimer(this.timer);
    this.timer = undefined;
  }

  /** One round: every healthy worker whose engine exports signals, at once. */
  async scrapeAll(): Promise<void> {
    const due = this.options.workers.filter((w) => w.healthy && w.scrapesMetrics);
    const moved = await Promise.all(
      due.map(async (w) => {
        const ownBefore = ownNow(w);
        return this.apply(w, await this.fetchMetrics(w), ownBefore);
      }),
    );
    if (!this.closed && moved.some(Boolean)) this.options.changed();
  }

  private settle(worker: Worker, engine: Worker["engine"], scrapes: boolean, how: string): void {
    const before = worker.engine;
    worker.engine = engine;
    worker.scrapesMetrics = scrapes;
    if (scrapes) this.arm();
    if (before !== engine) {
      this.options.logger.info(
        { worker: worker.url, engine, setting: worker.engineSetting, how, load_signals: scrapes },
        `worker engine: ${engine}`,
      );
    }
  }

  /** Applies one answer; returns true when the worker's capacity or foreign load moved. */
  private apply(worker: Worker, answer: MetricsAnswer, ownBefore: OwnNow): boolean {
    if (answer.kind !== "samples") {
      this.problem(worker, `/metrics: ${answer.problem}`);
      return false;
    }
    const capacityBefore = worker.capacity;
    const foreignBefore = worker.engineLoad.foreign;
    try {
      const reading =
        worker.engine === "vllm" ? readVllm(answer.samples) : readSglang(answer.samples, worker.sglangInfo);
      const after = ownNow(worker);
      worker.engineLoad.record(
        reading,
        this.options.clock.now(),
        {
          requestsBefore: ownBefore.requests,
          requestsAfter: after.requests,
          promptTokensBefore: ownBefore.promptTokens,
          promptTokensAfter: after.promptTokens,
        },
        this.live && this.options.countForeignLoad !== false,
      );
      if (worker.engine === "vllm") {
        const max = reading.maxRunning;
        worker.reportedCapacity = max !== undefined && max <= MAX_BELIEVED_RUNNING ? max : undefined;
      }
      worker.kvCapacityTokens = reading.kvCapacityTokens;
    } catch (err) {
      if (!(err instanceof EngineSignalError)) throw err;
      this.problem(worker, `/metrics: ${err.message}`);
      return false;
    }
    if (worker.engineProblem !== undefined) {
      this.options.logger.info({ worker: worker.url, engine: worker.engine }, "worker engine signals back");
      worker.engineProblem = undefined;
    }
    return worker.capacity !== capacityBefore || worker.engineLoad.foreign !== foreignBefore;
  }

  /** Logs a problem once (WARN) until it changes or the signals come back; the last reading stays. */
  private problem(worker: Worker, problem: string): void {
    worker.engineLoad.failures++;
    if (worker.engineProblem === problem) return;
    worker.engineProblem = problem;
    this.options.logger.warn(
      { worker: worker.url, engine: worker.engine, problem, capacity: worker.capacity },
      `worker engine signals unusable (${problem}); capacity stays ${worker.capacity}`,
    );
  }

  private async fetchMetrics(worker: Worker): Promise<MetricsAnswer> {
    let status: number;
    let body: string;
    try {
      ({ status, body } = await this.options.get(worker, "/metrics", this.options.settings.scrapeTimeoutMs));
    } catch (err) {
      const timedOut = (err as Error).name === "TimeoutError" || (err as Error).name === "AbortError";
      return { kind: "failed", problem: timedOut ? "timed out" : (err as Error).message };
    }
    if (status === 404) return { kind: "absent", problem: "answered 404 (not exported)" };
    if (status !== 200) return { kind: "failed", problem: `answered ${status}` };
    try {
      return { kind: "samples", samples: parsePrometheusText(body) };
    } catch (err) {
      return { kind: "failed", problem: `not Prometheus text (${(err as Error).message})` };
    }
  }
}
