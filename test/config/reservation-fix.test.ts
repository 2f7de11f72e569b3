/**
 * The fix the fallback log suggests for reservations that do not fit: applying it makes them fit,
 * at every capacity, from the built-in classes (issue #38).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CLASSES_HIGH_TO_LOW } from "@sluice/scheduler/core/class.js";
import {
  BUILTIN_CLASS_DEFAULTS,
  type ClassSettingsTable,
  requiredReservation,
} from "@sluice/scheduler/core/config.js";
import { reservationFix } from "../../src/contracts/scheduler-fallback.js";

function applied(classes: ClassSettingsTable, fix: string): ClassSettingsTable {
  const out: Record<string, object> = { ...classes };
  for (const [, cls, key, value] of fix.matchAll(
    /classes\.(\w+)\.(reserved_floor|reserved_per_slot) to at most ([\d.]+)/g,
  )) {
    out[cls!] = { ...out[cls!], [key!]: Number(value) };
  }
  return out as unknown as ClassSettingsTable;
}

function total(classes: ClassSettingsTable, capacity: number): number {
  return CLASSES_HIGH_TO_LOW.reduce((n, cls) => n + requiredReservation(classes[cls], capacity), 0);
}

describe("reservationFix", () => {
  test("nothing to fix when the reservations fit", () => {
    assert.equal(reservationFix(BUILTIN_CLASS_DEFAULTS, 1000), "");
  });

  test("the built-in classes on every capacity from 1 to 200: the suggested values fit", () => {
    for (let capacity = 1; capacity <= 200; capacity++) {
      const fix = reservationFix(BUILTIN_CLASS_DEFAULTS, capacity);
      if (total(BUILTIN_CLASS_DEFAULTS, capacity) <= capacity) {
        assert.equal(fix, "", `capacity ${capacity}`);
        continue;
      }
      assert.match(fix, new RegExp(`for a fleet of ${capacity} `));
      const fixed = applied(BUILTIN_CLASS_DEFAULTS, fix);
      assert.ok(total(fixed, capacity) <= capacity, `capacity ${capacity}: ${fix}`);
    }
  });
});
