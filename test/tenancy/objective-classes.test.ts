/**
 * The priority -> class table of `inference_objective_classes` and the `inference_objectives`
 * names: boundaries, the default table, and configuration errors naming the file and the key.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import {
  classForPriority,
  DEFAULT_PRIORITY_THRESHOLDS,
  MAX_PRIORITY,
  MIN_PRIORITY,
} from "../../src/config/inference-objectives.js";
import { resolveGatewaySettings } from "../../src/config/resolve-gateway-settings.js";
import { writeTempFile } from "../helpers/harness.js";

describe("classForPriority", () => {
  test("the default table: negative is bulk, 0 default, positive interactive, 1000 and up system", () => {
    const cases: Array<[number, string]> = [
      [MIN_PRIORITY, "bulk"],
      [-1, "bulk"],
      [0, "default"],
      [1, "interactive"],
      [999, "interactive"],
      [1000, "system"],
      [MAX_PRIORITY, "system"],
    ];
    for (const [priority, cls] of cases) {
      assert.equal(classForPriority(priority, DEFAULT_PRIORITY_THRESHOLDS), cls, `priority ${priority}`);
    }
  });

  test("a custom table: each bound belongs to its class, one below to the next class down", () => {
    const table = { system: 100, interactive: 10, default: -5 };
    const cases: Array<[number, string]> = [
      [100, "system"],
      [99, "interactive"],
      [10, "interactive"],
      [9, "default"],
      [-5, "default"],
      [-6, "bulk"],
    ];
    for (const [priority, cls] of cases)
      assert.equal(classForPriority(priority, table), cls, `priority ${priority}`);
  });

  test("a class turned off (null) is never chosen; its range goes to the class below", () => {
    const table = { system: null, interactive: 50, default: null };
    assert.equal(classForPriority(MAX_PRIORITY, table), "interactive");
    assert.equal(classForPriority(50, table), "interactive");
    assert.equal(classForPriority(49, table), "bulk");
    assert.equal(classForPriority(0, table), "bulk");
  });
});

async function settingsFrom(
  t: import("node:test").TestContext,
  yaml: string,
  flags: Record<string, unknown> = {},
) {
  const path = await writeTempFile(t, "sluice.yaml", `worker_urls: [http://127.0.0.1:1]\n${yaml}`);
  return {
    path,
    settings: () => resolveGatewaySettings({ commandLine: { config: path, ...flags }, env: {} }),
  };
}

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected a ConfigError");
}

describe("the YAML blocks", () => {
  test("off by default: no inference gateway settings, even with tables in the file", async (t) => {
    const { settings } = await settingsFrom(t, "inference_objectives: {premium: 100}\n");
    assert.equal(settings().inferenceGateway, undefined);
  });

  test("on: the objectives, and the default table with an override merged in", async (t) => {
    const { settings } = await settingsFrom(
      t,
      "inference_gateway_headers: true\ninference_objectives: {premium: 100, batch: -10}\ninference_objective_classes: {system: null}\n",
    );
    const s = settings().inferenceGateway;
    assert.ok(s !== undefined);
    assert.deepEqual(
      [...s.objectives],
      [
        ["premium", 100],
        ["batch", -10],
      ],
    );
    assert.deepEqual(s.classes, { system: null, interactive: 1, default: 0 });
  });

  test("the flag turns it on too, with the default table", async (t) => {
    const { settings } = await settingsFrom(t, "", { inference_gateway_headers: true });
    const on = settings().inferenceGateway;
    assert.deepEqual(on?.classes, DEFAULT_PRIORITY_THRESHOLDS);
    assert.equal(on?.objectives.size, 0);
  });

  test("bad tables are refused naming the file and the key", async (t) => {
    const cases: Array<[string, string, RegExp]> = [
      [
        "inference_objective_classes: {interactive: 1000}\n",
        "inference_objective_classes.interactive",
        /below system's bound \(1000\)/,
      ],
      [
        "inference_objective_classes: {default: 5, interactive: 5}\n",
        "inference_objective_classes.default",
        /below interactive's bound \(5\)/,
      ],
      [
        "inference_objective_classes: {bulk: -1}\n",
        "inference_objective_classes.bulk",
        /bulk is every priority below default's bound/,
      ],
      ["inference_objective_classes: {system: 1.5}\n", "inference_objective_classes.system", /integer/],
      ["inference_objective_classes: [1, 2]\n", "inference_objective_classes", /mapping/],
      ["inference_objectives: {Premium: 1}\n", "inference_objectives.Premium", /InferenceObjective name/],
      ["inference_objectives: {premium: high}\n", "inference_objectives.premium", /integer/],
      [
        "inference_objectives: {premium: 2147483648}\n",
        "inference_objectives.premium",
        /integer from -2147483648 to 2147483647/,
      ],
    ];
    for (const [yaml, key, reason] of cases) {
      const { path, settings } = await settingsFrom(t, `inference_gateway_headers: true\n${yaml}`);
      const err = configError(settings);
      assert.equal(err.path, `${path}: ${key}`, yaml);
      assert.match(err.reason, reason, yaml);
    }
  });

  test("a bad table is refused even while the switch is off", async (t) => {
    const { path, settings } = await settingsFrom(t, "inference_objective_classes: {interactive: 5000}\n");
    assert.equal(configError(settings).path, `${path}: inference_objective_classes.interactive`);
  });
});
