/**
 * A model pool in a simulated run and the choice of a worker inside it (the scenario's `routing`).
 * As in the gateway (docs/gateway.md, "Model pools"), a request never leaves the pool of its model,
 * and goes only to a worker that serves that model: a worker serving a LoRA adapter and its base
 * model shares the pool (and its capacity) with one serving the base model only, but gets only the
 * requests it can answer.
 */
import type { Rng } from "./rng.js";
import type { Routing } from "./scenario.js";
import type { Worker } from "./worker.js";

/** The workers that serve one model, with the round-robin cursor over them. */
interface ModelRoute {
  readonly workers: Worker[];
  cursor: number;
}

export class SimPool {
  readonly workers: readonly Worker[];
  private readonly routes = new Map<string, ModelRoute>();

  constructor(
    /** Index into the scenario's pools (the request log's pool column). */
    readonly index: number,
    readonly name: string,
    readonly models: readonly string[],
    /** Its workers, in scenario order, each with the models it serves. */
    members: readonly { worker: Worker; models: readonly string[] }[],
    private readonly routing: Routing,
    private readonly rng: Rng,
  ) {
    this.workers = members.map((m) => m.worker);
    for (const model of models) {
      const workers = members.filter((m) => m.models.includes(model)).map((m) => m.worker);
      this.routes.set(model, { workers, cursor: 0 });
    }
  }

  /** Some worker of the pool is up (else its requests end no_healthy_workers). */
  get healthy(): boolean {
    for (const w of this.workers) if (w.up) return true;
    return false;
  }

  /** The sum of its healthy workers' max_running: what the gateway discovers as its capacity. */
  get capacity(): number {
    let c = 0;
    for (const w of this.workers) if (w.up) c += w.profile.maxRunning;
    return c;
  }

  /**
   * A healthy worker that serves `model`, by the scenario's routing; undefined when none is up.
   * `narrow` (capacity in KV tokens) keeps the healthy workers the request fits.
   */
  route(model: string, narrow?: (up: readonly Worker[]) => readonly Worker[]): Worker | undefined {
    const route = this.routes.get(model);
    if (route === undefined) return undefined;
    const workers = route.workers;
    const kept = narrow === undefined ? undefined : new Set(narrow(workers.filter((w) => w.up)));
    const ok = (w: Worker) => w.up && (kept === undefined || kept.has(w));
    if (this.routing === "round_robin") {
      for (let i = 0; i < workers.length; i++) {
        const w = workers[(route.cursor + i) % workers.length]!;
        if (ok(w)) {
          route.cursor = (route.cursor + i + 1) % workers.length;
          return w;
        }
      }
      return undefined;
    }
    if (this.routing === "power_of_two") {
      const up = workers.filter(ok);
      if (up.length === 0) return undefined;
      const a = up[this.rng.below(up.length)]!;
      const b = up[this.rng.below(up.length)]!;
      return b.roomLimit - b.load > a.roomLimit - a.load ? b : a;
    }
    let best: Worker | undefined;
    for (const w of workers) {
      if (!ok(w)) continue;
      if (best === undefined || w.roomLimit - w.load > best.roomLimit - best.load) best = w;
    }
    return best;
  }
}
