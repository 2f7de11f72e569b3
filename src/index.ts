/** sluice: priority-aware admission control for LLM inference fleets. */
export * from "./core/index.js";
