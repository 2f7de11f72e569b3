import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { inWindow, parseAccessWindow } from "@sluice/scheduler/core/access-window.js";
import { ConfigError } from "@sluice/scheduler/core/errors.js";
import { parseSchedulerYaml } from "../../src/config/scheduler-file.js";

// January 2026: the 1st is a Thursday, so Mon 5, Thu 8, Fri 9, Sat 10, Sun 11, Mon 12.
const MON = 5;
const THU = 8;
const FRI = 9;
const SAT = 10;
const SUN = 11;

function at(day: number, hh: number, mm = 0, ss = 0, ms = 0): number {
  return Date.UTC(2026, 0, day, hh, mm, ss, ms);
}

function isIn(text: string, epochMs: number): boolean {
  return inWindow(parseAccessWindow(text), epochMs);
}

function parseError(text: string): string {
  try {
    parseAccessWindow(text);
  } catch (err) {
    assert.ok(err instanceof Error);
    return err.message;
  }
  assert.fail(`expected "${text}" to be rejected`);
}

describe("the calendar the tests rely on", () => {
  test("January 2026 weekdays", () => {
    assert.equal(new Date(at(MON, 12)).getUTCDay(), 1);
    assert.equal(new Date(at(THU, 12)).getUTCDay(), 4);
    assert.equal(new Date(at(FRI, 12)).getUTCDay(), 5);
    assert.equal(new Date(at(SAT, 12)).getUTCDay(), 6);
    assert.equal(new Date(at(SUN, 12)).getUTCDay(), 0);
  });
});

describe("parseAccessWindow", () => {
  test("compiles days and minutes", () => {
    const w = parseAccessWindow("Mon-Fri 08:00-20:00 UTC");
    assert.equal(w.text, "Mon-Fri 08:00-20:00 UTC");
    assert.deepEqual(w.days, [false, true, true, true, true, true, false]);
    assert.equal(w.startMin, 480);
    assert.equal(w.endMin, 1200);
  });

  test("a day range that wraps past Sunday", () => {
    assert.deepEqual(parseAccessWindow("Sat-Mon 09:00-17:00 UTC").days, [
      true,
      true,
      false,
      false,
      false,
      false,
      true,
    ]);
  });

  test("a list of days, case and spacing are free", () => {
    const w = parseAccessWindow("  mon,WED,Fri   9:30-17:45  utc ");
    assert.deepEqual(w.days, [false, true, false, true, false, true, false]);
    assert.equal(w.startMin, 570);
    assert.equal(w.endMin, 1065);
  });

  test("24:00 ends at midnight", () => {
    const w = parseAccessWindow("Mon-Sun 00:00-24:00 UTC");
    assert.deepEqual(w.days, [true, true, true, true, true, true, true]);
    assert.equal(w.startMin, 0);
    assert.equal(w.endMin, 1440);
  });
});

describe("inWindow: Mon-Fri 08:00-20:00 UTC", () => {
  const text = "Mon-Fri 08:00-20:00 UTC";

  test("08:00 is inside, the minute before is not", () => {
    assert.equal(isIn(text, at(MON, 8, 0)), true);
    assert.equal(isIn(text, at(MON, 7, 59, 59, 999)), false);
  });

  test("20:00 is outside, the instant before is inside", () => {
    assert.equal(isIn(text, at(FRI, 19, 59, 59, 999)), true);
    assert.equal(isIn(text, at(FRI, 20, 0)), false);
  });

  test("midday on every weekday is inside", () => {
    for (const d of [MON, MON + 1, MON + 2, THU, FRI]) assert.equal(isIn(text, at(d, 12)), true, `day ${d}`);
  });

  test("the weekend is outside at any hour", () => {
    for (const d of [SAT, SUN]) {
      for (const h of [0, 8, 12, 19]) assert.equal(isIn(text, at(d, h)), false, `day ${d} ${h}:00`);
    }
  });
});

describe("inWindow: single day Sat 10:00-14:00 UTC", () => {
  const text = "Sat 10:00-14:00 UTC";

  test("inside only on Saturday between the bounds", () => {
    assert.equal(isIn(text, at(SAT, 10)), true);
    assert.equal(isIn(text, at(SAT, 13, 59)), true);
    assert.equal(isIn(text, at(SAT, 14)), false);
    assert.equal(isIn(text, at(SAT, 9, 59)), false);
    assert.equal(isIn(text, at(FRI, 12)), false);
    assert.equal(isIn(text, at(SUN, 12)), false);
  });
});

describe("inWindow: overnight Fri 22:00-02:00 UTC", () => {
  const text = "Fri 22:00-02:00 UTC";

  test("the evening part belongs to Friday", () => {
    assert.equal(isIn(text, at(FRI, 22)), true);
    assert.equal(isIn(text, at(FRI, 23)), true);
    assert.equal(isIn(text, at(FRI, 21, 59)), false);
  });

  test("the morning part is Saturday until 02:00", () => {
    assert.equal(isIn(text, at(SAT, 0)), true);
    assert.equal(isIn(text, at(SAT, 1)), true);
    assert.equal(isIn(text, at(SAT, 1, 59)), true);
    assert.equal(isIn(text, at(SAT, 2)), false);
    assert.equal(isIn(text, at(SAT, 3)), false);
  });

  test("other days are outside", () => {
    assert.equal(isIn(text, at(THU, 23)), false);
    assert.equal(isIn(text, at(FRI, 1)), false, "Friday morning belongs to Thursday's (absent) window");
    assert.equal(isIn(text, at(SAT, 23)), false);
    assert.equal(isIn(text, at(SUN, 1)), false);
  });
});

describe("inWindow: always and wrapping ranges", () => {
  test("Mon-Sun 00:00-24:00 UTC is always inside", () => {
    const w = parseAccessWindow("Mon-Sun 00:00-24:00 UTC");
    for (let d = MON; d <= SUN; d++) {
      for (const [h, m] of [
        [0, 0],
        [11, 30],
        [23, 59],
      ] as const) {
        assert.equal(inWindow(w, at(d, h, m)), true, `day ${d} ${h}:${m}`);
      }
      assert.equal(inWindow(w, at(d, 23, 59, 59, 999)), true);
    }
  });

  test("Sat-Mon covers the weekend and Monday, not Tuesday or Friday", () => {
    const text = "Sat-Mon 09:00-17:00 UTC";
    assert.equal(isIn(text, at(SAT, 9)), true);
    assert.equal(isIn(text, at(SUN, 12)), true);
    assert.equal(isIn(text, at(MON + 7, 16, 59)), true);
    assert.equal(isIn(text, at(MON + 8, 12)), false);
    assert.equal(isIn(text, at(FRI, 12)), false);
    assert.equal(isIn(text, at(SUN, 17)), false);
  });

  test("an overnight window on Sunday runs into Monday", () => {
    const text = "Sun 23:00-01:00 UTC";
    assert.equal(isIn(text, at(SUN, 23, 30)), true);
    assert.equal(isIn(text, at(MON + 7, 0, 30)), true);
    assert.equal(isIn(text, at(MON + 8, 0, 30)), false);
    assert.equal(isIn(text, at(SUN, 0, 30)), false);
  });
});

describe("parseAccessWindow errors", () => {
  test("a zone other than UTC", () => {
    assert.match(parseError("Mon-Fri 08:00-20:00 CET"), /only UTC windows are supported/);
    assert.match(parseError("Mon-Fri 08:00-20:00 Europe/Paris"), /only UTC/);
  });

  test("an unknown day", () => {
    assert.match(parseError("Mon-Fry 08:00-20:00 UTC"), /unknown day "Fry"/);
    assert.match(parseError("Mo 08:00-20:00 UTC"), /unknown day "Mo"/);
    assert.match(parseError("-Fri 08:00-20:00 UTC"), /unknown day ""/);
  });

  test("a time that is not a time of day", () => {
    assert.match(parseError("Mon 08:00-25:00 UTC"), /"25:00" is not a time of day/);
    assert.match(parseError("Mon 08:60-20:00 UTC"), /"08:60" is not a time of day/);
    assert.match(parseError("Mon 08:00-24:30 UTC"), /"24:30" is not a time of day/);
    assert.match(parseError("Mon 8h-20:00 UTC"), /"8h" is not a time \(use HH:MM\)/);
  });

  test("a day range with more than two ends", () => {
    assert.match(
      parseError("Mon-Tue-Wed 08:00-20:00 UTC"),
      /"Mon-Tue-Wed" is not a day or a day range such as Mon-Fri/,
    );
    assert.match(parseError("Mon,Wed-Thu-Fri 08:00-20:00 UTC"), /"Wed-Thu-Fri" is not a day or a day range/);
  });

  test("a window starting at 24:00", () => {
    assert.match(parseError("Mon 24:00-00:00 UTC"), /a window cannot start at 24:00 \(use 00:00\)/);
    assert.match(parseError("Mon 24:00-08:00 UTC"), /a window cannot start at 24:00/);
  });

  test("an empty window", () => {
    assert.match(parseError("Mon 08:00-08:00 UTC"), /the window is empty/);
    assert.match(parseError("Mon 00:00-00:00 UTC"), /the window is empty/);
  });

  test("the wrong shape", () => {
    assert.match(parseError(""), /must look like "Mon-Fri 08:00-20:00 UTC"/);
    assert.match(parseError("Mon-Fri 08:00-20:00"), /must look like/);
    assert.match(parseError("Mon-Fri 08:00 - 20:00 UTC"), /must look like/);
    assert.match(parseError("Mon-Fri 08:00-12:00-20:00 UTC"), /time range must look like 08:00-20:00/);
    assert.match(parseError("Mon-Fri 08:00 UTC"), /time range must look like/);
  });
});

describe("access_windows in the scheduler config", () => {
  function yamlError(text: string): ConfigError {
    try {
      parseSchedulerYaml(text);
    } catch (err) {
      assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
      return err;
    }
    assert.fail("expected a ConfigError");
  }

  test("valid windows load", () => {
    const cfg = parseSchedulerYaml(
      [
        "tenant_policies:",
        '  "auth:acme":',
        '    access_windows: ["Mon-Fri 08:00-20:00 UTC", "Sat 10:00-14:00 UTC"]',
      ].join("\n"),
    );
    assert.deepEqual(cfg.tenantPolicies.get("auth:acme")?.access_windows, [
      "Mon-Fri 08:00-20:00 UTC",
      "Sat 10:00-14:00 UTC",
    ]);
  });

  test("a bad window names its index", () => {
    const err = yamlError(
      [
        "tenant_policies:",
        '  "auth:acme":',
        "    access_windows:",
        '      - "Mon-Fri 08:00-20:00 UTC"',
        '      - "Sat 10:00-25:00 UTC"',
      ].join("\n"),
    );
    assert.equal(err.path, "tenant_policies.auth:acme.access_windows.1");
    assert.equal(err.message, 'tenant_policies.auth:acme.access_windows.1: "25:00" is not a time of day');
  });

  test("a non-UTC window", () => {
    const err = yamlError('tenant_policies:\n  "auth:acme":\n    access_windows: ["Mon 08:00-20:00 PST"]\n');
    assert.equal(err.path, "tenant_policies.auth:acme.access_windows.0");
    assert.match(
      err.message,
      /^tenant_policies\.auth:acme\.access_windows\.0: .*only UTC windows are supported$/,
    );
  });

  test("a window that is not a string, and windows that are not a list", () => {
    const notString = yamlError('tenant_policies:\n  "auth:acme":\n    access_windows: [42]\n');
    assert.equal(notString.path, "tenant_policies.auth:acme.access_windows.0");
    assert.match(notString.message, /must be a window such as "Mon-Fri 08:00-20:00 UTC"$/);
    const notList = yamlError(
      'tenant_policies:\n  "auth:acme":\n    access_windows: "Mon 08:00-20:00 UTC"\n',
    );
    assert.equal(notList.path, "tenant_policies.auth:acme.access_windows");
    assert.match(notList.message, /must be a list of windows$/);
  });

  test("the other budget keys name themselves", () => {
    const cases: [string, string, RegExp][] = [
      ["tokens_per_minute: 0", "tokens_per_minute", /must be > 0$/],
      ["budget_tokens: -1", "budget_tokens", /must be >= 0$/],
      ['budget_cost_usd: "ten"', "budget_cost_usd", /must be a number$/],
      ["budget_period: week", "budget_period", /must be day or month$/],
      ['models: "llama"', "models", /must be a list of model names$/],
      ["active: maybe", "active", /must be true or false$/],
    ];
    for (const [line, key, reason] of cases) {
      const err = yamlError(`tenant_policies:\n  "auth:acme":\n    ${line}\n`);
      assert.equal(err.path, `tenant_policies.auth:acme.${key}`, line);
      assert.match(err.message, reason, line);
    }
  });
});
