export * from "./class.js";
export * from "./clock.js";
export * from "./config.js";
export * from "./engine.js";
export * from "./errors.js";
export * from "./events.js";
export { type AdmissionKind, Permit } from "./inflight.js";
export * from "./legacy.js";
