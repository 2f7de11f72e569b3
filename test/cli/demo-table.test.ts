/**
 * The demo's live table in an 80-column terminal: no line reaches the terminal's width (a wrapped
 * line takes two rows, and the redraw would then erase too few), long refusal lists wrap onto lines
 * of their own, and each redraw moves the cursor up exactly the lines the last frame drew.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { type DemoFrame, frameText, renderDemoTable, wrapWords } from "../../src/cli/demo-table.js";

const busy: DemoFrame = {
  elapsedSecs: 61.4,
  fleet: { capacity: 20, running: 20, queued: 143 },
  pools: [
    {
      name: "llama-3-70b",
      capacity: 4,
      running: 4,
      queued: 12,
      classes: [
        {
          cls: "default",
          completed: 123,
          running: 4,
          queued: 12,
          refused: new Map(),
          waitP50Ms: 4857.27,
          waitP99Ms: 5125,
        },
      ],
    },
    {
      name: "a-model-name-a-worker-reports-that-is-far-longer-than-any-terminal-is-wide-\u001b[2J",
      capacity: 16,
      running: 16,
      queued: 131,
      classes: [
        {
          cls: "interactive",
          completed: 994,
          running: 6,
          queued: 0,
          refused: new Map(),
          waitP50Ms: 0,
          waitP99Ms: 166,
        },
        {
          cls: "bulk",
          completed: 145_000,
          running: 2,
          queued: 131,
          refused: new Map([
            ["scheduler_queue_full", 530],
            ["tenant_budget_exhausted", 9988],
            ["scheduler_preempted", 12],
            ["scheduler_queue_timeout", 7],
          ]),
          waitP50Ms: 4646.17,
          waitP99Ms: undefined,
        },
      ],
    },
  ],
};

test("at 80 columns every line of the table is shorter than the terminal is wide", () => {
  const lines = renderDemoTable(busy, 80);
  for (const line of lines) assert.ok(line.length < 80, `${line.length} columns: ${JSON.stringify(line)}`);
  const text = lines.join("\n");
  assert.match(lines[1]!, /^model pool \/ class +completed +running +queued +refused +wait p50 +wait p99$/);
  // Counts and waits in one format: whole numbers, right-aligned under their titles.
  assert.match(text, /^ {2}default +123 +4 +12 +0 +4857 +5125$/m);
  assert.match(text, /^ {2}bulk +145000 +2 +131 +10537 +4646 +-$/m);
  // Every refusal code is shown, on lines of their own.
  for (const code of [
    "scheduler_queue_full=530",
    "tenant_budget_exhausted=9988",
    "scheduler_queue_timeout=7",
  ]) {
    assert.ok(text.includes(code), `${code} in:\n${text}`);
  }
  assert.ok(!text.includes("\u001b"), "a pool name never reaches the terminal raw");
});

test("narrow and wide terminals: lines fit; the table never shrinks below 40 columns", () => {
  for (const columns of [50, 100, 200]) {
    for (const line of renderDemoTable(busy, columns))
      assert.ok(line.length < columns, `${columns}: ${line}`);
  }
  for (const line of renderDemoTable(busy, 10)) assert.ok(line.length <= 40);
});

test("a redraw moves up exactly the lines the last frame drew, then clears below", () => {
  const first = renderDemoTable(busy, 80);
  const quiet: DemoFrame = { ...busy, pools: busy.pools.slice(0, 1) };
  const second = renderDemoTable(quiet, 80);
  assert.notEqual(first.length, second.length, "frames of different heights");

  const drawnFirst = frameText(first, 0, true);
  assert.ok(!drawnFirst.startsWith("\u001b"), "the first frame erases nothing");
  assert.equal(drawnFirst.split("\n").length - 1, first.length, "one newline per line");
  assert.ok(frameText(second, first.length, true).startsWith(`\u001b[${first.length}A\u001b[J`));
  assert.ok(frameText(first, second.length, true).startsWith(`\u001b[${second.length}A\u001b[J`));
  // Piped: plain lines, no cursor movement.
  assert.ok(!frameText(second, first.length, false).includes("\u001b"));
});

test("wrapWords breaks at spaces, indents, and cuts a word longer than the line", () => {
  assert.deepEqual(wrapWords("aa bb cc dd", 6, "  "), ["  aa", "  bb", "  cc", "  dd"]);
  assert.deepEqual(wrapWords("aa bb cc", 8), ["aa bb cc"]);
  assert.deepEqual(wrapWords("x abcdefghijkl", 6), ["x", "abcde…"]);
});
