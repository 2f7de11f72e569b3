/**
 * Capacity in KV tokens in the simulator (`policy.capacity_unit: kv_tokens`): the simulated gateway
 * derives its capacity from the workers' KV budgets (src/capacity/kv-budget.ts, as the gateway does)
 * and places each request where it fits. Workers whose KV holds fewer long requests than their
 * max_running: counting requests sends them more than their KV holds, and requests queue inside the
 * engine (outside priority order); counting KV tokens keeps them queued in sluice instead.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { simulate } from "../../src/sim/index.js";
import type { PolicyReport } from "../../src/sim/report.js";
import { resolveScenario } from "../../src/sim/scenario.js";

// biome-ignore lint/suspicious/noExplicitAny: a scenario document built by hand
type Doc = Record<string, any>;

function scenarioDoc(policy: Doc): Doc {
  return {
    name: "kv-bound",
    seed: 3,
    duration: "90s",
    drain: "120s",
    // 64 sequences, but KV for ~15 requests of ~2,200 tokens: the KV binds before the count does.
    workers: [{ count: 2, profile: "llama3-8b-h100", max_running: 64, kv_tokens: 36_000 }],
    tenants: [
      {
        name: "docs",
        class: "default",
        arrival: { process: "poisson", rate: 16 },
        prompt_tokens: { dist: "lognormal", median: 2000, sigma: 0.3, max: 6000 },
        output_tokens: { dist: "lognormal", median: 200, sigma: 0.3, max: 600 },
        max_tokens: 600,
      },
    ],
    policy: {
      scheduler: {
        classes: {
          system: { reserved_floor: 1 },
          interactive: { reserved_floor: 2 },
          default: { queue_size: 50_000, queue_timeout_secs: 600 },
        },
      },
      ...policy,
    },
    policies: ["sluice"],
  };
}

async function run(policy: Doc): Promise<PolicyReport> {
  const scenario = resolveScenario(scenarioDoc(policy), { file: "kv-bound.yaml", baseDir: "." });
  const report = await simulate(scenario);
  return report.policies.sluice!;
}

function engineWait(r: PolicyReport): {
  perRequestMs: number;
  peak: number;
  completed: number;
} {
  let wait = 0;
  let completed = 0;
  let peak = 0;
  for (const w of r.workers) {
    wait += w.engine_wait_ms;
    completed += w.completed;
    peak = Math.max(peak, w.engine_waiting_peak);
  }
  return { perRequestMs: wait / Math.max(1, completed), peak, completed };
}

test("kv_tokens keeps the engine's own queue near empty where requests queues there", async () => {
  const byRequests = engineWait(await run({ capacity_unit: "requests" }));
  const byTokens = engineWait(await run({ capacity_unit: "kv_tokens", kv_target_utilization: 0.9 }));
  // The same work gets done either way.
  assert.ok(
    Math.abs(byTokens.completed - byRequests.completed) <= byRequests.completed * 0.05,
    `completed ${byTokens.completed} vs ${byRequests.completed}`,
  );
  assert.ok(byRequests.peak >= 10, `counting requests queues at the engine (peak ${byRequests.peak})`);
  assert.ok(byRequests.perRequestMs > 1000, `requests: ${byRequests.perRequestMs} ms queued per request`);
  assert.ok(
    byTokens.perRequestMs < byRequests.perRequestMs / 10,
    `kv_tokens: ${byTokens.perRequestMs} ms queued at the engine per request, requests: ${byRequests.perRequestMs}`,
  );
  assert.ok(
    byTokens.peak <= 3,
    `kv_tokens: at most a few at the engine's queue at once (peak ${byTokens.peak})`,
  );
});

test("capacity_unit and kv_target_utilization: a bad value names its key", () => {
  const bad = (policy: Doc, key: string) =>
    assert.throws(
      () => resolveScenario(scenarioDoc(policy), { file: "kv-bound.yaml", baseDir: "." }),
      (err: unknown) => err instanceof ConfigError && String(err.message).includes(key),
    );
  bad({ capacity_unit: "blocks" }, "policy.capacity_unit");
  bad({ kv_target_utilization: 0 }, "policy.kv_target_utilization");
  bad({ kv_target_utilization: 1.5 }, "policy.kv_target_utilization");
  const ok = resolveScenario(scenarioDoc({ capacity_unit: "kv_tokens" }), {
    file: "kv-bound.yaml",
    baseDir: ".",
  });
  assert.deepEqual(ok.capacity.kv, { unit: "kv_tokens", targetUtilization: 0.9 });
});
