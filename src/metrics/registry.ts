/**
 * The prom-client registry: the contract's `smg_scheduler_*` metrics (exact names, types and labels of the
 * reference's Metrics table) plus the gateway's own `sluice_*` metrics.
 *
 * - Counters and the queue-wait histogram are driven by `observer`, the scheduler's SchedulerObserver.
 * - Gauges are computed at scrape time from callbacks (`bindScheduler`, `bindCapacity`, ...), so they
 *   always show the live state and nothing has to push updates. Unbound gauges report 0.
 * - Every class x outcome series (and each class of the other class-labelled series) is initialised to
 *   0, so the series exist from the first scrape and rate() sees their first increment.
 * - Tenant-labelled series go through a TenantLabeler: at most N tenants (default 32) keep their label,
 *   the rest share `other`; a tenant that drops out of the top N has its series removed.
 * - Each SluiceMetrics has its own Registry (never prom-client's global one), so several can coexist.
 */

import { CLASS_RANK, PRIORITY_CLASSES, type PriorityClass } from "@sluice/scheduler/core/class.js";
import {
  ADMISSION_OUTCOMES,
  type SchedulerObserver,
  type SchedulerSnapshot,
} from "@sluice/scheduler/core/events.js";
import {
  type CollectFunction,
  Counter,
  collectDefaultMetrics,
  Gauge,
  Histogram,
  type PrometheusContentType,
  Registry,
} from "prom-client";
import { FALLBACK_CODES, type FallbackCode } from "../contracts/scheduler-fallback.js";
import { DEFAULT_TENANT_METRIC_TOP_N, TenantLabeler } from "./tenant-labels.js";

/** Queue-wait buckets in seconds: 1 ms to 300 s, with every built-in class timeout (5, 30, 60, 120, 300). */
export const QUEUE_WAIT_BUCKETS: readonly number[] = Object.freeze([
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300,
]);

const UPSTREAM_ERROR_KINDS = [
  "connect",
  "reset",
  "timeout",
  "bad_response",
  "refused_arguments",
  "status_5xx",
] as const;
export type UpstreamErrorKind = (typeof UPSTREAM_ERROR_KINDS)[number];

const ADMISSION_MODES = ["scheduler", "legacy"] as const;
export type AdmissionMode = (typeof ADMISSION_MODES)[number];

/** The contract's metric names (reference, section Metrics). */
export const SCHEDULER_METRIC_NAMES = {
  admit: "smg_scheduler_admit_total",
  queueWait: "smg_scheduler_queue_wait_seconds",
  preemption: "smg_scheduler_preemption_total",
  clamp: "smg_scheduler_clamp_total",
  unknownPriority: "smg_scheduler_unknown_priority_value_total",
  starvationPromotion: "smg_scheduler_starvation_promotion_total",
  inflight: "smg_scheduler_inflight",
  queueDepth: "smg_scheduler_queue_depth",
  queueSizeLimit: "smg_scheduler_queue_size_limit",
  utilization: "smg_scheduler_utilization",
  classCapacityPressure: "smg_scheduler_class_capacity_pressure",
} as const;

export const GATEWAY_METRIC_NAMES = {
  httpRequests: "sluice_http_requests_total",
  upstreamErrors: "sluice_upstream_errors_total",
  preemptedPrefillTokens: "sluice_preempted_prefill_tokens_total",
  capacity: "sluice_capacity",
  admissionMode: "sluice_admission_mode",
  schedulerFallback: "sluice_scheduler_fallback",
  workersHealthy: "sluice_workers_healthy",
  tenantTokens: "sluice_tenant_tokens_total",
  budgetRejections: "sluice_budget_rejections_total",
  budgetRemaining: "sluice_budget_remaining",
} as const;

interface MetricsOptions {
  /** Tenants that keep their own label on tenant-labelled metrics (default 32; 0: all `other`). */
  tenantMetricTopN?: number;
  /** Registry to register into (default: a new one). Never defaults to prom-client's global registry. */
  registry?: Registry;
  /** Also export prom-client's default process/Node metrics into this registry (default true). */
  collectProcessMetrics?: boolean;
}

export interface SluiceMetrics {
  readonly registry: Registry;
  /** Content-Type of `metricsText()` (Prometheus text format 0.0.4). */
  readonly contentType: PrometheusContentType;
  /** Pass to `createScheduler({ observer })`: drives the scheduler counters and the queue-wait histogram. */
  readonly observer: SchedulerObserver;
  /** The top-N tenant labeler behind `tenantLabel`; `record` counts traffic the scheduler does not see. */
  readonly tenants: TenantLabeler;
  /** The label to use for `tenant` on a tenant-labelled metric: itself while in the top N, else `other`. */
  tenantLabel(tenant: string): string;
  /** Computes the scheduler gauges from this snapshot at scrape time (undefined: report 0). */
  bindScheduler(getSnapshot: (() => SchedulerSnapshot | undefined) | undefined): void;
  /** Live capacity for `sluice_capacity`. */
  bindCapacity(getCapacity: (() => number) | undefined): void;
  /** Active admission path for `sluice_admission_mode`. */
  bindAdmissionMode(getMode: (() => AdmissionMode) | undefined): void;
  /** Why the enabled scheduler fell back to legacy admission, for `sluice_scheduler_fallback`. */
  bindSchedulerFallback(getCode: (() => FallbackCode | undefined) | undefined): void;
  /** Healthy worker count for `sluice_workers_healthy`. */
  bindWorkersHealthy(getHealthy: (() => number) | undefined): void;
  /** The registry in Prometheus text format. */
  metricsText(): Promise<string>;
  /** `sluice_http_requests_total{status}`: responses sent by the gateway. */
  readonly httpRequests: Counter<"status">;
  /** Counts one request's outcome status in `sluice_http_requests_total` (label children cached). */
  countHttpStatus(status: number): void;
  /** `sluice_upstream_errors_total{kind}`, kind one of UPSTREAM_ERROR_KINDS. */
  readonly upstreamErrors: Counter<"kind">;
  /**
   * `sluice_preempted_prefill_tokens_total{class}`: the prompt tokens of requests preempted after
   * they reached a worker, by the victim's class (what the worker's prefill may have computed).
   */
  readonly preemptedPrefillTokens: Counter<"class">;
  /** Counts settled tokens (`direction` input|output) under the tenant's top-N label. */
  countTenantTokens(tenant: string, input: number, output: number): void;
  /** Counts a budget rejection (`reason` = its error code) under the tenant's top-N label. */
  countBudgetRejection(tenant: string, reason: string): void;
  /** What is left of each tenant's budgets, read at scrape time (`budget` = the policy key). */
  bindBudgetRemaining(getRemaining: (() => Iterable<[string, Record<string, number>]>) | undefined): void;
}

/** Ordered pairs (victim, by) with victim strictly below by: the only preemptions that can happen. */
function preemptionPairs(): Array<[PriorityClass, PriorityClass]> {
  const pairs: Array<[PriorityClass, PriorityClass]> = [];
  for (const victim of PRIORITY_CLASSES) {
    for (const by of PRIORITY_CLASSES) if (CLASS_RANK[victim] < CLASS_RANK[by]) pairs.push([victim, by]);
  }
  return pairs;
}

/** Builds the metrics registry. Throws RangeError for an invalid `tenantMetricTopN`. */
export function createMetrics(options: MetricsOptions = {}): SluiceMetrics {
  const registry = options.registry ?? new Registry();
  const registers = [registry];
  const tenants = new TenantLabeler({ topN: options.tenantMetricTopN ?? DEFAULT_TENANT_METRIC_TOP_N });

  let getSnapshot: (() => SchedulerSnapshot | undefined) | undefined;
  let getCapacity: (() => number) | undefined;
  let getMode: (() => AdmissionMode) | undefined;
  let getHealthy: (() => number) | undefined;
  let getFallback: (() => FallbackCode | undefined) | undefined;
  let getRemaining: (() => Iterable<[string, Record<string, number>]>) | undefined;

  // --- scheduler counters and histogram ------------------------------------------------------

  const admit = new Counter({
    name: SCHEDULER_METRIC_NAMES.admit,
    help: "Admission outcomes by effective class.",
    labelNames: ["class", "outcome"] as const,
    registers,
  });
  const queueWait = new Histogram({
    name: SCHEDULER_METRIC_NAMES.queueWait,
    help: "Time spent queued before admission, timeout or cancel (0 when admitted at once).",
    labelNames: ["class"] as const,
    buckets: [...QUEUE_WAIT_BUCKETS],
    registers,
  });
  const preemption = new Counter({
    name: SCHEDULER_METRIC_NAMES.preemption,
    help: "Successful preemptions, by the preempted request's class and the preempting request's class.",
    labelNames: ["victim_class", "by_class"] as const,
    registers,
  });
  const clampTotal = new Counter({
    name: SCHEDULER_METRIC_NAMES.clamp,
    help: "Requests clamped below their requested class (tenant: the top N tenants, else other).",
    labelNames: ["tenant", "requested_class", "effective_class"] as const,
    registers,
  });
  const unknownPriority = new Counter({
    name: SCHEDULER_METRIC_NAMES.unknownPriority,
    help: "Requests with an unrecognized x-smg-priority value (tenant: the top N tenants, else other).",
    labelNames: ["tenant"] as const,
    registers,
  });
  const starvation = new Counter({
    name: SCHEDULER_METRIC_NAMES.starvationPromotion,
    help: "Waiters admitted via the starvation override.",
    labelNames: ["class"] as const,
    registers,
  });

  for (const cls of PRIORITY_CLASSES) {
    for (const outcome of ADMISSION_OUTCOMES) admit.inc({ class: cls, outcome }, 0);
    queueWait.zero({ class: cls });
    starvation.inc({ class: cls }, 0);
  }
  for (const [victim, by] of preemptionPairs()) preemption.inc({ victim_class: victim, by_class: by }, 0);

  // A tenant that loses its label loses its series: the exported tenant cardinality stays <= N + 1.
  tenants.onDemote((tenant) => {
    unknownPriority.remove({ tenant });
    for (const requested of PRIORITY_CLASSES) {
      for (const effective of PRIORITY_CLASSES) {
        if (CLASS_RANK[effective] < CLASS_RANK[requested]) {
          clampTotal.remove({ tenant, requested_class: requested, effective_class: effective });
        }
      }
    }
  });

  // Label children resolved once: a labelled inc() hashes its labels on every call, and these two
  // run for every request.
  const admitChild = new Map<string, Map<string, { inc(): void }>>();
  const waitChild = new Map<string, { observe(v: number): void }>();
  for (const cls of PRIORITY_CLASSES) {
    admitChild.set(
      cls,
      new Map(ADMISSION_OUTCOMES.map((outcome) => [outcome, admit.labels({ class: cls, outcome })])),
    );
    waitChild.set(cls, queueWait.labels({ class: cls }));
  }

  const observer: SchedulerObserver = {
    admission(cls, outcome, tenant) {
      admitChild.get(cls)!.get(outcome)!.inc();
      // One traffic unit per request: `preempted` is a second outcome of an already admitted request.
      if (outcome !== "preempted") tenants.record(tenant);
    },
    queueWait(cls, seconds) {
      waitChild.get(cls)!.observe(seconds);
    },
    preemption(victimClass, byClass) {
      preemption.inc({ victim_class: victimClass, by_class: byClass });
    },
    clamp(tenant, requested, effective) {
      clampTotal.inc({
        tenant: tenants.label(tenant),
        requested_class: requested,
        effective_class: effective,
      });
    },
    unknownPriority(tenant) {
      unknownPriority.inc({ tenant: tenants.label(tenant) });
    },
    starvationPromotion(cls) {
      starvation.inc({ class: cls });
    },
  };

  // --- scheduler gauges (computed at scrape time) --------------------------------------------

  type ClassGaugeField = "inflight" | "queued" | "queueLimit" | "capacityPressure";
  const classGauge = (name: string, help: string, field: ClassGaugeField): Gauge<"class"> => {
    const collect: CollectFunction<Gauge<"class">> = function () {
      const snapshot = getSnapshot?.();
      for (const cls of PRIORITY_CLASSES) this.set({ class: cls }, snapshot?.classes[cls][field] ?? 0);
    };
    return new Gauge({ name, help, labelNames: ["class"] as const, registers, collect });
  };
  classGauge(SCHEDULER_METRIC_NAMES.inflight, "Current in-flight requests per class.", "inflight");
  classGauge(SCHEDULER_METRIC_NAMES.queueDepth, "Current queued waiters per class.", "queued");
  classGauge(SCHEDULER_METRIC_NAMES.queueSizeLimit, "Configured queue limit per class.", "queueLimit");
  classGauge(
    SCHEDULER_METRIC_NAMES.classCapacityPressure,
    "Normalized 0-1 pressure per class: the worse of queue pressure and slot pressure.",
    "capacityPressure",
  );
  new Gauge({
    name: SCHEDULER_METRIC_NAMES.utilization,
    help: "Total in-flight requests divided by backend capacity.",
    registers,
    collect() {
      this.set(getSnapshot?.()?.utilization ?? 0);
    },
  });

  // --- gateway metrics -----------------------------------------------------------------------

  const httpRequests = new Counter({
    name: GATEWAY_METRIC_NAMES.httpRequests,
    help: "HTTP responses sent by the gateway, by status code.",
    labelNames: ["status"] as const,
    registers,
  });
  const upstreamErrors = new Counter({
    name: GATEWAY_METRIC_NAMES.upstreamErrors,
    help: "Failed upstream (worker) requests by kind: connect, reset, timeout, bad_response, refused_arguments, status_5xx.",
    labelNames: ["kind"] as const,
    registers,
  });
  for (const kind of UPSTREAM_ERROR_KINDS) upstreamErrors.inc({ kind }, 0);
  const preemptedPrefillTokens = new Counter({
    name: GATEWAY_METRIC_NAMES.preemptedPrefillTokens,
    help: "Prompt tokens of requests preempted after they reached a worker (prefill the worker may have computed and threw away), by the preempted request's class.",
    labelNames: ["class"] as const,
    registers,
  });
  for (const cls of PRIORITY_CLASSES) preemptedPrefillTokens.inc({ class: cls }, 0);
  new Gauge({
    name: GATEWAY_METRIC_NAMES.capacity,
    help: "Live backend capacity (concurrent requests) used for admission.",
    registers,
    collect() {
      this.set(getCapacity?.() ?? 0);
    },
  });
  new Gauge({
    name: GATEWAY_METRIC_NAMES.admissionMode,
    help: "Active admission path: 1 for the current mode (scheduler or legacy), 0 for the other.",
    labelNames: ["mode"] as const,
    registers,
    collect() {
      const mode = getMode?.();
      for (const m of ADMISSION_MODES) this.set({ mode: m }, m === mode ? 1 : 0);
    },
  });
  new Gauge({
    name: GATEWAY_METRIC_NAMES.schedulerFallback,
    help: "The enabled priority scheduler fell back to legacy admission: 1 for the active reason (config_missing, config_invalid, reservations_exceed_capacity), 0 for the others.",
    labelNames: ["reason"] as const,
    registers,
    collect() {
      const code = getFallback?.();
      for (const r of FALLBACK_CODES) this.set({ reason: r }, r === code ? 1 : 0);
    },
  });
  new Gauge({
    name: GATEWAY_METRIC_NAMES.workersHealthy,
    help: "Workers currently passing health checks.",
    registers,
    collect() {
      this.set(getHealthy?.() ?? 0);
    },
  });

  // --- tenant accounting ---------------------------------------------------------------------

  const tenantTokens = new Counter({
    name: GATEWAY_METRIC_NAMES.tenantTokens,
    help: "Tokens used by tenant as settled from worker usage (estimate when none came), by direction.",
    labelNames: ["tenant", "direction"] as const,
    registers,
  });
  const budgetRejections = new Counter({
    name: GATEWAY_METRIC_NAMES.budgetRejections,
    help: "Requests rejected by a tenant limit, by reason (tenant_inactive, model_not_allowed, ...).",
    labelNames: ["tenant", "reason"] as const,
    registers,
  });
  new Gauge({
    name: GATEWAY_METRIC_NAMES.budgetRemaining,
    help: "What is left of each tenant budget in the current period (tokens_per_minute, budget_tokens, budget_cost_usd).",
    labelNames: ["tenant", "budget"] as const,
    registers,
    collect() {
      this.reset();
      if (getRemaining === undefined) return;
      // Tenants outside the top N are summed under `other`.
      const sums = new Map<string, number>();
      for (const [tenant, budgets] of getRemaining()) {
        const label = tenants.label(tenant);
        for (const [budget, value] of Object.entries(budgets)) {
          const key = `${label}\u0000${budget}`;
          sums.set(key, (sums.get(key) ?? 0) + value);
        }
      }
      for (const [key, value] of sums) {
        const [tenant, budget] = key.split("\u0000") as [string, string];
        this.set({ tenant, budget }, value);
      }
    },
  });
  // Label children per tenant label, so counting a request's tokens builds no label set.
  const tokenChildren = new Map<
    string,
    { input: { inc(n: number): void }; output: { inc(n: number): void } }
  >();
  tenants.onDemote((tenant) => {
    tokenChildren.delete(tenant);
    tenantTokens.remove({ tenant, direction: "input" });
    tenantTokens.remove({ tenant, direction: "output" });
    for (const reason of [
      "tenant_inactive",
      "model_not_allowed",
      "tenant_budget_exhausted",
      "token_budget_exceeded",
      "request_rate_exceeded",
    ]) {
      budgetRejections.remove({ tenant, reason });
    }
  });

  if (options.collectProcessMetrics ?? true) collectDefaultMetrics({ register: registry });
  // Label children by status, so counting a request builds no label set.
  const statusChildren = new Map<number, { inc(): void }>();

  return {
    registry,
    contentType: registry.contentType,
    observer,
    tenants,
    tenantLabel: (tenant) => tenants.label(tenant),
    bindScheduler(fn) {
      getSnapshot = fn;
    },
    bindCapacity(fn) {
      getCapacity = fn;
    },
    bindAdmissionMode(fn) {
      getMode = fn;
    },
    bindSchedulerFallback(fn) {
      getFallback = fn;
    },
    bindWorkersHealthy(fn) {
      getHealthy = fn;
    },
    metricsText: () => registry.metrics(),
    httpRequests,
    countHttpStatus(status) {
      let child = statusChildren.get(status);
      if (child === undefined) {
        child = httpRequests.labels(String(status));
        statusChildren.set(status, child);
      }
      child.inc();
    },
    upstreamErrors,
    preemptedPrefillTokens,
    countTenantTokens(tenant, input, output) {
      const label = tenants.label(tenant);
      let children = tokenChildren.get(label);
      if (children === undefined) {
        children = {
          input: tenantTokens.labels(label, "input"),
          output: tenantTokens.labels(label, "output"),
        };
        tokenChildren.set(label, children);
      }
      if (input > 0) children.input.inc(input);
      if (output > 0) children.output.inc(output);
    },
    countBudgetRejection(tenant, reason) {
      tenants.record(tenant);
      budgetRejections.inc({ tenant: tenants.label(tenant), reason });
    },
    bindBudgetRemaining(fn) {
      getRemaining = fn;
    },
  };
}
