/**
 * The Gateway API Inference Extension's request headers through the gateway, over real HTTP:
 * trusted only with --inference-gateway-headers (x-gateway-inference-fairness-id names the tenant,
 * x-gateway-inference-objective the class, still capped by the tenant's max_class); untrusted they
 * change nothing and never reach the worker; malformed values are a 400 naming the header.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DEFAULT_PRIORITY_THRESHOLDS } from "../../src/config/inference-objectives.js";
import {
  assertError,
  assertOk,
  type Fleet,
  LEVEL_WARN,
  metric,
  smallSchedulerYaml,
  startFleet,
} from "../helpers/harness.js";

const FAIRNESS = "x-gateway-inference-fairness-id";
const OBJECTIVE = "x-gateway-inference-objective";

const TRUSTED = {
  inferenceGateway: {
    objectives: new Map([
      ["premium", 100],
      ["standard", 0],
      ["batch", -10],
      ["ops", 5000],
    ]),
    classes: DEFAULT_PRIORITY_THRESHOLDS,
  },
};

function admitted(s: Awaited<ReturnType<Fleet["scrape"]>>, cls: string): number {
  return metric(s, "smg_scheduler_admit_total", { class: cls, outcome: "admitted" }) ?? 0;
}

function lastWorkerHeaders(fleet: Fleet): Record<string, string | string[] | undefined> {
  const headers = fleet.workers[0]!.stats().lastRequestHeaders;
  assert.ok(headers !== undefined, "the worker saw a request");
  return headers;
}

describe("inference gateway headers: not trusted (the default)", () => {
  test("they choose neither tenant nor class, and the worker never sees them", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml({ tenant_policies: { "fairness:team-a": { max_class: "system" } } }),
      priorityScheduler: { defaultMaxClass: "interactive" },
    });
    assertOk(await fleet.chat({}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "-5" }));
    const headers = lastWorkerHeaders(fleet);
    assert.equal(headers[FAIRNESS], undefined);
    assert.equal(headers[OBJECTIVE], undefined);
    // No x-smg-priority: the default class, not bulk from the objective's -5.
    assert.equal(headers["x-smg-priority"], "default");
    // Malformed values are not read, so not refused either.
    assertOk(await fleet.chat({}, { [FAIRNESS]: "has space", [OBJECTIVE]: "Not A Name!" }));
    const s = await fleet.scrape();
    assert.equal(admitted(s, "default"), 2);
    assert.equal(admitted(s, "bulk"), 0);
    const fairnessTenants = (s.samples.get("sluice_tenant_tokens_total") ?? []).filter((m) =>
      m.labels.tenant?.startsWith("fairness:"),
    );
    assert.deepEqual(fairnessTenants, []);
  });
});

describe("inference gateway headers: trusted", () => {
  test("the fairness id is the tenant fairness:<id>; the headers reach the worker", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml({
        tenant_policies: { "fairness:team-a": { max_class: "interactive" } },
      }),
      priorityScheduler: { defaultMaxClass: "default" },
      gateway: TRUSTED,
    });
    assertOk(await fleet.chat({}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "ops" }));
    const headers = lastWorkerHeaders(fleet);
    assert.equal(headers[FAIRNESS], "team-a");
    assert.equal(headers[OBJECTIVE], "ops");
    // ops (5000) maps to system; team-a's max_class caps it at interactive.
    assert.equal(headers["x-smg-priority"], "interactive");
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "fairness:team-a",
        requested_class: "system",
        effective_class: "interactive",
      }),
      1,
    );
  });

  test("the objective picks the class through the table, over the client's x-smg-priority", async (t) => {
    const fleet = await startFleet(t, {
      schedulerYaml: smallSchedulerYaml(),
      priorityScheduler: { defaultMaxClass: "system" },
      gateway: TRUSTED,
    });
    const cases: Array<[string, string]> = [
      ["premium", "interactive"],
      ["standard", "default"],
      ["batch", "bulk"],
      ["ops", "system"],
      ["-1", "bulk"],
      ["0", "default"],
      ["1", "interactive"],
      ["999", "interactive"],
      ["1000", "system"],
    ];
    for (const [objective, cls] of cases) {
      assertOk(await fleet.chat({}, { [OBJECTIVE]: objective, "x-smg-priority": "system" }));
      assert.equal(lastWorkerHeaders(fleet)["x-smg-priority"], cls, `objective ${objective}`);
    }
    const s = await fleet.scrape();
    assert.equal(admitted(s, "system"), 2);
    assert.equal(admitted(s, "interactive"), 3);
    assert.equal(admitted(s, "default"), 2);
    assert.equal(admitted(s, "bulk"), 2);
    assert.equal(metric(s, "sluice_inference_objective_unknown_total"), 0);
  });

  test("an objective missing from inference_objectives has priority 0 and is counted", async (t) => {
    const fleet = await startFleet(t, { priorityScheduler: { defaultMaxClass: "system" }, gateway: TRUSTED });
    assertOk(await fleet.chat({}, { [OBJECTIVE]: "no-such-objective", "x-smg-priority": "bulk" }));
    assert.equal(lastWorkerHeaders(fleet)["x-smg-priority"], "default");
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_inference_objective_unknown_total"), 1);
    assert.ok(
      fleet.logs.some((l) => l.objective === "no-such-objective" && l.level === LEVEL_WARN),
      "one warning names the objective",
    );
  });

  test("without the objective header, x-smg-priority still applies", async (t) => {
    const fleet = await startFleet(t, { priorityScheduler: { defaultMaxClass: "system" }, gateway: TRUSTED });
    assertOk(await fleet.chat({}, { [FAIRNESS]: "team-b", "x-smg-priority": "bulk" }));
    assert.equal(lastWorkerHeaders(fleet)["x-smg-priority"], "bulk");
  });

  test("an API key still wins over the fairness id", async (t) => {
    const fleet = await startFleet(t, {
      tenants: ["acme"],
      schedulerYaml: smallSchedulerYaml({ tenant_policies: { "auth:acme": { max_class: "bulk" } } }),
      priorityScheduler: { defaultMaxClass: "system" },
      gateway: TRUSTED,
    });
    assertOk(await fleet.chatAs("acme", {}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "premium" }));
    const s = await fleet.scrape();
    assert.equal(
      metric(s, "smg_scheduler_clamp_total", {
        tenant: "auth:acme",
        requested_class: "interactive",
        effective_class: "bulk",
      }),
      1,
    );
  });

  test("malformed values are 400 invalid_inference_header naming the header, before any slot", async (t) => {
    const fleet = await startFleet(t, { gateway: TRUSTED });
    const bad: Array<[Record<string, string>, string]> = [
      [{ [FAIRNESS]: "has space" }, FAIRNESS],
      [{ [FAIRNESS]: "x".repeat(254) }, FAIRNESS],
      [{ [FAIRNESS]: "caf\u00e9" }, FAIRNESS],
      [{ [OBJECTIVE]: "Premium" }, OBJECTIVE],
      [{ [OBJECTIVE]: "-batch" }, OBJECTIVE],
      [{ [OBJECTIVE]: "real time" }, OBJECTIVE],
      [{ [OBJECTIVE]: "2147483648" }, OBJECTIVE],
      [{ [OBJECTIVE]: "-2147483649" }, OBJECTIVE],
      // What Node makes of a header sent twice: the values joined by ", ".
      [{ [OBJECTIVE]: "premium, batch" }, OBJECTIVE],
      [{ [FAIRNESS]: "team-a,team-b" }, FAIRNESS],
    ];
    for (const [headers, param] of bad) {
      const reply = await fleet.chat({}, headers);
      assertError(reply, 400, "invalid_inference_header");
      const body = JSON.parse(reply.text) as { error: { param: string; message: string } };
      assert.equal(body.error.param, param);
      assert.match(body.error.message, new RegExp(`^${param}: `));
    }
    // The 32-bit bounds themselves are fine; an empty value is no header.
    assertOk(await fleet.chat({}, { [OBJECTIVE]: "2147483647" }));
    assertOk(await fleet.chat({}, { [OBJECTIVE]: "-2147483648", [FAIRNESS]: " " }));
    assert.equal(fleet.workers[0]!.stats().received, 2);
  });
});
