/**
 * The gateway's one list of stop steps. Each part registers its step once, under its stage, as it
 * starts; `close()` and a start that fails half-way both run the same list. The steps run in the
 * stages' order, not in the order the parts started: the workers start first but must stop after
 * the listeners that feed them requests.
 */

/** The stages, in the order they stop. */
export const STOP_STAGES = [
  // The pools' adaptive controllers and shedding stop moving limits.
  "pools",
  // The dashboard's event streams end before the admin listener closes under them.
  "dashboard",
  "admin listener",
  // Cuts the connections still open: their requests settle and record their outcomes.
  "data-plane listener",
  // Health checks and upstream connections.
  "workers",
  // The requests the close cut short have recorded their outcomes by now: the ledger flushes them.
  "ledger",
  // After the releases of those requests went out.
  "shared state",
  // The spans of every request ended by now: the batch still held is exported.
  "tracing",
] as const;

type StopStage = (typeof STOP_STAGES)[number];

type StopStep = () => void | Promise<void>;

export class ShutdownList {
  private readonly steps = new Map<StopStage, StopStep>();
  private run: Promise<void> | undefined;

  /** Registers the step that stops `stage`; one step a stage. */
  add(stage: StopStage, step: StopStep): void {
    if (this.steps.has(stage)) throw new Error(`the stop step of "${stage}" is registered twice`);
    if (this.run !== undefined) throw new Error(`"${stage}" registered its stop step after the stop began`);
    this.steps.set(stage, step);
  }

  /**
   * Runs every registered step in stage order, once: a second call (a second signal during the
   * drain) waits for the same run. A step that fails does not keep the later ones from running;
   * the first failure is thrown once all have run.
   */
  stop(): Promise<void> {
    this.run ??= this.runSteps();
    return this.run;
  }

  private async runSteps(): Promise<void> {
    const failures: unknown[] = [];
    for (const stage of STOP_STAGES) {
      const step = this.steps.get(stage);
      if (step === undefined) continue;
      try {
        await step();
      } catch (err) {
        failures.push(err);
      }
    }
    if (failures.length > 0) throw failures[0];
  }
}
