/**
 * The simulator predicts each request's output length with the gateway's predictor
 * (accounting/output-prediction.ts) on its clock, and reports the error of completed answers
 * (`output_prediction_error` per class and tenant, the table's `pred err p50`).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { simulate } from "../../src/sim/index.js";
import { resolveScenario } from "../../src/sim/scenario.js";
import { summaryTable } from "../../src/sim/table.js";

// biome-ignore lint/suspicious/noExplicitAny: a scenario document built in the test
function scenario(tenants: Record<string, any>[]) {
  return resolveScenario(
    {
      name: "prediction",
      seed: 3,
      duration: "60s",
      workers: [{ count: 4, profile: "llama3-8b-h100", max_running: 32 }],
      policy: { scheduler_config: "scenarios/policies/fleet-128.yaml" },
      tenants,
      policies: ["sluice"],
    },
    { file: "prediction.yaml", baseDir: process.cwd() },
  );
}

test("fixed answers: predicted exactly once the tenant has its history; the first ones are off", async () => {
  const report = await simulate(
    scenario([
      {
        name: "fixed",
        class: "default",
        arrival: { process: "poisson", rate: 5 },
        prompt_tokens: 200,
        output_tokens: 120,
      },
    ]),
  );
  const stats = report.policies.sluice!.tenants.fixed!;
  const error = stats.output_prediction_error;
  assert.equal(error.n, stats.completed, "every completed answer without a cap is measured");
  assert.ok(stats.completed > 100, `${stats.completed} completed`);
  assert.equal(error.p50, 0, "the tenant's p95 of 120-token answers is 120");
  // The first answers fell back on the context (the largest worker's KV less the prompt): far off.
  assert.ok(error.max! > 10, `max ${error.max}`);
  assert.match(summaryTable(report), /pred err p50/);
});

test("answers that stop at their max_tokens are not measured", async () => {
  const report = await simulate(
    scenario([
      {
        name: "clipped",
        class: "default",
        arrival: { process: "poisson", rate: 5 },
        prompt_tokens: 200,
        output_tokens: 300,
        max_tokens: 100,
      },
      {
        name: "varied",
        class: "default",
        arrival: { process: "poisson", rate: 5 },
        prompt_tokens: 200,
        output_tokens: { dist: "uniform", min: 50, max: 400 },
      },
    ]),
  );
  const tenants = report.policies.sluice!.tenants;
  assert.ok(tenants.clipped!.completed > 100);
  assert.equal(tenants.clipped!.output_prediction_error.n, 0, "every answer hit its max_tokens");
  const varied = tenants.varied!.output_prediction_error;
  assert.equal(varied.n, tenants.varied!.completed);
  // A p95 over answers uniform in 50..400 is about 380: the median answer (225) is off by ~0.7.
  assert.ok(varied.p50! > 0.3 && varied.p50! < 1.5, `p50 ${varied.p50}`);
});
