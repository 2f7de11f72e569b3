/**
 * Per worker series of its engine's last reading (docs/capacity.md), read at scrape time. Labels
 * `worker` (its URL) and `pool` (its model pool, "" while in none); a worker with no reading (an
 * OpenAI-compatible server, SGLang without --enable-metrics) has no series.
 */
import { Gauge, type Registry } from "prom-client";
import type { WorkerPool } from "./fleet/workers.js";

export const ENGINE_METRIC_NAMES = {
  running: "sluice_worker_engine_running",
  waiting: "sluice_worker_engine_waiting",
  foreign: "sluice_worker_engine_foreign_requests",
  kvUtilization: "sluice_worker_kv_utilization",
  kvEstimated: "sluice_worker_kv_utilization_estimated",
  kvCapacity: "sluice_worker_kv_capacity_tokens",
  kvFootprint: "sluice_worker_kv_footprint_tokens",
  kvBudget: "sluice_worker_kv_budget_tokens",
  scrapeAge: "sluice_worker_scrape_age_seconds",
} as const;

export function registerEngineMetrics(registry: Registry, workers: WorkerPool, now: () => number): void {
  const registers = [registry];
  type Worker = WorkerPool["workers"][number];
  /** One gauge per worker that `shown` admits, labelled by worker and pool; an undefined value is left out. */
  const workerGauge = (
    name: string,
    help: string,
    shown: (w: Worker) => boolean,
    read: (w: Worker) => number | undefined,
  ) =>
    new Gauge({
      name,
      help,
      labelNames: ["worker", "pool"],
      registers,
      collect() {
        this.reset();
        for (const w of workers.workers) {
          if (!shown(w)) continue;
          const value = read(w);
          if (value !== undefined) this.set({ worker: w.url, pool: w.group?.name ?? "" }, value);
        }
      },
    });
  // Engine signals: every worker whose engine has been read.
  const perWorker = (name: string, help: string, read: (w: Worker) => number | undefined) =>
    workerGauge(name, help, (w) => w.engineLoad.latest !== undefined, read);
  const M = ENGINE_METRIC_NAMES;
  perWorker(
    M.running,
    "Requests the worker's engine runs, at its last scrape.",
    (w) => w.engineLoad.latest?.reading.running,
  );
  perWorker(
    M.waiting,
    "Requests queued inside the worker's engine, at its last scrape.",
    (w) => w.engineLoad.latest?.reading.waiting,
  );
  perWorker(
    M.foreign,
    "Requests other clients held at the worker's engine at its last scrape (they narrow this gateway's room).",
    (w) => w.engineLoad.foreign,
  );
  perWorker(
    M.kvUtilization,
    "KV cache in use at the worker's engine, 0..1, at its last scrape.",
    (w) => w.engineLoad.latest?.reading.kvUtilization,
  );
  perWorker(
    M.kvEstimated,
    "KV cache in use at the worker's engine now, 0..1: its last scrape carried by this gateway's own prompts since.",
    (w) => w.engineLoad.estimatedKvUtilization(w.promptTokensInFlight),
  );
  perWorker(
    M.kvCapacity,
    "KV cache capacity in tokens the worker's engine reports.",
    (w) => w.kvCapacityTokens,
  );
  // Capacity in KV tokens: every worker whose room counts KV tokens, reading or not.
  const perKvWorker = (name: string, help: string, read: (w: Worker) => number) =>
    workerGauge(name, help, (w) => w.budgetTokens !== undefined, read);
  perKvWorker(
    M.kvFootprint,
    "KV footprint (prompt + predicted output) of this gateway's requests on the worker, tokens (capacity_unit kv_tokens).",
    (w) => w.footprintTokens,
  );
  perKvWorker(
    M.kvBudget,
    "The worker's KV token budget: KV capacity x kv_target_utilization (capacity_unit kv_tokens).",
    (w) => w.budgetTokens ?? 0,
  );
  perWorker(M.scrapeAge, "Seconds since the worker's engine signals were last read.", (w) =>
    w.engineLoad.ageSeconds(now()),
  );
}
