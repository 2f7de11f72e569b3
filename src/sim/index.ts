/**
 * The discrete-event simulator: the real scheduler on virtual time against simulated workers.
 * `simulate(scenario)` runs every policy the scenario lists, one after the other, on the same
 * arrivals (same seed), and builds the report.
 */
import { buildReport, type Report } from "./report.js";
import { type AttemptRow, type RunOptions, type RunResult, runPolicy } from "./run.js";
import type { PolicyName, Scenario } from "./scenario.js";

export { WORKER_PROFILES } from "./profiles.js";
export type { Report } from "./report.js";
export type { PolicyName, Scenario, ScenarioOverrides } from "./scenario.js";
export { loadScenario, resolveScenario } from "./scenario.js";

interface SimulateOptions extends RunOptions {
  /** Called once per policy run with the number of events it processed. */
  onRunDone?: ((policy: PolicyName, info: { events: number }) => void) | undefined;
  /** With `attempts`: each policy's rows, once its run is done (the report does not keep them). */
  onAttempts?: ((policy: PolicyName, rows: AttemptRow[]) => void) | undefined;
}

export async function simulate(scenario: Scenario, options: SimulateOptions = {}): Promise<Report> {
  const runs: RunResult[] = [];
  for (const policy of scenario.policies) {
    const run = await runPolicy(scenario, policy, options);
    options.onRunDone?.(policy, { events: run.events });
    if (run.attempts !== undefined) {
      options.onAttempts?.(policy, run.attempts);
      run.attempts = undefined;
    }
    runs.push(run);
  }
  return buildReport(scenario, runs);
}
