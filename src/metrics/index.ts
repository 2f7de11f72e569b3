/** Prometheus metrics: the contract's smg_scheduler_* metrics, the gateway's sluice_* metrics, tenant top-N. */
export * from "./registry.js";
export * from "./tenant-labels.js";
