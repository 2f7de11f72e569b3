/** The contract's Metrics table (seeds/smg-priority-scheduler-reference.txt): name, type, label names. */
export const CONTRACT_METRICS: ReadonlyArray<[string, "COUNTER" | "HISTOGRAM" | "GAUGE", string[]]> = [
  ["smg_scheduler_admit_total", "COUNTER", ["class", "outcome"]],
  ["smg_scheduler_queue_wait_seconds", "HISTOGRAM", ["class"]],
  ["smg_scheduler_preemption_total", "COUNTER", ["victim_class", "by_class"]],
  ["smg_scheduler_clamp_total", "COUNTER", ["tenant", "requested_class", "effective_class"]],
  ["smg_scheduler_unknown_priority_value_total", "COUNTER", ["tenant"]],
  ["smg_scheduler_starvation_promotion_total", "COUNTER", ["class"]],
  ["smg_scheduler_inflight", "GAUGE", ["class"]],
  ["smg_scheduler_queue_depth", "GAUGE", ["class"]],
  ["smg_scheduler_queue_size_limit", "GAUGE", ["class"]],
  ["smg_scheduler_utilization", "GAUGE", []],
  ["smg_scheduler_class_capacity_pressure", "GAUGE", ["class"]],
];
