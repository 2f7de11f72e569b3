import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  BUILTIN_CLASS_DEFAULTS,
  CLASS_SETTING_KEYS,
  resolveClassSettings,
  TENANT_POLICY_KEYS,
  validateClassBlock,
  validateTenantPolicy,
} from "@sluice/scheduler/core/config.js";
import fc from "fast-check";
import type { z } from "zod";
import {
  classSettingsSchema,
  parseSchedulerConfig,
  parseSchedulerYaml,
  tenantPolicySchema,
} from "../../src/config/scheduler-file.js";
import { toConfigError } from "../../src/config/zod-errors.js";
import {
  ConfigError,
  createScheduler,
  ManualClock,
  ReservationsExceedCapacityError,
} from "../../src/index.js";

const SEED_EXAMPLE = `# Per-class tuning. Any class you omit keeps its built-in default.
classes:
  interactive:
    reserved_floor: 128       # always at least 128 slots
    reserved_per_slot: 0.25   # ...and 25% of capacity once the fleet is large
    queue_size: 256
    queue_timeout_secs: 30
    starvation_threshold_secs: 5
    can_preempt: true
  bulk:
    reserved_floor: 0
    queue_size: 1024
    queue_timeout_secs: 300
    starvation_threshold_secs: 120
    can_preempt: false

# Per-tenant priority ceiling. Tenants not listed use
# --priority-scheduler-default-max-class.
tenant_policies:
  "auth:acme":
    max_class: interactive
  "auth:internal-cron":
    max_class: system
`;

/** Runs `fn`, expects a ConfigError, and returns its message. */
function configErrorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected a ConfigError, nothing was thrown");
}

function yamlError(text: string): string {
  return configErrorOf(() => parseSchedulerYaml(text)).message;
}

describe("built-in defaults", () => {
  test("match the contract's table exactly (plus sluice's preempt_after_secs and starvation_max_share)", () => {
    assert.deepEqual(JSON.parse(JSON.stringify(BUILTIN_CLASS_DEFAULTS)), {
      system: {
        reserved_floor: 32,
        reserved_per_slot: 0,
        queue_size: 64,
        queue_timeout_secs: 30,
        starvation_threshold_secs: 5,
        can_preempt: true,
        preempt_after_secs: 0.25,
        starvation_max_share: 0.1,
      },
      interactive: {
        reserved_floor: 128,
        reserved_per_slot: 0.25,
        queue_size: 256,
        queue_timeout_secs: 30,
        starvation_threshold_secs: 5,
        can_preempt: true,
        preempt_after_secs: 0.25,
        starvation_max_share: 0.1,
      },
      default: {
        reserved_floor: 0,
        reserved_per_slot: 0.1,
        queue_size: 512,
        queue_timeout_secs: 60,
        starvation_threshold_secs: 30,
        can_preempt: false,
        preempt_after_secs: 0.25,
        starvation_max_share: 0.1,
      },
      bulk: {
        reserved_floor: 0,
        reserved_per_slot: 0,
        queue_size: 1024,
        queue_timeout_secs: 300,
        starvation_threshold_secs: 120,
        can_preempt: false,
        preempt_after_secs: 0.25,
        starvation_max_share: 0.1,
      },
    });
  });

  test("an empty or absent document means built-in defaults and no tenant policies", () => {
    for (const text of ["", "# nothing\n", "classes:\ntenant_policies:\n"]) {
      const parsed = parseSchedulerYaml(text);
      assert.deepEqual(parsed.classes, BUILTIN_CLASS_DEFAULTS, JSON.stringify(text));
      assert.equal(parsed.tenantPolicies.size, 0);
    }
    assert.deepEqual(parseSchedulerConfig(undefined).classes, BUILTIN_CLASS_DEFAULTS);
  });
});

describe("YAML parsing", () => {
  test("the contract's example parses to the documented settings", () => {
    const parsed = parseSchedulerYaml(SEED_EXAMPLE);
    assert.deepEqual(parsed.classes.interactive, {
      reserved_floor: 128,
      reserved_per_slot: 0.25,
      queue_size: 256,
      queue_timeout_secs: 30,
      starvation_threshold_secs: 5,
      can_preempt: true,
      preempt_after_secs: 0.25,
      starvation_max_share: 0.1,
    });
    assert.deepEqual(parsed.classes.bulk, {
      reserved_floor: 0,
      reserved_per_slot: 0,
      queue_size: 1024,
      queue_timeout_secs: 300,
      starvation_threshold_secs: 120,
      can_preempt: false,
      preempt_after_secs: 0.25,
      starvation_max_share: 0.1,
    });
    // Omitted classes keep their built-in defaults.
    assert.deepEqual(parsed.classes.system, BUILTIN_CLASS_DEFAULTS.system);
    assert.deepEqual(parsed.classes.default, BUILTIN_CLASS_DEFAULTS.default);
    assert.deepEqual(
      [...parsed.tenantPolicies.entries()],
      [
        ["auth:acme", { max_class: "interactive" }],
        ["auth:internal-cron", { max_class: "system" }],
      ],
    );
  });

  test("a partial class block keeps the other built-ins but reserved_per_slot becomes 0.0", () => {
    const parsed = parseSchedulerYaml("classes:\n  default:\n    queue_size: 5\n");
    assert.deepEqual(parsed.classes.default, {
      reserved_floor: 0,
      reserved_per_slot: 0,
      queue_size: 5,
      queue_timeout_secs: 60,
      starvation_threshold_secs: 30,
      can_preempt: false,
      preempt_after_secs: 0.25,
      starvation_max_share: 0.1,
    });
  });

  test("fractional timeouts are accepted", () => {
    const parsed = parseSchedulerYaml(
      "classes:\n  bulk:\n    queue_timeout_secs: 0.5\n    starvation_threshold_secs: 0.25\n",
    );
    assert.equal(parsed.classes.bulk.queue_timeout_secs, 0.5);
    assert.equal(parsed.classes.bulk.starvation_threshold_secs, 0.25);
  });
});

describe("validation errors name the key", () => {
  test("queue_timeout_secs must be > 0", () => {
    assert.equal(
      yamlError("classes:\n  bulk:\n    queue_timeout_secs: 0\n"),
      "classes.bulk.queue_timeout_secs: must be > 0",
    );
    assert.equal(
      yamlError("classes:\n  system:\n    queue_timeout_secs: -3\n"),
      "classes.system.queue_timeout_secs: must be > 0",
    );
  });

  test("starvation_threshold_secs must be > 0", () => {
    assert.equal(
      yamlError("classes:\n  interactive:\n    starvation_threshold_secs: 0\n"),
      "classes.interactive.starvation_threshold_secs: must be > 0",
    );
  });

  test("reserved_per_slot must be a finite number >= 0", () => {
    for (const value of ["-0.5", "lots", ".inf", "-.inf", ".nan", "true"]) {
      assert.equal(
        yamlError(`classes:\n  default:\n    reserved_per_slot: ${value}\n`),
        "classes.default.reserved_per_slot: must be a finite number >= 0",
        `reserved_per_slot: ${value}`,
      );
    }
  });

  test("integer fields reject fractions and negatives", () => {
    assert.equal(
      yamlError("classes:\n  bulk:\n    queue_size: 1.5\n"),
      "classes.bulk.queue_size: must be an integer",
    );
    assert.equal(
      yamlError("classes:\n  bulk:\n    reserved_floor: -1\n"),
      "classes.bulk.reserved_floor: must be >= 0",
    );
    assert.equal(
      yamlError("classes:\n  bulk:\n    can_preempt: yes please\n"),
      "classes.bulk.can_preempt: must be true or false",
    );
  });

  test("an unknown class name is an error naming it", () => {
    const err = configErrorOf(() => parseSchedulerYaml("classes:\n  urgent:\n    queue_size: 1\n"));
    assert.equal(err.path, "classes.urgent");
    assert.equal(
      err.message,
      "classes.urgent: unknown class (expected one of bulk, default, interactive, system)",
    );
    // Class names are lowercase only.
    assert.equal(configErrorOf(() => parseSchedulerYaml("classes:\n  Bulk: {}\n")).path, "classes.Bulk");
  });

  test("an unknown key in a class block is an error naming it", () => {
    assert.equal(
      yamlError("classes:\n  bulk:\n    queue_depth: 10\n"),
      "classes.bulk.queue_depth: unknown key",
    );
  });

  test("an unknown key in a tenant policy is an error naming it", () => {
    assert.equal(
      yamlError('tenant_policies:\n  "auth:acme":\n    priority: system\n'),
      "tenant_policies.auth:acme.priority: unknown key",
    );
  });

  test("a tenant whose key ends in 'classes' still gets an unknown-key error, not an unknown-class one", () => {
    assert.equal(
      yamlError('tenant_policies:\n  "auth:classes":\n    priority: system\n'),
      "tenant_policies.auth:classes.priority: unknown key",
    );
    assert.equal(
      yamlError("tenant_policies:\n  classes:\n    priority: system\n"),
      "tenant_policies.classes.priority: unknown key",
    );
  });

  test("an unknown top-level key is an error naming it", () => {
    assert.equal(yamlError("clases:\n  bulk: {}\n"), "clases: unknown key");
  });

  test("max_class must be a class name", () => {
    for (const value of ["urgent", "3", "SYSTEM", '""']) {
      assert.equal(
        yamlError(`tenant_policies:\n  "auth:acme":\n    max_class: ${value}\n`),
        "tenant_policies.auth:acme.max_class: must be one of bulk, default, interactive, system",
        `max_class: ${value}`,
      );
    }
  });

  test("weight must be > 0", () => {
    assert.equal(
      yamlError('tenant_policies:\n  "auth:acme":\n    weight: 0\n'),
      "tenant_policies.auth:acme.weight: must be > 0",
    );
  });

  test("a document that is not a mapping, or not YAML, is rejected", () => {
    assert.equal(yamlError("- 1\n- 2\n"), "the priority scheduler config must be a YAML mapping");
    assert.match(yamlError("classes: [\n"), /^invalid YAML: /);
  });

  test("createScheduler validates class overrides and tenant policies the same way", () => {
    const clock = new ManualClock();
    assert.equal(
      configErrorOf(() =>
        createScheduler({ capacity: 500, clock, classes: { bulk: { queue_timeout_secs: 0 } } }),
      ).message,
      "classes.bulk.queue_timeout_secs: must be > 0",
    );
    assert.equal(
      configErrorOf(() =>
        createScheduler({ capacity: 500, clock, tenantPolicies: { t: { max_class: "urgent" as "system" } } }),
      ).message,
      "tenant_policies.t.max_class: must be one of bulk, default, interactive, system",
    );
    assert.equal(configErrorOf(() => createScheduler({ capacity: -1, clock })).path, "capacity");
    assert.equal(configErrorOf(() => createScheduler({ capacity: 200.5, clock })).path, "capacity");
  });
});

describe("reservations against capacity at startup", () => {
  /** The contract's formula with the built-in defaults. */
  function defaultReservations(capacity: number): number {
    return 32 + Math.max(128, Math.ceil(0.25 * capacity)) + Math.ceil(0.1 * capacity);
  }

  test("defaults at capacity 100 throw ReservationsExceedCapacityError naming the numbers", () => {
    const err = configErrorOf(() => createScheduler({ capacity: 100, clock: new ManualClock() }));
    assert.ok(err instanceof ReservationsExceedCapacityError);
    assert.equal(err.reserved, 170);
    assert.equal(err.capacity, 100);
    assert.equal(err.path, "classes");
    assert.equal(
      err.message,
      "classes: reservations total 170 exceed capacity 100 (system 32, interactive 128, default 10, bulk 0)",
    );
  });

  test("system floor 4 + interactive 128 + default 10 = 142 against capacity 100 throws", () => {
    const err = configErrorOf(() =>
      createScheduler({
        capacity: 100,
        clock: new ManualClock(),
        classes: { system: { reserved_floor: 4 } },
      }),
    );
    assert.ok(err instanceof ReservationsExceedCapacityError);
    assert.equal(err.reserved, 142);
    assert.match(
      err.message,
      /reservations total 142 exceed capacity 100 \(system 4, interactive 128, default 10, bulk 0\)/,
    );
  });

  test("defaults build exactly when the reservations fit: from capacity 178 on (171..177 still throw)", () => {
    // default's share grows with capacity: at 171 it is ceil(17.1) = 18, so 32 + 128 + 18 = 178 > 171.
    for (const capacity of [170, 171, 177]) {
      const err = configErrorOf(() => createScheduler({ capacity, clock: new ManualClock() }));
      assert.ok(err instanceof ReservationsExceedCapacityError, `capacity ${capacity}`);
      assert.equal((err as ReservationsExceedCapacityError).reserved, defaultReservations(capacity));
    }
    for (const capacity of [178, 179, 256, 512, 513, 1000, 10_000]) {
      const s = createScheduler({ capacity, clock: new ManualClock() });
      assert.equal(s.capacity, capacity);
    }
    // Exhaustively: builds iff the formula fits.
    for (let capacity = 0; capacity <= 700; capacity++) {
      let built = true;
      try {
        createScheduler({ capacity, clock: new ManualClock() });
      } catch {
        built = false;
      }
      assert.equal(built, defaultReservations(capacity) <= capacity, `capacity ${capacity}`);
    }
  });

  test("reservations that exactly fill capacity are allowed", () => {
    const s = createScheduler({
      capacity: 10,
      clock: new ManualClock(),
      classes: { system: { reserved_floor: 4 }, interactive: { reserved_floor: 6 }, default: {} },
    });
    const snap = s.snapshot();
    assert.deepEqual(
      [snap.classes.system.reserved, snap.classes.interactive.reserved, snap.classes.default.reserved],
      [4, 6, 0],
    );
  });
});

describe("the core's validation and the file schemas agree", () => {
  /** The message of what `fn` throws, or the value it returns. */
  function outcome(fn: () => unknown): { error: string } | { value: unknown } {
    try {
      return { value: fn() };
    } catch (err) {
      assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
      return { error: err.message };
    }
  }
  function viaSchema(schema: z.ZodType, raw: unknown, prefix: string): unknown {
    const parsed = schema.safeParse(raw);
    if (!parsed.success) throw toConfigError(parsed.error, prefix);
    return parsed.data;
  }

  const anyValue = fc.oneof(
    fc.integer({ min: -3, max: 3 }),
    fc.double(),
    fc.constantFrom(0.5, -0.5, 1e9, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
    fc.boolean(),
    fc.constantFrom("day", "month", "bulk", "system", "urgent", "", "Mon-Fri 08:00-20:00 UTC", "08:00"),
    fc.constant(null),
    fc.array(fc.oneof(fc.string(), fc.integer(), fc.constant("Sat-Sun 00:00-24:00 UTC")), { maxLength: 2 }),
    fc.constant({}),
  );
  const block = (keys: readonly string[]) =>
    fc.oneof(
      fc.dictionary(fc.constantFrom(...keys, "queue_depth", "priority"), anyValue, { maxKeys: 4 }),
      anyValue,
    );

  test("a class block gets the same verdict from both", () => {
    fc.assert(
      fc.property(block(CLASS_SETTING_KEYS), (raw) => {
        assert.deepEqual(
          outcome(() => validateClassBlock(raw, "classes.bulk")),
          outcome(() => viaSchema(classSettingsSchema, raw, "classes.bulk")),
        );
      }),
      { numRuns: 2000 },
    );
  });

  test("a tenant policy gets the same verdict from both", () => {
    fc.assert(
      fc.property(block(TENANT_POLICY_KEYS), (raw) => {
        assert.deepEqual(
          outcome(() => validateTenantPolicy(raw, "tenant_policies.auth:a")),
          outcome(() =>
            viaSchema(
              tenantPolicySchema.nullish().transform((p) => p ?? {}),
              raw,
              "tenant_policies.auth:a",
            ),
          ),
        );
      }),
      { numRuns: 2000 },
    );
  });

  test("createScheduler reports a bad value like the YAML does", () => {
    const cases: Array<[string, Record<string, unknown>]> = [
      ["classes:\n  bulk:\n    queue_size: 1.5\n", { classes: { bulk: { queue_size: 1.5 } } }],
      ["classes:\n  bulk: 5\n", { classes: { bulk: 5 } }],
      ["classes:\n  urgent: {}\n", { classes: { urgent: {} } }],
      ['tenant_policies:\n  "auth:a":\n    weight: -1\n', { tenantPolicies: { "auth:a": { weight: -1 } } }],
      ['tenant_policies:\n  "auth:a":\n    models: [1]\n', { tenantPolicies: { "auth:a": { models: [1] } } }],
      ['tenant_policies:\n  "auth:a": 3\n', { tenantPolicies: { "auth:a": 3 } }],
    ];
    for (const [yaml, options] of cases) {
      assert.equal(
        configErrorOf(() => createScheduler({ capacity: 500, clock: new ManualClock(), ...options })).message,
        yamlError(yaml),
        yaml,
      );
    }
  });

  test("a complete settings table resolves to itself, and is still checked", () => {
    assert.deepEqual(resolveClassSettings(BUILTIN_CLASS_DEFAULTS), BUILTIN_CLASS_DEFAULTS);
    const bad = {
      ...BUILTIN_CLASS_DEFAULTS,
      bulk: { ...BUILTIN_CLASS_DEFAULTS.bulk, queue_timeout_secs: 0 },
    };
    assert.equal(
      configErrorOf(() => createScheduler({ capacity: 500, clock: new ManualClock(), classes: bad })).message,
      "classes.bulk.queue_timeout_secs: must be > 0",
    );
  });
});
