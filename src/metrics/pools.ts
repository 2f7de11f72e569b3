/**
 * Per model pool series (docs/gateway.md, "Model pools"), read at scrape time. Each carries a
 * `model` label: the pool's name (its alphabetically first model, `*` for the catch-all pool), so
 * the label set is bounded by the pools that exist. `sluice_pool_served_model` maps every model a
 * pool serves to its pool. The contract's `smg_scheduler_*` series stay fleet totals.
 */

import { CLASSES_HIGH_TO_LOW } from "@sluice/scheduler/core/class.js";
import { Counter, Gauge, type Registry } from "prom-client";
import type { PoolView } from "../contracts/pool-view.js";

const POOL_METRIC_NAMES = {
  capacity: "sluice_pool_capacity",
  inflight: "sluice_pool_inflight",
  queued: "sluice_pool_queued",
  classInflight: "sluice_pool_class_inflight",
  classQueued: "sluice_pool_class_queued",
  workers: "sluice_pool_workers",
  healthyWorkers: "sluice_pool_healthy_workers",
  admissions: "sluice_pool_admissions_total",
  servedModel: "sluice_pool_served_model",
  roomWaiting: "sluice_pool_room_waiting",
  roomWaits: "sluice_pool_room_waits_total",
} as const;

/** How an admitted request's wait for a worker with room ended (`sluice_pool_room_waits_total`). */
const ROOM_WAIT_OUTCOMES = [
  ["dispatched", "dispatched"],
  ["timeout", "timeout"],
  ["cancelled", "cancelled"],
  ["no_worker", "noWorker"],
] as const;

/** At most this many served models per pool are listed in `sluice_pool_served_model`. */
const MAX_SERVED_MODEL_LABELS = 64;

export function registerPoolMetrics(registry: Registry, pools: () => readonly PoolView[]): void {
  const registers = [registry];
  const perPool = (name: string, help: string, read: (p: PoolView) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["model"],
      registers,
      collect() {
        this.reset();
        for (const p of pools()) this.set({ model: p.name }, read(p));
      },
    });
  perPool(POOL_METRIC_NAMES.capacity, "Capacity in force of each model pool.", (p) => p.capacity.capacity);
  // With the fleet-wide legacy limiter the admission counts are the fleet's: count the pool's workers.
  perPool(POOL_METRIC_NAMES.inflight, "Requests in flight in each model pool.", (p) =>
    p.sharedAdmission
      ? p.workers.members.reduce((n, w) => n + w.inflight, 0)
      : p.admission.snapshot().inflight,
  );
  perPool(
    POOL_METRIC_NAMES.queued,
    "Requests queued in each model pool (0 with fleet-wide legacy admission).",
    (p) => (p.sharedAdmission ? 0 : p.admission.snapshot().queued),
  );
  perPool(POOL_METRIC_NAMES.workers, "Workers in each model pool.", (p) => p.workers.members.length);
  perPool(
    POOL_METRIC_NAMES.roomWaiting,
    "Admitted requests waiting now for a worker of each model pool with room (every one full).",
    (p) => p.workers.roomWaits.now,
  );
  // Counted by the pool's worker group: it restarts from 0 if the pool re-forms.
  new Counter({
    name: POOL_METRIC_NAMES.roomWaits,
    help:
      "Admitted requests that waited for a worker with room in each model pool, by how the wait " +
      "ended: dispatched, timeout (503 worker_room_timeout), cancelled, no_worker (503 no_healthy_workers).",
    labelNames: ["model", "outcome"],
    registers,
    collect() {
      this.reset();
      for (const p of pools()) {
        for (const [outcome, key] of ROOM_WAIT_OUTCOMES) {
          this.inc({ model: p.name, outcome }, p.workers.roomWaits[key]);
        }
      }
    },
  });
  perPool(
    POOL_METRIC_NAMES.healthyWorkers,
    "Healthy workers in each model pool.",
    (p) => p.workers.healthy.length,
  );
  const perClass = (name: string, help: string, key: "inflight" | "queued") =>
    new Gauge({
      name,
      help,
      labelNames: ["model", "class"],
      registers,
      collect() {
        this.reset();
        for (const p of pools()) {
          if (p.sharedAdmission) continue;
          const classes = p.admission.snapshot().classes;
          if (classes === null) continue;
          for (const cls of CLASSES_HIGH_TO_LOW) this.set({ model: p.name, class: cls }, classes[cls][key]);
        }
      },
    });
  perClass(POOL_METRIC_NAMES.classInflight, "Requests in flight per class in each model pool.", "inflight");
  perClass(POOL_METRIC_NAMES.classQueued, "Requests queued per class in each model pool.", "queued");
  // Read from the pool's scheduler counters at scrape time: it restarts from 0 if the pool re-forms.
  new Counter({
    name: POOL_METRIC_NAMES.admissions,
    help: "Admission decisions per class and outcome in each model pool, since the pool formed.",
    labelNames: ["model", "class", "outcome"],
    registers,
    collect() {
      this.reset();
      for (const p of pools()) {
        const counters = p.sharedAdmission ? undefined : p.admission.counters();
        if (counters === undefined) continue;
        for (const cls of CLASSES_HIGH_TO_LOW) {
          for (const [outcome, n] of Object.entries(counters.admissions[cls])) {
            if (n > 0) this.inc({ model: p.name, class: cls, outcome }, n);
          }
        }
      }
    },
  });
  new Gauge({
    name: POOL_METRIC_NAMES.servedModel,
    help: "1 for each model a pool serves (model = the pool, served = the model).",
    labelNames: ["model", "served"],
    registers,
    collect() {
      this.reset();
      for (const p of pools()) {
        for (const served of p.models.slice(0, MAX_SERVED_MODEL_LABELS))
          this.set({ model: p.name, served }, 1);
      }
    },
  });
}
