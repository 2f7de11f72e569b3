/**
 * `sluice check-config` validates both files offline, prints the effective per-class table at the
 * given or configured capacity, and exits 1 on any problem (2 on a bad command line): a CI step can
 * run it before a deploy.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { checkConfig } from "../../src/cli/check-config.js";
import { renderConfigCheck } from "../../src/cli/config-check-table.js";
import { runCli } from "../helpers/cli-process.js";

const SLOW = 60_000;

function dir(): string {
  return mkdtempSync(join(tmpdir(), "sluice-check-config-"));
}

function file(where: string, name: string, text: string): string {
  const path = join(where, name);
  writeFileSync(path, text);
  return path;
}

describe("sluice check-config", () => {
  test("the built-in classes on a small fleet: a problem with the fix, and the fix passes", async () => {
    const check = await checkConfig({ capacity: 40, env: {} });
    assert.equal(check.problems.length, 1);
    const [problem] = check.problems;
    assert.match(problem!, /reservations total 164 exceed capacity 40/);
    assert.equal(check.tables[0]!.fits, false);
    assert.deepEqual(check.tables[0]!.reserved, { system: 32, interactive: 128, default: 4, bulk: 0 });
    // Apply what the problem says, literally, and check again.
    const floor = /classes\.interactive\.reserved_floor to at most (\d+)/.exec(problem!)?.[1];
    const share = /classes\.interactive\.reserved_per_slot to at most ([\d.]+)/.exec(problem!)?.[1];
    assert.ok(floor !== undefined && share !== undefined, problem);
    const at = dir();
    const fixed = file(
      at,
      "priority.yaml",
      `classes:\n  interactive:\n    reserved_floor: ${floor}\n    reserved_per_slot: ${share}\n`,
    );
    const again = await checkConfig({ capacity: 40, schedulerPath: fixed, env: {} });
    assert.deepEqual(again.problems, []);
    assert.equal(again.tables[0]!.fits, true);
    const total = Object.values(again.tables[0]!.reserved).reduce((a, b) => a + b, 0);
    assert.ok(total <= 40, `reserved ${total} of 40`);
  });

  test("a mistyped key: the file, the line and the key, with a did-you-mean", async () => {
    const at = dir();
    const path = file(
      at,
      "priority.yaml",
      "classes:\n  interactive:\n    reserved_floor: 4\n    queue_sise: 10\n",
    );
    const check = await checkConfig({ schedulerPath: path, capacity: 64, env: {} });
    assert.deepEqual(check.problems, [
      `${path}:4: classes.interactive.queue_sise: unknown key (did you mean queue_size?)`,
    ]);
    assert.deepEqual(check.tables, [], "no table from a file that does not load");
  });

  test("the gateway file: capacity from its workers, a table per pool override, the scheduler file it names", async () => {
    const at = dir();
    const priority = file(
      at,
      "priority.yaml",
      "classes:\n  system: {reserved_floor: 2}\n  interactive: {reserved_floor: 4, reserved_per_slot: 0.25}\ntenant_policies:\n  acme: {max_class: interactive}\n",
    );
    const gateway = file(
      at,
      "gateway.yaml",
      [
        "priority_scheduler_enabled: true",
        `priority_scheduler_config: ${priority}`,
        "workers:",
        "  - {url: 'http://10.0.0.1:8000', capacity: 16, models: [small]}",
        "  - {url: 'http://10.0.0.2:8000', capacity: 8, models: [large]}",
        "  - {url: 'http://10.0.0.3:8000', capacity: 8, models: [large]}",
        "pools:",
        "  large:",
        "    classes:",
        "      bulk: {reserved_floor: 3}",
        "",
      ].join("\n"),
    );
    const check = await checkConfig({ configPath: gateway, env: {} });
    assert.deepEqual(check.problems, []);
    assert.equal(check.schedulerPath, priority);
    assert.equal(check.admission, "the priority scheduler");
    assert.deepEqual(check.capacity, { slots: 32, from: "the 3 workers' configured capacity" });
    const [fleet, large] = check.tables;
    assert.equal(fleet!.capacity, 32);
    assert.deepEqual(fleet!.reserved, { system: 2, interactive: 8, default: 4, bulk: 0 });
    assert.equal(large!.title, "the pool of large (2 workers)");
    assert.equal(large!.capacity, 16);
    assert.deepEqual(large!.reserved, { system: 2, interactive: 4, default: 2, bulk: 3 });
    assert.ok(check.notes.includes("1 tenant policy"), check.notes.join("; "));

    const text = renderConfigCheck(check);
    assert.match(text, /^sluice check-config: OK\n/);
    assert.match(text, /^the pool of large \(2 workers\), at 16 slots:$/m);
    assert.match(text, /^bulk +3 +3 +0 +1024 +300s +120s +0\.1 +no$/m);
    assert.match(text, /^reserved 11 of 16; 5 shared by every class$/m);
    for (const line of text.split("\n")) assert.ok(line.length <= 80, `${line.length} columns: ${line}`);
  });

  test("a pool override that does not fit its pool is a problem naming the pools key", async () => {
    const at = dir();
    const gateway = file(
      at,
      "gateway.yaml",
      [
        "workers:",
        "  - {url: 'http://10.0.0.1:8000', capacity: 4, models: [tiny]}",
        "pools:",
        "  tiny:",
        "    classes:",
        "      system: {reserved_floor: 0}",
        "      interactive: {reserved_floor: 8, reserved_per_slot: 0}",
        "      default: {reserved_per_slot: 0}",
        "",
      ].join("\n"),
    );
    const priority = file(
      at,
      "p.yaml",
      "classes:\n  system: {reserved_floor: 1}\n  interactive: {reserved_floor: 1}\n",
    );
    const check = await checkConfig({ configPath: gateway, schedulerPath: priority, env: {} });
    assert.equal(check.problems.length, 1, check.problems.join("\n"));
    assert.ok(
      check.problems[0]!.startsWith(
        `${gateway}: pools.tiny: classes: reservations total 8 exceed capacity 4`,
      ),
    );
    assert.match(check.problems[0]!, /lower classes\.interactive\.reserved_floor to at most 4/);
    assert.equal(check.tables[0]!.fits, true, "the fleet's own classes fit");
  });

  test("the gateway file's mistakes name the file and key; the environment counts as for the gateway", async () => {
    const at = dir();
    const bad = file(at, "gateway.yaml", "queue_sise: 10\n");
    const check = await checkConfig({ configPath: bad, capacity: 400, env: {} });
    assert.deepEqual(check.problems, [`${bad}: queue_sise: unknown key`]);

    const priority = file(at, "p.yaml", "classes:\n  bulk: {reserved_floor: 1000}\n");
    const viaEnv = await checkConfig({
      capacity: 400,
      env: {
        SLUICE_PRIORITY_SCHEDULER_CONFIG: priority,
        SLUICE_PRIORITY_SCHEDULER_ENABLED: "true",
        SLUICE_PRIORITY_SCHEDULER_STRICT: "true",
      },
    });
    assert.equal(viaEnv.schedulerPath, priority);
    assert.equal(viaEnv.problems.length, 1);
    assert.match(viaEnv.problems[0]!, new RegExp(`^${priority}: classes: reservations total`));
    assert.ok(viaEnv.notes.some((n) => n.startsWith("priority_scheduler_strict is on")));
    assert.equal(viaEnv.admission, "legacy admission (a fallback: see the problems)");
  });

  test("no capacity to go by: says how to give one, and checks the files all the same", async () => {
    const check = await checkConfig({ env: {} });
    assert.deepEqual(check.problems, []);
    assert.equal(check.capacity, undefined);
    assert.deepEqual(check.tables, []);
    assert.ok(check.notes.some((n) => n.includes("pass --capacity N")));
    const unknown = file(
      dir(),
      "g.yaml",
      "workers:\n  - {url: 'http://10.0.0.1:8000'}\n  - {url: 'http://10.0.0.2:8000', capacity: 8}\n",
    );
    const counted = await checkConfig({ configPath: unknown, env: {} });
    assert.equal(counted.capacity?.slots, 72, "a worker with no capacity counts as the gateway's 64");
    assert.ok(counted.notes.some((n) => n.startsWith("1 of 2 workers have no configured capacity")));
  });

  test("the command: exit 0 when clean, 1 with problems, 2 on a bad flag; --json is the same check", async () => {
    const at = dir();
    const fits = file(
      at,
      "fits.yaml",
      "classes:\n  system: {reserved_floor: 1}\n  interactive: {reserved_floor: 2}\n",
    );
    const clean = await runCli(
      ["check-config", "--priority-scheduler-config", fits, "--capacity", "24"],
      SLOW,
    );
    assert.equal(clean.code, 0, clean.stderr);
    assert.match(clean.stdout, /^sluice check-config: OK\n/);
    assert.match(clean.stdout, /^the fleet, at 24 slots:$/m);

    const problems = await runCli(["check-config", "--capacity", "40", "--json"], SLOW);
    assert.equal(problems.code, 1, problems.stderr);
    const json = JSON.parse(problems.stdout) as { problems: string[]; capacity: { slots: number } };
    assert.equal(json.problems.length, 1);
    assert.equal(json.capacity.slots, 40);

    const usage = await runCli(["check-config", "--capacity", "0"], SLOW);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--capacity <slots>' argument '0' is invalid/);
  });
});
