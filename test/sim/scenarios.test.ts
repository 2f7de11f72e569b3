/**
 * The headline numbers of the shipped scenarios (scenarios/*.yaml), each run under fifo, strict
 * and sluice on the same arrivals:
 * - weighted token shares within 2% of the weights while every tenant is backlogged;
 * - interactive p99 queue wait under 100 ms through a slow worker and a worker failure, and under
 *   150 ms through a 10x bulk flood and a diurnal peak (there interactive waits up to its
 *   preempt_after_secs for a slot to free before it preempts), while bulk still gets the slots no
 *   higher class holds;
 * - the largest service gap between two backlogged tenants within 2x the VTC bound;
 * and fifo and strict each failing at least one of them: the evidence of why sluice exists.
 * A failure here names the scenario, the check and the numbers of every policy.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { loadScenario, type Report, simulate } from "../../src/sim/index.js";
import type { ExpectationResult } from "../../src/sim/report.js";
import type { MetricName, PolicyName } from "../../src/sim/scenario.js";

const path = (name: string) => fileURLToPath(new URL(`../../scenarios/${name}.yaml`, import.meta.url));
const failedBy = new Map<PolicyName, string[]>([
  ["fifo", []],
  ["strict", []],
]);

async function run(name: string): Promise<Report> {
  const report = await simulate(loadScenario(path(name)));
  for (const [policy, list] of failedBy) {
    for (const e of report.policies[policy]!.expectations) if (!e.pass) list.push(`${name}: ${e.label}`);
  }
  return report;
}

function check(report: Report, policy: PolicyName, metric: MetricName, during?: string): ExpectationResult {
  const found = report.policies[policy]!.expectations.find(
    (e) => e.metric === metric && (e.during ?? undefined) === during,
  );
  assert.ok(found, `${report.scenario.name} has no ${metric} check${during ? ` during ${during}` : ""}`);
  return found;
}

function describe(report: Report, metric: MetricName, during?: string): string {
  return (["fifo", "strict", "sluice"] as PolicyName[])
    .map((p) => `${p} ${check(report, p, metric, during).value}`)
    .join(", ");
}

/** sluice passes every check of the scenario; the message carries every policy's numbers. */
function sluicePassesAll(report: Report): void {
  for (const e of report.policies.sluice!.expectations) {
    assert.ok(
      e.pass,
      `${report.scenario.name}: sluice fails "${e.label}": ${describe(report, e.metric as MetricName, e.during ?? undefined)}`,
    );
  }
}

function limits(report: Report, metric: MetricName, max: number, during?: string): void {
  const e = check(report, "sluice", metric, during);
  assert.equal(e.max, max, `${report.scenario.name}: the ${metric} limit is the issue's headline number`);
}

test("bulk-flood: interactive p99 queue wait < 150 ms during a 10x bulk flood, no default request preempted, bulk keeps its entitlement; fifo fails", async () => {
  const r = await run("bulk-flood");
  limits(r, "queue_wait_p99_ms", 150, "flood");
  // The wait target spares the default class: at-once preemption threw away 191 of its requests.
  assert.equal(r.policies.sluice!.classes.default!.rejected.scheduler_preempted ?? 0, 0);
  sluicePassesAll(r);
  assert.ok(check(r, "sluice", "entitlement_ratio", "flood").value! >= 0.9);
  assert.equal(
    check(r, "fifo", "queue_wait_p99_ms", "flood").pass &&
      check(r, "fifo", "rejected_fraction", "flood").pass,
    false,
  );
});

test("noisy-neighbour: weighted shares within 2%, service gap within 2x VTC; fifo and strict fail", async () => {
  const r = await run("noisy-neighbour");
  limits(r, "weighted_share_error", 0.02);
  limits(r, "service_gap_vtc_ratio", 2);
  sluicePassesAll(r);
  const f = r.policies.sluice!.fairness.all!.bulk!;
  assert.ok(f.backlogged_s > 0.9 * r.scenario.duration_s, `backlogged only ${f.backlogged_s} s`);
  for (const p of ["fifo", "strict"] as const)
    assert.equal(check(r, p, "weighted_share_error").pass, false, p);
});

test("heavy-tailed-prompts: token (not request) shares within 2% despite a heavy tail; fifo and strict fail", async () => {
  const r = await run("heavy-tailed-prompts");
  limits(r, "weighted_share_error", 0.02);
  sluicePassesAll(r);
  for (const p of ["fifo", "strict"] as const)
    assert.equal(check(r, p, "weighted_share_error").pass, false, p);
});

test("slow-worker: interactive stays fast and bulk keeps its 1:3 split through a 2x slowdown", async () => {
  const r = await run("slow-worker");
  limits(r, "queue_wait_p99_ms", 100, "slow");
  sluicePassesAll(r);
  assert.equal(check(r, "strict", "weighted_share_error").pass, false);
  assert.equal(check(r, "fifo", "rejected_fraction", "slow").pass, false);
});

test("worker-failure: capacity follows the fleet down and up; interactive and the bulk split hold", async () => {
  const r = await run("worker-failure");
  limits(r, "queue_wait_p99_ms", 100, "outage");
  sluicePassesAll(r);
  const ts = r.policies.sluice!.timeseries;
  assert.equal(Math.min(...ts.capacity.filter((c) => c > 0)), 96, "capacity drops by the dead worker's 32");
  assert.equal(ts.capacity[ts.capacity.length - 1], 128, "and comes back");
  assert.ok((r.policies.sluice!.totals.failed.upstream_reset ?? 0) > 0, "requests on the dead worker fail");
  assert.equal(check(r, "strict", "weighted_share_error").pass, false);
});

test("diurnal: a compressed day; interactive fast at the peak, bulk keeps its 1:2 split all day", async () => {
  const r = await run("diurnal");
  limits(r, "queue_wait_p99_ms", 150);
  // At-once preemption threw away 2,104 analytics requests here; the wait target spares them.
  assert.ok((r.policies.sluice!.classes.default!.rejected.scheduler_preempted ?? 0) <= 10);
  limits(r, "weighted_share_error", 0.02);
  limits(r, "service_gap_vtc_ratio", 2);
  sluicePassesAll(r);
});

test("steady-mixed: below capacity every policy serves interactive; sluice enforces the token budget", async () => {
  const r = await run("steady-mixed");
  for (const p of ["fifo", "strict", "sluice"] as const) {
    for (const e of r.policies[p]!.expectations) assert.ok(e.pass, `${p}: ${e.label} = ${e.value}`);
  }
  assert.ok((r.policies.sluice!.classes.default!.rejected.token_budget_exceeded ?? 0) > 0);
  assert.equal(r.policies.fifo!.classes.default!.rejected.token_budget_exceeded, undefined);
});

after(() => {
  // The evidence of why sluice exists: both alternatives fail at least one headline check.
  for (const [policy, failures] of failedBy) {
    assert.ok(failures.length > 0, `${policy} passed every headline check`);
  }
});
