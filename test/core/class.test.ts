import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { clamp, PRIORITY_CLASSES, type PriorityClass, parsePriority } from "@sluice/scheduler/core/class.js";

describe("parsePriority", () => {
  test("exact lowercase names parse to themselves and are not unknown", () => {
    for (const cls of PRIORITY_CLASSES) assert.deepEqual(parsePriority(cls), { class: cls, unknown: false });
  });

  test("is case-insensitive and trims surrounding whitespace", () => {
    assert.deepEqual(parsePriority(" INTERACTIVE "), { class: "interactive", unknown: false });
    assert.deepEqual(parsePriority("Bulk"), { class: "bulk", unknown: false });
    assert.deepEqual(parsePriority("SyStEm"), { class: "system", unknown: false });
    assert.deepEqual(parsePriority("\tDefault\n"), { class: "default", unknown: false });
  });

  test("a missing header is default and not counted as unknown", () => {
    assert.deepEqual(parsePriority(undefined), { class: "default", unknown: false });
    assert.deepEqual(parsePriority(null), { class: "default", unknown: false });
  });

  test("empty and unrecognised values degrade to default and are reported unknown", () => {
    for (const raw of ["", "   ", "urgent", "high", "system!", "inter active", "bulk,system"]) {
      assert.deepEqual(
        parsePriority(raw),
        { class: "default", unknown: true },
        `value ${JSON.stringify(raw)}`,
      );
    }
  });
});

describe("clamp", () => {
  const rank: Record<PriorityClass, number> = { bulk: 0, default: 1, interactive: 2, system: 3 };

  test("effective class is min(requested, ceiling) for every pair", () => {
    for (const requested of PRIORITY_CLASSES) {
      for (const ceiling of PRIORITY_CLASSES) {
        const expected = rank[requested] <= rank[ceiling] ? requested : ceiling;
        assert.equal(clamp(requested, ceiling), expected, `${requested} under ${ceiling}`);
      }
    }
  });

  test("moves a request down, never up", () => {
    assert.equal(clamp("system", "default"), "default");
    assert.equal(clamp("interactive", "bulk"), "bulk");
    assert.equal(clamp("bulk", "system"), "bulk");
    assert.equal(clamp("default", "interactive"), "default");
  });
});
