/**
 * The mock inference worker: an OpenAI- and SGLang-compatible simulated server for tests,
 * benchmarks and the demo.
 */

export { runMockWorkerCli } from "./cli.js";
export type {
  CapacityCounters,
  MockWorker,
  MockWorkerOptions,
  MockWorkerStats,
  ReceivedRequest,
} from "./options.js";
export { startMockWorker } from "./server.js";
