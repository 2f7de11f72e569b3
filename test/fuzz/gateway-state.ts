/**
 * What the fuzz and soak suites read from a running gateway, through the narrowest surface that
 * serves: the admission state's snapshot and counters, and the worker pool's per-worker in-flight.
 * (The admission object has had two shapes: `admission.snapshot()` and `admission.scheduler.snapshot()`;
 * both are read, so the suites do not break when it moves again.)
 */
import type { SchedulerCounters } from "@sluice/scheduler/core/events.js";
import type { Gateway } from "../../src/gateway/server.js";

export interface AdmissionState {
  capacity: number;
  inflight: number;
  queued: number;
}

interface AdmissionShapes {
  snapshot?: () => AdmissionState;
  counters?: () => SchedulerCounters | undefined;
  scheduler?: { snapshot(): AdmissionState; counters(): SchedulerCounters };
}

export function admissionState(gateway: Gateway): AdmissionState {
  const a = gateway.admission as unknown as AdmissionShapes;
  const s = a.snapshot ? a.snapshot() : a.scheduler?.snapshot();
  if (s === undefined) throw new Error("the gateway's admission state is not readable");
  return { capacity: s.capacity, inflight: s.inflight, queued: s.queued };
}

export function schedulerCounters(gateway: Gateway): SchedulerCounters | undefined {
  const a = gateway.admission as unknown as AdmissionShapes;
  return a.counters ? a.counters() : a.scheduler?.counters();
}

/** Preemptions so far (all victim and preemptor classes). */
export function preemptions(gateway: Gateway): number {
  const counters = schedulerCounters(gateway);
  let n = 0;
  for (const byClass of Object.values(counters?.preemptions ?? {})) {
    for (const count of Object.values(byClass as Record<string, number>)) n += count;
  }
  return n;
}

/** Requests the gateway counts in flight at each worker of its pool. */
export function poolInflight(gateway: Gateway): number[] {
  const pool = gateway.workers as unknown as { workers?: Array<{ inflight?: number }> };
  return (pool.workers ?? []).map((w) => w.inflight ?? 0);
}
