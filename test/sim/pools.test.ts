/**
 * Model pools in the simulator (issue 15), through scenarios/two-models.yaml: a small model on three
 * workers, a big one on two, and a bulk flood of the big model from 4m to 9m.
 * - requests never cross pools, nor go to a worker of their pool that does not serve their model;
 * - under sluice (one scheduler per pool) the small model's admissions and queue wait are those of
 *   the same traffic without the flood, while the big model queues; under strict (one scheduler for
 *   the fleet, as the reference) the flood reaches the small model;
 * - a model no worker serves ends model_not_found; a pool that loses its last worker answers
 *   no_healthy_workers, at once for new requests and at their queue timeout for queued ones;
 * - the new keys' errors name the key.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { parse as parseYaml } from "yaml";
import { simulate } from "../../src/sim/index.js";
import { NO_POOL, OUTCOME_INDEX } from "../../src/sim/log.js";
import type { PoolReport, PoolStats, Report } from "../../src/sim/report.js";
import { runPolicy } from "../../src/sim/run.js";
import { type PolicyName, resolveScenario, type Scenario } from "../../src/sim/scenario.js";

const dir = fileURLToPath(new URL("../../scenarios/", import.meta.url));
const SMALL = "llama-3-8b";
const BIG = "llama-3-70b";

// biome-ignore lint/suspicious/noExplicitAny: the tests edit arbitrary parts of the YAML document
type Doc = Record<string, any>;

function twoModels(edit?: (doc: Doc) => void, policies?: PolicyName[]): Scenario {
  const doc = parseYaml(readFileSync(join(dir, "two-models.yaml"), "utf8")) as Doc;
  edit?.(doc);
  return resolveScenario(doc, { file: "two-models.yaml", baseDir: dir }, { policies });
}

/** The same scenario without the ETL job: no flood (its phase stays, as a window to measure). */
function withoutFlood(doc: Doc): void {
  doc.tenants = doc.tenants.filter((t: Doc) => t.name !== "etl");
  for (const p of doc.phases) delete p.rate;
}

function pool(report: Report, policy: PolicyName, name: string): PoolReport {
  const p = report.policies[policy]!.pools?.[name];
  assert.ok(p, `${policy} has no pool ${name}`);
  return p;
}

test("two pools form from the workers' models; requests never cross pools", async () => {
  const scenario = twoModels();
  assert.deepEqual(
    scenario.pools.map((p) => [p.name, p.workers.map((w) => scenario.workers[w]!.name)]),
    [
      [BIG, ["big-0", "big-1"]],
      [SMALL, ["small-0", "small-1", "small-2"]],
    ],
  );
  const report = await simulate(scenario);
  for (const policy of scenario.policies) {
    for (const [name, p] of Object.entries(report.policies[policy]!.pools!)) {
      let sent = 0;
      for (const [worker, models] of Object.entries(p.workers)) {
        const served = scenario.workers.find((w) => w.name === worker)!.models;
        for (const [model, n] of Object.entries(models)) {
          assert.ok(
            served.includes(model),
            `${policy}: ${worker} (pool ${name}) got ${n} requests for ${model}`,
          );
          sent += n;
        }
        assert.ok(Object.keys(models).length > 0, `${policy}: ${worker} got no request at all`);
      }
      // Every request the pool let in went to one of its own workers (preempted ones included).
      assert.ok(
        sent <= p.admitted && sent > 0.9 * p.admitted,
        `${policy} ${name}: ${sent} sent, ${p.admitted} admitted`,
      );
    }
  }
});

test("a worker serving an adapter too joins the base model's pool, and alone gets the adapter's requests", async () => {
  const scenario = twoModels(
    (doc) => {
      doc.workers.push({
        profile: "llama3-8b-h100",
        max_running: 16,
        name: "lora",
        models: [SMALL, "llama-3-8b-sql"],
      });
      doc.tenants.push({
        name: "sql",
        class: "default",
        model: "llama-3-8b-sql",
        arrival: { process: "poisson", rate: 2 },
        prompt_tokens: 500,
        output_tokens: 100,
      });
    },
    ["sluice"],
  );
  assert.deepEqual(
    scenario.pools.map((p) => [p.name, p.models]),
    [
      [BIG, [BIG]],
      [SMALL, [SMALL, "llama-3-8b-sql"]],
    ],
  );
  const report = await simulate(scenario);
  const small = pool(report, "sluice", SMALL);
  assert.ok((small.workers["lora-0"]!["llama-3-8b-sql"] ?? 0) > 1000, JSON.stringify(small.workers));
  for (const w of ["small-0", "small-1", "small-2"])
    assert.equal(small.workers[w]!["llama-3-8b-sql"], undefined);
  assert.ok(
    (small.workers["lora-0"]![SMALL] ?? 0) > 0,
    "the base model's requests use the adapter's worker too",
  );
  assert.equal(Math.max(...small.timeseries.capacity), 4 * 16, "the pool's capacity counts all four workers");
  assert.equal(report.policies.sluice!.tenants.sql!.completed, report.policies.sluice!.tenants.sql!.requests);
});

test("sluice: the big model's flood leaves the small model's admissions and queue wait unchanged", async () => {
  const flood = await simulate(twoModels(undefined, ["sluice", "strict"]));
  const calm = await simulate(twoModels(withoutFlood, ["sluice", "strict"]));

  // The big model queues...
  const big = pool(flood, "sluice", BIG);
  assert.ok(big.queued_max > 1000, `big model queued at most ${big.queued_max}`);
  assert.ok(
    big.phases.flood!.queue_wait_ms.p99! > 60_000,
    `big p99 wait ${big.phases.flood!.queue_wait_ms.p99}`,
  );
  assert.ok(pool(calm, "sluice", BIG).queued_max < 50);

  // ...and the small one does not notice, in every window and class.
  const a = pool(flood, "sluice", SMALL);
  const b = pool(calm, "sluice", SMALL);
  type Scope = PoolStats & { classes: PoolReport["classes"] };
  const windows: [string, Scope | undefined, Scope | undefined][] = [
    ["all", a, b],
    ...Object.keys(b.phases).map((w): [string, Scope | undefined, Scope | undefined] => [
      w,
      a.phases[w],
      b.phases[w],
    ]),
  ];
  for (const [w, x, y] of windows) {
    for (const [cls, xs, ys] of [
      ["all classes", x, y],
      ["interactive", x?.classes.interactive, y?.classes.interactive],
      ["default", x?.classes.default, y?.classes.default],
    ] as const) {
      assert.ok(xs && ys, `${w} ${cls}`);
      assert.ok(xs.requests > 0);
      assert.ok(
        Math.abs(xs.admitted - ys.admitted) <= 0.01 * ys.admitted,
        `${w} ${cls} admitted ${xs.admitted} vs ${ys.admitted}`,
      );
      const p99 = [xs.queue_wait_ms.p99!, ys.queue_wait_ms.p99!];
      assert.ok(
        Math.abs(p99[0]! - p99[1]!) <= Math.max(5, 0.05 * p99[1]!),
        `${w} ${cls} p99 wait ${p99[0]} vs ${p99[1]} ms`,
      );
    }
  }

  // strict admits for the whole fleet, as the reference does: there the flood reaches the small model.
  const strictFlood = pool(flood, "strict", SMALL).phases.flood!.classes.default!.queue_wait_ms.p99!;
  const strictCalm = pool(calm, "strict", SMALL).phases.flood!.classes.default!.queue_wait_ms.p99!;
  assert.ok(strictFlood > 100 && strictFlood > 5 * strictCalm, `strict: ${strictFlood} vs ${strictCalm} ms`);
  for (const e of flood.policies.sluice!.expectations) assert.ok(e.pass, `sluice: ${e.label} = ${e.value}`);
  assert.equal(flood.policies.strict!.expectations.find((e) => e.class === "default")!.pass, false);
});

test("a model no worker serves ends model_not_found, in no pool and on no worker", async () => {
  const scenario = twoModels((doc) => {
    doc.tenants.push({
      name: "typo",
      class: "default",
      model: "llama-3-7b",
      arrival: { process: "poisson", rate: 1 },
      prompt_tokens: 200,
      output_tokens: 50,
    });
  });
  const report = await simulate(scenario);
  for (const policy of scenario.policies) {
    const t = report.policies[policy]!.tenants.typo!;
    assert.ok(t.requests > 500);
    assert.deepEqual(t.rejected, { model_not_found: t.requests }, policy);
    assert.equal(report.policies[policy]!.totals.rejected.model_not_found, t.requests);
    for (const p of Object.values(report.policies[policy]!.pools!)) {
      for (const models of Object.values(p.workers)) assert.equal(models["llama-3-7b"], undefined);
    }
  }
  const run = await runPolicy(scenario, "sluice");
  for (let i = 0; i < run.log.size; i++) {
    if (run.log.outcome[i] === OUTCOME_INDEX.model_not_found) assert.equal(run.log.pool[i], NO_POOL);
  }
});

test("a pool that loses its last worker answers no_healthy_workers; the other pool is untouched", async () => {
  // The big model's workers leave at 5m for good, in the middle of the flood.
  const outage = { name: "outage", at: "5m", fail: { workers: ["big-0", "big-1"] } };
  const scenario = twoModels((doc) => doc.phases.push(outage), ["sluice"]);
  const run = await runPolicy(scenario, "sluice");
  const log = run.log;
  const bigIndex = scenario.pools.findIndex((p) => p.name === BIG);
  const from = 300_000;
  let during = 0;
  let queuedThenGone = 0;
  let reset = 0;
  for (let i = 0; i < log.size; i++) {
    const o = log.outcome[i]!;
    const arrival = log.arrival[i]!;
    if (log.pool[i] !== bigIndex) {
      assert.notEqual(o, OUTCOME_INDEX.no_healthy_workers, "the small model keeps its workers");
      continue;
    }
    if (arrival >= from) {
      // New requests of a pool with no worker: refused at once, never admitted.
      during++;
      assert.equal(o, OUTCOME_INDEX.no_healthy_workers, `arrival at ${arrival} ms`);
      assert.ok(Number.isNaN(log.wait[i]!));
    } else if (arrival < from && o === OUTCOME_INDEX.no_healthy_workers) {
      // Queued when the workers left: the answer at their queue timeout (bulk: 600 s).
      queuedThenGone++;
      assert.ok(Number.isNaN(log.wait[i]!));
    }
    if (o === OUTCOME_INDEX.upstream_reset) reset++;
    assert.notEqual(o, OUTCOME_INDEX.scheduler_queue_timeout, `arrival at ${arrival} ms timed out instead`);
  }
  assert.ok(during > 1000, `${during} arrivals during the outage`);
  assert.ok(queuedThenGone > 0, "queued requests of the pool end no_healthy_workers at their timeout");
  assert.ok(reset > 0, "requests running on the failed workers fail");
  const capacity = run.pools[bigIndex]!.series.capacity;
  assert.equal(capacity[290], 64);
  assert.equal(capacity[310], 0, "the pool's capacity is 0 once its workers are gone");

  // The small model sees the same as without the outage.
  const report = await simulate(scenario);
  const calm = await simulate(twoModels(undefined, ["sluice"]));
  const [a, b] = [pool(report, "sluice", SMALL), pool(calm, "sluice", SMALL)];
  assert.equal(a.admitted, b.admitted);
  assert.equal(a.queue_wait_ms.p99, b.queue_wait_ms.p99);
});

test("the same scenario and seed give the same pools, run after run", async () => {
  const scenario = twoModels(undefined, ["sluice"]);
  const [x, y] = [await simulate(scenario), await simulate(scenario)];
  assert.deepEqual(x.policies.sluice!.pools, y.policies.sluice!.pools);
});

test("the new keys' errors name the key", () => {
  const error = (edit: (doc: Doc) => void): string => {
    try {
      twoModels(edit);
    } catch (err) {
      assert.ok(err instanceof ConfigError, String(err));
      return err.message;
    }
    assert.fail("no error");
  };
  assert.equal(
    error((d) => (d.workers[0].models = [SMALL, SMALL])),
    "two-models.yaml: workers.0.models.1: duplicate model llama-3-8b",
  );
  assert.equal(
    error((d) => (d.workers[0].models = [])),
    "two-models.yaml: workers.0.models: must list at least one model",
  );
  assert.equal(
    error((d) => (d.tenants[0].model = "")),
    "two-models.yaml: tenants.0.model: must not be empty",
  );
  assert.match(
    error((d) => delete d.tenants[0].model),
    /^two-models\.yaml: tenants\.0\.model: is required: no worker serves the default model default/,
  );
  assert.match(
    error((d) => d.phases.push({ at: "1m", capacity: 64 })),
    /^two-models\.yaml: phases\.3\.capacity: pins one capacity, and the workers form several model pools/,
  );
  assert.match(
    error((d) => (d.policy.capacity = 64)),
    /^two-models\.yaml: policy\.capacity: pins one capacity/,
  );
  assert.equal(
    error((d) => (d.expect[0].model = "gpt-9")),
    "two-models.yaml: expect.0.model: no worker serves gpt-9 (the pools are llama-3-70b, llama-3-8b)",
  );
  assert.equal(
    error((d) => d.expect.push({ metric: "goodput_rps", model: SMALL, min: 1 })),
    "two-models.yaml: expect.3.model: goodput_rps is measured over the fleet, not per model",
  );
  assert.match(
    error((d) => d.expect.push({ metric: "weighted_share_error", class: "bulk", max: 0.02 })),
    /^two-models\.yaml: expect\.3\.model: is required for weighted_share_error: fair shares are kept per model pool/,
  );
  assert.match(
    error((d) => (d.workers[1].max_running = 8)),
    /^two-models\.yaml: policy: .* more than pool llama-3-70b's capacity of 16/,
  );
  // default_model names what workers without models serve and tenants without one ask for.
  const s = twoModels((d) => {
    d.default_model = SMALL;
    delete d.workers[0].models;
    delete d.tenants[0].model;
  });
  assert.deepEqual(s.workers[0]!.models, [SMALL]);
  assert.equal(s.tenants[0]!.model, SMALL);
  assert.equal(s.tenants[0]!.modelNamed, undefined);
});
