/**
 * The Gateway API Inference Extension's flow-control series (docs/kubernetes.md), so dashboards
 * and autoscalers written for its endpoint picker (a KEDA ScaledObject summing the queue per
 * InferencePool, say) read sluice unchanged, beside the `smg_scheduler_*` series:
 *
 * - `inference_extension_flow_control_queue_size` (gauge): requests in admission now, from the
 *   moment they ask for a slot until they get one or leave;
 * - `inference_extension_flow_control_request_queue_duration_seconds` (histogram): how long that
 *   took, by outcome.
 *
 * Labels as the extension's: `fairness_id` (the tenant, top N else `other`), `priority` (sluice's
 * class, the request's effective one: sluice queues by class, not by integer), `inference_pool`
 * (the model pool's name), `model_name` and `target_model_name` (the request's model when its pool
 * lists it, else the pool's name: bounded by the pools), and `outcome` in the extension's words.
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { TenantLabeler } from "./tenant-labels.js";

export const FLOW_CONTROL_METRIC_NAMES = {
  queueSize: "inference_extension_flow_control_queue_size",
  queueDuration: "inference_extension_flow_control_request_queue_duration_seconds",
  unknownObjectives: "sluice_inference_objective_unknown_total",
} as const;

/** The extension's bucket bounds for the queue duration, in seconds. */
const QUEUE_DURATION_BUCKETS = [
  0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

/** How a request left admission, in the extension's outcome names. */
export type FlowControlOutcome =
  | "Dispatched"
  | "RejectedCapacity"
  | "RejectedOther"
  | "EvictedTTL"
  | "EvictedContextCancelled"
  | "EvictedOther";

/** Where a request queues: what the labels say besides its tenant. */
export interface FlowControlPlace {
  readonly tenant: string;
  readonly priority: string;
  readonly pool: string;
  readonly model: string;
}

/** One request in admission; `leave` once. */
export interface FlowControlEntry {
  leave(outcome: FlowControlOutcome, seconds: number): void;
}

export interface FlowControlMetrics {
  /** A request starts asking for a slot. */
  enter(place: FlowControlPlace): FlowControlEntry;
  /** `sluice_inference_objective_unknown_total`: a trusted objective name not in `inference_objectives`. */
  readonly unknownObjectives: Pick<Counter, "inc">;
}

const LABELS = ["fairness_id", "priority", "inference_pool", "model_name", "target_model_name"] as const;

/** The extension's labels of a place (sluice has no target model apart from the one asked for). */
function placeLabels(fairness: string, place: FlowControlPlace): Record<(typeof LABELS)[number], string> {
  return {
    fairness_id: fairness,
    priority: place.priority,
    inference_pool: place.pool,
    model_name: place.model,
    target_model_name: place.model,
  };
}

/** A label set of the duration histogram seen so far, with its child. */
interface ObservedSet {
  readonly labels: Record<string, string>;
  readonly child: { observe(seconds: number): void };
}

export function registerFlowControlMetrics(registry: Registry, tenants: TenantLabeler): FlowControlMetrics {
  const registers = [registry];
  // Requests in admission per label set, read at scrape time; a set at 0 is dropped, so the series
  // are bounded by what waits now.
  const waiting = new Map<string, { labels: Record<(typeof LABELS)[number], string>; count: number }>();
  new Gauge({
    name: FLOW_CONTROL_METRIC_NAMES.queueSize,
    help:
      "Requests in sluice's admission now (asking for a slot, not yet admitted or refused), by " +
      "fairness_id (tenant), priority (class) and inference_pool, as the inference extension's flow control reports it.",
    labelNames: LABELS,
    registers,
    collect() {
      this.reset();
      for (const { labels, count } of waiting.values()) this.set(labels, count);
    },
  });
  const duration = new Histogram({
    name: FLOW_CONTROL_METRIC_NAMES.queueDuration,
    help:
      "Time requests spent in sluice's admission until admitted (Dispatched) or refused, by " +
      "fairness_id (tenant), priority (class), outcome and inference_pool, as the inference extension's flow control reports it.",
    labelNames: ["fairness_id", "priority", "outcome", "inference_pool", "model_name", "target_model_name"],
    buckets: QUEUE_DURATION_BUCKETS,
    registers,
  });
  const unknown = new Counter({
    name: FLOW_CONTROL_METRIC_NAMES.unknownObjectives,
    help:
      "Requests whose trusted x-gateway-inference-objective named an objective missing from " +
      "inference_objectives (given priority 0, as the inference extension does).",
    registers,
  });
  // The label sets observed per tenant label, so a demoted tenant's series go, as the
  // tenant-labelled counters' do (prom-client removes a series by its full label set only). Each
  // set keeps its histogram child: a request's leave builds no label object once its set is known.
  const observed = new Map<string, Map<string, ObservedSet>>();
  tenants.onDemote((tenant) => {
    for (const set of observed.get(tenant)?.values() ?? []) duration.remove(set.labels);
    observed.delete(tenant);
  });

  /** The histogram child of a label set, recorded under its tenant label on first use. */
  const observer = (place: FlowControlPlace, outcome: FlowControlOutcome): ObservedSet["child"] => {
    const fairness = tenants.label(place.tenant);
    let sets = observed.get(fairness);
    if (sets === undefined) {
      sets = new Map();
      observed.set(fairness, sets);
    }
    const setKey = `${place.priority}\u0000${outcome}\u0000${place.pool}\u0000${place.model}`;
    let set = sets.get(setKey);
    if (set === undefined) {
      const labels = { ...placeLabels(fairness, place), outcome };
      set = { labels, child: duration.labels(labels) };
      sets.set(setKey, set);
    }
    return set.child;
  };

  return {
    enter(place) {
      const fairness = tenants.label(place.tenant);
      const key = `${fairness}\u0000${place.priority}\u0000${place.pool}\u0000${place.model}`;
      const entry = waiting.get(key);
      if (entry === undefined) waiting.set(key, { labels: placeLabels(fairness, place), count: 1 });
      else entry.count += 1;
      let left = false;
      return {
        leave(outcome, seconds) {
          if (left) return;
          left = true;
          const now = waiting.get(key);
          if (now !== undefined && --now.count <= 0) waiting.delete(key);
          observer(place, outcome).observe(seconds);
        },
      };
    },
    unknownObjectives: unknown,
  };
}
