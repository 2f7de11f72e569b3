/**
 * The engine proof harness (src/sim/engine-bench.ts) on a tiny scenario: its figures come from the
 * run. Under max_running with ample KV nothing waits in the engine longer than the iteration in
 * progress; pinned above it, requests queue there; a tight KV cache preempts, and the report's
 * count matches the workers'; the oracle is the sweep's best pin.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  benchCase,
  EngineBenchError,
  oracle,
  oraclePins,
  parseSettings,
  runCell,
  SETTINGS,
  scenarioFor,
  type TraceCase,
} from "../../src/sim/engine-bench.js";
import { simulate } from "../../src/sim/index.js";

// One worker with a hand-set step model (no attention terms): an iteration costs at most
// beta0 + beta1 * max_batched_tokens + beta2 * max_running microseconds.
const BETA = [2000, 10, 100] as const;
const MAX_RUNNING = 8;
const MAX_BATCHED = 2048;
const LONGEST_ITERATION_MS = (BETA[0] + BETA[1] * MAX_BATCHED + BETA[2] * MAX_RUNNING) / 1000;

function tinyScenario(kvTokens: number): TraceCase {
  const dir = mkdtempSync(join(tmpdir(), "engine-bench-"));
  const path = join(dir, "tiny.yaml");
  writeFileSync(
    path,
    `name: tiny
seed: 7
duration: 20s
workers:
  - {count: 1, profile: llama3-8b-h100, max_running: ${MAX_RUNNING}, max_batched_tokens: ${MAX_BATCHED}, kv_tokens: ${kvTokens}, beta: [${BETA.join(", ")}], attention: false}
policy:
  scheduler:
    classes:
      system: {reserved_floor: 0, reserved_per_slot: 0}
      interactive: {reserved_floor: 0, reserved_per_slot: 0, queue_size: 100000, queue_timeout_secs: 600}
      default: {reserved_floor: 0, reserved_per_slot: 0}
tenants:
  - name: chat
    class: interactive
    max_class: interactive
    arrival: {process: poisson, rate: 60}
    prompt_tokens: {dist: uniform, min: 100, max: 300}
    output_tokens: {dist: uniform, min: 50, max: 150}
`,
  );
  return { path, speed: undefined };
}

test("under max_running with ample KV nothing queues in the engine past the iteration in progress; pinned above it, requests queue there", async () => {
  const c = tinyScenario(1_000_000);
  const under = await runCell(c, "requests", 4);
  assert.ok(under.engine.dispatched > 500, `${under.engine.dispatched}`);
  assert.ok(under.engine.queue_ms.max! <= LONGEST_ITERATION_MS, `${under.engine.queue_ms.max}`);
  assert.equal(under.engine.preemptions, 0);
  // the gateway held the rest: sluice saturated most of the run, the engine's KV nearly empty
  assert.ok(under.engine.saturated_s > 10, `${under.engine.saturated_s}`);
  assert.ok(under.engine.kv_utilization_at_saturation! > 0);
  assert.ok(under.engine.kv_utilization_at_saturation! < 0.01);
  const above = await runCell(c, "requests", 64);
  assert.ok(above.engine.queue_ms.p99! > 10 * LONGEST_ITERATION_MS, `${above.engine.queue_ms.p99}`);
  assert.ok(above.engine.queue_ttft_ratio! > under.engine.queue_ttft_ratio!);
  assert.equal(above.limit, "64");
});

test("a tight KV cache preempts inside the engine: the report counts what the workers counted", async () => {
  const c = tinyScenario(1500);
  const scenario = scenarioFor(c, "requests", 64);
  const report = await simulate(scenario);
  const r = report.policies.sluice!;
  const engine = r.engine.all!;
  const workers = r.workers.reduce((n, w) => n + w.kv_preemptions, 0);
  assert.ok(workers > 0);
  // one class, no retries: every preempted job is its request's last attempt
  assert.equal(engine.preemptions, workers);
  assert.ok(engine.preempted_requests > 0 && engine.preempted_requests <= engine.preemptions);
  // sluice held work back most of the run, and the engine ran its small cache nearly full
  assert.ok(engine.saturated_s > 10);
  assert.ok(engine.kv_utilization_at_saturation! > 0.5, `${engine.kv_utilization_at_saturation}`);
  assert.equal(engine.preemption_share, Math.round((engine.preemptions / engine.dispatched) * 1e4) / 1e4);
  assert.equal(engine.interactive_ttft_p99_ms, r.classes.interactive!.ttft_ms.p99);
});

test("the oracle is the pin with the most goodput", async () => {
  const c = tinyScenario(1_000_000);
  const pins = [2, 4, 8, 64];
  const best = await oracle(c, pins);
  const each = await Promise.all(pins.map((p) => runCell(c, "requests", p)));
  const top = Math.max(...each.map((x) => x.engine.goodput_rps));
  assert.equal(best.engine.goodput_rps, top);
  assert.equal(best.setting, "oracle");
  assert.deepEqual(best.skipped, []);
  assert.ok(pins.includes(best.pin!));
});

test("benchCase on a 20 s slice of the Azure replay at 3x: each setting's run, and an oracle no worse than any pin", async () => {
  const c: TraceCase = {
    path: fileURLToPath(new URL("../../scenarios/azure-conv-code.yaml", import.meta.url)),
    speed: 3,
    durationSecs: 20,
  };
  const { cells, oracle: best } = await benchCase(c, ["requests", "adaptive"], [24, 64, 128]);
  assert.deepEqual(
    cells.map((x) => x.setting),
    ["requests", "adaptive"],
  );
  const requests = cells[0]!;
  // the reported count: two workers of max_running 64
  assert.equal(requests.limit, "128");
  assert.ok(requests.engine.dispatched > 100, `${requests.engine.dispatched}`);
  assert.ok(requests.engine.interactive_ttft_p99_ms! > 0);
  assert.equal(best.setting, "oracle");
  const pinned128 = await runCell(c, "requests", 128);
  assert.ok(best.engine.goodput_rps >= pinned128.engine.goodput_rps);
  assert.ok([24, 64, 128].includes(best.pin!));
});

test("oracle pins span 1/16 to 2x the reported capacity", () => {
  const pins = oraclePins(128);
  assert.equal(pins[0], 8);
  assert.equal(pins[pins.length - 1], 256);
  assert.ok(pins.includes(128));
});

test("--settings: every setting by default, a list of known names; an unknown setting or flag refused", () => {
  assert.deepEqual(parseSettings([]), [...SETTINGS]);
  assert.deepEqual(parseSettings(["--settings", "adaptive,requests"]), ["requests", "adaptive"]);
  assert.throws(
    () => parseSettings(["--settings", "requests,slots"]),
    (e: unknown) =>
      e instanceof EngineBenchError && e.code === "engine_bench_bad_flag" && /slots/.test(e.message),
  );
  assert.deepEqual(parseSettings(["--no-write", "--settings", "requests"]), ["requests"]);
  assert.throws(
    () => parseSettings(["--setting", "requests"]),
    (e: unknown) =>
      e instanceof EngineBenchError && e.code === "engine_bench_bad_flag" && /--setting"/.test(e.message),
  );
  assert.throws(
    () => parseSettings(["--settings"]),
    (e: unknown) => e instanceof EngineBenchError && e.code === "engine_bench_bad_flag",
  );
});
