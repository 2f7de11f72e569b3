/**
 * `--priority-scheduler-strict`: a fallback to legacy admission stops the start, exit 2, with one
 * stderr line naming the file and the key (issue #38).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { startMockWorker } from "../../src/mock-worker/index.js";
import { runCli } from "../helpers/cli-process.js";
import { writeTempFile } from "../helpers/harness.js";

async function twoWorkersOf16(t: { after(fn: () => Promise<void>): void }): Promise<string[]> {
  const workers = [
    await startMockWorker({ maxRunningRequests: 16 }),
    await startMockWorker({ maxRunningRequests: 16 }),
  ];
  t.after(async () => {
    for (const w of workers) await w.close();
  });
  return workers.map((w) => w.url);
}

function oneLine(stderr: string): string {
  const lines = stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one stderr line, got: ${JSON.stringify(stderr)}`);
  return lines[0]!;
}

const BASE = ["--host", "127.0.0.1", "--port", "0", "--ledger", "off", "--priority-scheduler-enabled"];

describe("--priority-scheduler-strict", () => {
  test("built-in reservations over two workers of 16: exit 2, the line names the classes and the fix", async (t) => {
    const urls = await twoWorkersOf16(t);
    const run = await runCli([...BASE, "--worker-urls", ...urls, "--priority-scheduler-strict"]);
    assert.equal(run.code, 2, run.stderr);
    const line = oneLine(run.stderr);
    assert.match(line, /built-in classes/);
    assert.match(line, /reservations total \d+ exceed capacity 32/);
    assert.match(line, /lower classes\.interactive\.reserved_floor/);
    assert.match(line, /priority_scheduler_strict/);
  });

  test("a priority YAML with a mistyped key: exit 2, the line names file, line and key", async (t) => {
    const urls = await twoWorkersOf16(t);
    const file = await writeTempFile(t, "priority.yaml", "classes:\n  default:\n    queue_sise: 5\n");
    const run = await runCli([
      ...BASE,
      "--worker-urls",
      ...urls,
      "--priority-scheduler-config",
      file,
      "--priority-scheduler-strict",
    ]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(
      oneLine(run.stderr),
      /priority\.yaml:3: classes\.default\.queue_sise: unknown key \(did you mean queue_size\?\)/,
    );
  });

  test("a missing priority YAML: exit 2, the line names the path", async (t) => {
    const urls = await twoWorkersOf16(t);
    const run = await runCli([
      ...BASE,
      "--worker-urls",
      ...urls,
      "--priority-scheduler-config",
      "/nonexistent/sluice-priority.yaml",
      "--priority-scheduler-strict",
    ]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(oneLine(run.stderr), /\/nonexistent\/sluice-priority\.yaml: ENOENT/);
  });
});
