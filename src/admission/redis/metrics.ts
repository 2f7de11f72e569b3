/**
 * The shared state's metrics (sluice_state_*), registered on the gateway's registry:
 *
 *   sluice_state_redis_up                  1 while this replica uses Redis, 0 while it is away
 *   sluice_state_local_fallback            1 while admission runs on this replica's local share (fail mode local)
 *   sluice_state_unavailable_total         outages seen (Redis became unreachable)
 *   sluice_state_round_trips_total{op}     script calls by kind (admit, release, cancel, heartbeat, ...)
 *   sluice_state_round_trip_seconds{op}    their latency
 *   sluice_state_replicas                  replicas alive when last seen
 *   sluice_state_leases                    leases this replica holds
 *   sluice_state_lost_leases_total         leases found reaped while their request ran (replica presumed dead)
 *   sluice_state_closed_rejections_total   requests answered 503 scheduler_unavailable (fail mode closed)
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

const STATE_OPS = [
  "admit",
  "release",
  "cancel",
  "transfer",
  "refuse",
  "heartbeat",
  "adopt",
  "pin",
  "budget",
] as const;
export type StateOp = (typeof STATE_OPS)[number];

interface StateMetricSources {
  up(): boolean;
  localFallback(): boolean;
  replicas(): number;
  leases(): number;
}

export class StateMetrics {
  private readonly trips: Record<string, Counter.Internal>;
  private readonly latency: Record<string, Histogram.Internal<"op">>;
  readonly unavailable: Counter;
  readonly lostLeases: Counter;
  readonly closedRejections: Counter;

  constructor(registry: Registry, sources: StateMetricSources) {
    const registers = [registry];
    new Gauge({
      name: "sluice_state_redis_up",
      help: "1 while this replica uses the shared state (Redis), 0 while it is unreachable.",
      registers,
      collect() {
        this.set(sources.up() ? 1 : 0);
      },
    });
    new Gauge({
      name: "sluice_state_local_fallback",
      help: "1 while admission runs on this replica's local share of capacity (Redis away, fail mode local).",
      registers,
      collect() {
        this.set(sources.localFallback() ? 1 : 0);
      },
    });
    new Gauge({
      name: "sluice_state_replicas",
      help: "Replicas alive in the fleet when last seen.",
      registers,
      collect() {
        this.set(sources.replicas());
      },
    });
    new Gauge({
      name: "sluice_state_leases",
      help: "Slot leases this replica holds in the shared state.",
      registers,
      collect() {
        this.set(sources.leases());
      },
    });
    this.unavailable = new Counter({
      name: "sluice_state_unavailable_total",
      help: "Times the shared state (Redis) became unreachable.",
      registers,
    });
    this.lostLeases = new Counter({
      name: "sluice_state_lost_leases_total",
      help: "Leases reaped while their request still ran (this replica was presumed dead).",
      registers,
    });
    this.closedRejections = new Counter({
      name: "sluice_state_closed_rejections_total",
      help: "Requests answered 503 scheduler_unavailable while Redis was away (fail mode closed).",
      registers,
    });
    const trips = new Counter({
      name: "sluice_state_round_trips_total",
      help: "Round trips to the shared state, by operation.",
      labelNames: ["op"] as const,
      registers,
    });
    const latency = new Histogram({
      name: "sluice_state_round_trip_seconds",
      help: "Latency of round trips to the shared state, by operation.",
      labelNames: ["op"] as const,
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1],
      registers,
    });
    this.trips = {};
    this.latency = {};
    for (const op of STATE_OPS) {
      this.trips[op] = trips.labels(op);
      this.latency[op] = latency.labels(op);
    }
  }

  roundTrip(op: StateOp, seconds: number): void {
    this.trips[op]!.inc();
    this.latency[op]!.observe(seconds);
  }
}
