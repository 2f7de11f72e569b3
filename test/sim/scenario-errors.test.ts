/**
 * Scenario validation: every error names the file and the key (`scenario.yaml: tenants.0.arrival.rate:
 * must be > 0`), including errors inside the priority-scheduler YAML and CSV traces.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConfigError } from "../../src/core/errors.js";
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
      "scenario.yaml: tenants.0.arrival.process: must be one of poisson, bursty, closed",
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
      "scenario.yaml: phases.0: give at least one of rate, slowdown, fail, capacity",
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
