/**
 * Scenario validation: every error names the file and the key (`scenario.yaml: tenants.0.arrival.rate:
 * must be > 0`), including errors inside the priority-scheduler YAML and CSV traces.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { writeOutputDir } from "../../src/sim/output.js";
import { resolveScenario } from "../../src/sim/scenario.js";

const dir = mkdtempSync(join(tmpdir(), "sluice-scenario-"));
after(() => rmSync(dir, { recursive: true, force: true }));

// biome-ignore lint/suspicious/noExplicitAny: the tests mutate arbitrary parts of a YAML document
type Doc = Record<string, any>;

const base = () => ({
  duration: "5m",
  workers: [{ count: 2, profile: "toy" }],
  tenants: [
    {
      name: "chat",
      class: "interactive",
      max_class: "interactive",
      arrival: { process: "poisson", rate: 5 },
      prompt_tokens: 100,
      output_tokens: { dist: "uniform", min: 10, max: 50 },
    },
  ],
  policy: { scheduler: { classes: { system: { reserved_floor: 1 }, interactive: { reserved_floor: 4 } } } },
});

function error(mutate: (doc: Doc) => void): string {
  const doc: Doc = base();
  mutate(doc);
  try {
    resolveScenario(doc, { file: "scenario.yaml", baseDir: dir });
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.message;
  }
  assert.fail("no error");
}

test("a valid scenario resolves with defaults filled in", () => {
  const s = resolveScenario(base(), { file: "scenario.yaml", baseDir: dir });
  assert.equal(s.durationMs, 300_000);
  assert.deepEqual(
    s.workers.map((w) => w.name),
    ["w0", "w1"],
  );
  assert.deepEqual(s.policies, ["fifo", "strict", "sluice"]);
  assert.equal(s.tenants[0]!.key, "auth:chat");
  assert.equal(s.tenantPolicies.get("auth:chat")?.max_class, "interactive");
  assert.equal(s.classes.interactive.reserved_floor, 4);
});

test("errors name the key", () => {
  const cases: [(d: Doc) => void, string][] = [
    [(d) => (d.tenants[0].arrival.rate = 0), "scenario.yaml: tenants.0.arrival.rate: must be > 0"],
    [
      (d) => (d.tenants[0].arrival = { process: "lottery" }),
      "scenario.yaml: tenants.0.arrival.process: must be one of poisson, bursty, closed, replay",
    ],
    [(d) => (d.tenants[0].arrival.burst = 3), "scenario.yaml: tenants.0.arrival.burst: unknown key"],
    [
      (d) => (d.tenants[0].output_tokens = { dist: "uniform", min: 50, max: 10 }),
      "scenario.yaml: tenants.0.output_tokens.max: must be >= min",
    ],
    [(d) => (d.tenants[0].prompt_tokens = 1.5), "scenario.yaml: tenants.0.prompt_tokens: must be an integer"],
    [
      (d) => delete d.tenants[0].output_tokens,
      "scenario.yaml: tenants.0.output_tokens: is required (or give trace)",
    ],
    [
      (d) => (d.tenants[0].max_class = "urgent"),
      "scenario.yaml: tenants.0.max_class: must be one of bulk, default, interactive, system",
    ],
    [
      (d) => (d.workers[0].profile = "gpt-9"),
      `scenario.yaml: workers.0.profile: must be one of llama3-8b-h100, llama3-70b-4xh100, qwen2.5-7b-h100, smollm3-3b-h100, toy`,
    ],
    [
      (d) => (d.duration = "ten minutes"),
      'scenario.yaml: duration: must be a duration (seconds, or e.g. 90s, 10m, 1h), got "ten minutes"',
    ],
    [(d) => delete d.duration, "scenario.yaml: duration: is required"],
    [(d) => (d.tenants = "chat"), "scenario.yaml: tenants: must be a list"],
    [
      (d) => (d.phases = [{ at: "1m", rate: { tenants: ["nobody"], multiplier: 2 } }]),
      "scenario.yaml: phases.0.rate.tenants.0: no tenant named nobody",
    ],
    [
      (d) => (d.phases = [{ at: "1m", fail: { workers: [7] } }]),
      "scenario.yaml: phases.0.fail.workers.0: no worker 7 (there are 2)",
    ],
    [
      (d) => (d.phases = [{ at: "2m", until: "1m", capacity: 4 }]),
      "scenario.yaml: phases.0.until: must be after at",
    ],
    [
      (d) => (d.phases = [{ at: "1m" }]),
      "scenario.yaml: phases.0: give at least one of rate, slowdown, fail, capacity (or a name)",
    ],
    [
      (d) => (d.expect = [{ metric: "queue_wait_p99_ms", class: "interactive", during: "flood", max: 1 }]),
      "scenario.yaml: expect.0.during: no phase named flood",
    ],
    [
      (d) => (d.policy.scheduler.classes.bulk = { queue_timeout_secs: 0 }),
      "scenario.yaml: policy.scheduler.classes.bulk.queue_timeout_secs: must be > 0",
    ],
    [
      (d) => (d.policy.scheduler.classes.urgent = {}),
      "scenario.yaml: policy.scheduler.classes.urgent: unknown class (expected one of bulk, default, interactive, system)",
    ],
    [
      (d) => (d.tenants[0].tenant_policy = { tokens_per_minute: -1 }),
      "scenario.yaml: tenants.0.tenant_policy.tokens_per_minute: must be > 0",
    ],
    [
      (d) => (d.policy.scheduler_config = "missing.yaml"),
      "scenario.yaml: policy.scheduler: give scheduler or scheduler_config, not both",
    ],
    [(d) => d.tenants.push({ ...d.tenants[0] }), "scenario.yaml: tenants.1.name: duplicate tenant chat"],
  ];
  for (const [mutate, message] of cases) assert.equal(error(mutate), message);
  assert.equal(
    error((d) => delete d.policy), // built-in reservations (interactive 128, system 32) on 32 slots
    "scenario.yaml: policy: the classes' reservations total 164 (system 32, interactive 128, default 4, bulk 0), more than the fleet's capacity of 32: the gateway would fall back to legacy admission; lower reserved_floor / reserved_per_slot or add workers",
  );
});

test("policy files and traces are read relative to the scenario, with their own errors", () => {
  writeFileSync(join(dir, "prio.yaml"), "classes:\n  bulk:\n    queue_size: -3\n");
  const e1 = error((d) => {
    delete d.policy.scheduler;
    d.policy.scheduler_config = "prio.yaml";
  });
  assert.equal(
    e1,
    `scenario.yaml: policy.scheduler_config: ${join(dir, "prio.yaml")}: classes.bulk.queue_size: must be >= 0`,
  );
  const e2 = error((d) => {
    delete d.policy.scheduler;
    d.policy.scheduler_config = "nope.yaml";
  });
  assert.equal(e2, `scenario.yaml: policy.scheduler_config: cannot read ${join(dir, "nope.yaml")}: ENOENT`);

  writeFileSync(join(dir, "trace.csv"), "prompt_tokens,output_tokens\n100,20\n300,x\n");
  const e3 = error((d) => {
    delete d.tenants[0].prompt_tokens;
    delete d.tenants[0].output_tokens;
    d.tenants[0].trace = "trace.csv";
  });
  assert.equal(
    e3,
    `scenario.yaml: tenants.0.trace: ${join(dir, "trace.csv")}: line 3: prompt_tokens and output_tokens must be integers >= 1`,
  );
  writeFileSync(join(dir, "good.csv"), "id,output_tokens,prompt_tokens\n1,20,100\n2,40,300\n");
  const s = resolveScenario(
    {
      ...base(),
      tenants: [
        { ...base().tenants[0], prompt_tokens: undefined, output_tokens: undefined, trace: "good.csv" },
      ],
    },
    { file: "scenario.yaml", baseDir: dir },
  );
  assert.deepEqual([...s.tenants[0]!.trace!.trace.prompt], [100, 300]);
  assert.deepEqual([...s.tenants[0]!.trace!.trace.output], [20, 40]);
});

test("the output directory is written whole or not at all", async () => {
  const out = join(dir, "report");
  await writeOutputDir(out, { "a.txt": "one", "charts/b.svg": "<svg/>" });
  await writeOutputDir(out, { "c.txt": "two" }); // replaces the previous output entirely
  const { readdirSync, readFileSync, existsSync } = await import("node:fs");
  assert.deepEqual(readdirSync(out), ["c.txt"]);
  assert.equal(readFileSync(join(out, "c.txt"), "utf8"), "two");
  // "x" as a file and as a directory cannot both exist: the write fails half-way.
  const broken = join(dir, "broken");
  await assert.rejects(writeOutputDir(broken, { x: "file", "x/y": "nested" }));
  assert.equal(existsSync(broken), false);
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.includes("broken")),
    [],
  );
  // A failed rewrite leaves the previous output as it was.
  await assert.rejects(writeOutputDir(out, { x: "file", "x/y": "nested" }));
  assert.deepEqual(readdirSync(out), ["c.txt"]);
});

test("adaptive capacity and shedding: defaults, the gateway file's keys, and errors that name the key", () => {
  const s = resolveScenario(base(), { file: "scenario.yaml", baseDir: dir });
  assert.deepEqual(s.capacity, {
    mode: "static",
    minCapacity: 1,
    maxCapacity: 32, // the fleet's reported capacity: 2 x toy's 16
    tpotSloMs: undefined,
    ttftSloMs: undefined,
    kv: { unit: "requests", targetUtilization: 0.9 },
  });
  assert.equal(s.shedding, undefined);
  const a = resolveScenario(
    {
      ...base(),
      policies: ["sluice", "sluice-adaptive"],
      policy: {
        ...base().policy,
        adaptive_min_capacity: 4,
        tpot_slo_ms: 40,
        load_shedding: { max_queue_wait_ms: 500, usage_half_life_secs: 30, codel_classes: ["bulk"] },
        keyed_shedding: { classes: ["bulk"], rotation_window_secs: 60, min_percent: 10 },
      },
    },
    { file: "scenario.yaml", baseDir: dir },
  );
  assert.deepEqual(a.capacity, {
    mode: "static",
    minCapacity: 4,
    maxCapacity: 32,
    tpotSloMs: 40,
    ttftSloMs: undefined,
    kv: { unit: "requests", targetUtilization: 0.9 },
  });
  assert.deepEqual(a.shedding, {
    prioritized: { maxQueueWaitMs: 500, usageHalfLifeMs: 30_000, codelClasses: ["bulk"] },
    keyed: { classes: ["bulk"], rotationWindowMs: 60_000, minPercent: 10 },
  });
  // The gateway's own file: capacity_mode and the shedding blocks, overridden by policy.*.
  writeFileSync(
    join(dir, "gateway.yaml"),
    "capacity_mode: adaptive\nadaptive_max_capacity: 24\nload_shedding:\n  max_queue_wait_ms: 2000\ncapacity_unit: kv_tokens\nkv_target_utilization: 0.8\n",
  );
  const g = resolveScenario(
    {
      ...base(),
      policy: {
        ...base().policy,
        gateway_config: "gateway.yaml",
        tpot_slo_ms: 30,
        kv_target_utilization: 0.85,
      },
    },
    { file: "scenario.yaml", baseDir: dir },
  );
  // capacity_unit from the gateway's file, kv_target_utilization from policy.* over it.
  assert.deepEqual(g.capacity.kv, { unit: "kv_tokens", targetUtilization: 0.85 });
  assert.equal(g.capacity.mode, "adaptive");
  assert.equal(g.capacity.maxCapacity, 24);
  assert.equal(g.capacity.tpotSloMs, 30);
  const prioritized = g.shedding?.prioritized;
  assert.ok(prioritized);
  assert.equal(prioritized.maxQueueWaitMs, 2000);

  const cases: [(d: Doc) => void, string][] = [
    [
      (d) => (d.policy.capacity_mode = "elastic"),
      "scenario.yaml: policy.capacity_mode: must be one of static, adaptive",
    ],
    [
      (d) => (d.policy.adaptive_min_capacity = 0),
      "scenario.yaml: policy.adaptive_min_capacity: must be >= 1",
    ],
    [
      (d) => (d.policy.adaptive_min_capacity = 40),
      "scenario.yaml: policy.adaptive_min_capacity: must be <= the fleet's reported capacity (40 > 32), adaptive_max_capacity's default",
    ],
    [
      (d) => {
        d.policy.adaptive_min_capacity = 10;
        d.policy.adaptive_max_capacity = 5;
      },
      "scenario.yaml: policy.adaptive_min_capacity: must be <= adaptive_max_capacity (10 > 5)",
    ],
    [(d) => (d.policy.tpot_slo_ms = 0), "scenario.yaml: policy.tpot_slo_ms: must be > 0"],
    [(d) => (d.policy.ttft_slo_ms = "fast"), "scenario.yaml: policy.ttft_slo_ms: must be a number"],
    [
      (d) => (d.policy.adaptive_tuning = { adaptive_probe_step: 0.5 }),
      "scenario.yaml: policy.adaptive_tuning: removed: the adaptive controller has no tuning constants any more (it follows the engines' waiting queue and KV use, with the SLOs as guards; docs/adaptive.md); delete the block. Its settings are adaptive_min_capacity, adaptive_max_capacity, tpot_slo_ms, ttft_slo_ms and kv_target_utilization",
    ],
    [
      (d) => (d.policy.load_shedding = true),
      "scenario.yaml: policy.load_shedding: must be false or a mapping",
    ],
    [
      (d) => (d.policy.load_shedding = { max_queue_wait_ms: 100, codel_classes: ["system"] }),
      "scenario.yaml: policy.load_shedding.codel_classes.0: must be bulk, default or interactive (system is never shed)",
    ],
    [
      (d) => (d.policy.load_shedding = { max_queue_wait_ms: 100, codel_target_ms: -1 }),
      "scenario.yaml: policy.load_shedding.codel_target_ms: must be > 0",
    ],
    [
      (d) => (d.policy.keyed_shedding = { decrease_fraction: 1 }),
      "scenario.yaml: policy.keyed_shedding.decrease_fraction: must be < 1",
    ],
    [
      (d) => (d.policy.keyed_shedding = { target_delay: 100 }),
      "scenario.yaml: policy.keyed_shedding.target_delay: unknown key",
    ],
    [
      (d) => {
        d.policies = ["sluice-adaptive"];
        d.policy.capacity = 16;
      },
      "scenario.yaml: policy.capacity: pins the capacity: give it or adaptive capacity (capacity_mode: adaptive, the sluice-adaptive policy), not both",
    ],
    [
      (d) => (d.policies = ["adaptive"]),
      "scenario.yaml: policies.0: must be one of fifo, strict, sluice, sluice-adaptive",
    ],
    [(d) => (d.tenants[0].sessions = 0), "scenario.yaml: tenants.0.sessions: must be >= 1"],
    [
      (d) => (d.expect = [{ metric: "convergence_secs", class: "interactive", max: 30 }]),
      "scenario.yaml: expect.0.class: convergence_secs is measured over the fleet: give no class",
    ],
    [
      (d) => (d.expect = [{ metric: "shed_fraction", max: 0 }]),
      "scenario.yaml: expect.0.class: is required for shed_fraction",
    ],
    [
      (d) => (d.expect = [{ metric: "limit_median", relative_to: "before", min: 0.8 }]),
      "scenario.yaml: expect.0.relative_to: no phase named before",
    ],
    [(d) => (d.report = { slo_window: 0 }), "scenario.yaml: report.slo_window: must be > 0"],
  ];
  for (const [mutate, message] of cases) assert.equal(error(mutate), message);
  writeFileSync(join(dir, "bad-gateway.yaml"), "tpot_slo_ms: -5\n");
  assert.equal(
    error((d) => (d.policy.gateway_config = "bad-gateway.yaml")),
    "scenario.yaml: policy.gateway_config: tpot_slo_ms: must be > 0",
  );
  writeFileSync(join(dir, "bad-gateway2.yaml"), "keyed_shedding:\n  min_percent: 120\n");
  assert.equal(
    error((d) => (d.policy.gateway_config = "bad-gateway2.yaml")),
    "scenario.yaml: policy.gateway_config: keyed_shedding.min_percent: must be <= 100",
  );
});

test("a named phase without effects is a window to measure", () => {
  const s = resolveScenario(
    { ...base(), phases: [{ name: "warm", at: 0, until: "1m" }] },
    { file: "scenario.yaml", baseDir: dir },
  );
  assert.equal(s.phases[0]!.name, "warm");
  assert.equal(s.phases[0]!.slowdown, undefined);
});
