/**
 * How workers group into model pools (docs/gateway.md, "Model pools"): models that share a worker
 * share a pool, so a pool is a connected component of the worker-model graph. A pool is named by
 * its alphabetically first model; the name is the `model` label of the `sluice_pool_*` series.
 *
 * A worker's models come from its config (`workers[].models`, which wins) or from what it reports
 * at `GET /v1/models`. A worker that answers but lists no model serves whatever model no other pool
 * claims: those workers form the catch-all pool `*`. A worker whose models were never learned (it
 * has not answered yet) is in no pool.
 */

/** What one worker serves, as far as the gateway knows. */
export type ServedModels =
  /** Learned or configured. */
  | { kind: "models"; models: readonly string[] }
  /** Answers, but does not say what it serves: the catch-all pool. */
  | { kind: "any" }
  /** Not learned yet (never reachable, not configured). */
  | { kind: "unknown" };

export const CATCH_ALL_POOL = "*";

interface FormedPool {
  /** The alphabetically first model, or `*` for the catch-all pool. */
  name: string;
  /** Sorted; empty for the catch-all pool. */
  models: string[];
  /** Indexes into the input, ascending. */
  workers: number[];
}

/** Groups workers into pools; pools are returned sorted by name. Pure. */
export function formPools(served: readonly ServedModels[]): FormedPool[] {
  // Union-find over workers, joined through the models they share.
  const parent = served.map((_, i) => i);
  const find = (i: number): number => {
    while (parent[i] !== i) {
      parent[i] = parent[parent[i]!]!;
      i = parent[i]!;
    }
    return i;
  };
  const firstWorkerOf = new Map<string, number>();
  const catchAll: number[] = [];
  served.forEach((s, i) => {
    if (s.kind === "any") catchAll.push(i);
    if (s.kind !== "models") return;
    for (const model of s.models) {
      const first = firstWorkerOf.get(model);
      if (first === undefined) firstWorkerOf.set(model, i);
      else parent[find(i)] = find(first);
    }
  });
  const groups = new Map<number, { models: Set<string>; workers: number[] }>();
  served.forEach((s, i) => {
    if (s.kind !== "models" || s.models.length === 0) return;
    const root = find(i);
    let group = groups.get(root);
    if (group === undefined) {
      group = { models: new Set(), workers: [] };
      groups.set(root, group);
    }
    group.workers.push(i);
    for (const model of s.models) group.models.add(model);
  });
  const pools: FormedPool[] = [...groups.values()].map((g) => {
    const models = [...g.models].sort();
    return { name: models[0]!, models, workers: g.workers };
  });
  if (catchAll.length > 0) pools.push({ name: CATCH_ALL_POOL, models: [], workers: catchAll });
  return pools.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}
