/**
 * Model pools through the gateway, over real mock workers that serve different models (and refuse,
 * like vLLM, a model they do not serve): pools form from what workers report, routing never
 * crosses pools, a flood of one model leaves another's admissions unchanged, 404 model_not_found,
 * a pool's last worker leaving while requests queue, admin pins per pool, pools re-forming when a
 * worker changes its model, the union at GET /v1/models, and the contract's series as fleet totals.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ManualClock } from "@sluice/scheduler/core/clock.js";
import { formPools } from "../../src/gateway/fleet/pool-formation.js";
import {
  assertError,
  assertOk,
  HEALTH_INTERVAL_MS,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const BIG = "llama-70b";
const SMALL = "llama-8b";

describe("pool formation (pure)", () => {
  test("models that share a worker share a pool; a pool is named by its first model", () => {
    const pools = formPools([
      { kind: "models", models: ["b", "b-lora"] },
      { kind: "models", models: ["a"] },
      { kind: "models", models: ["b-lora", "c"] },
      { kind: "unknown" },
      { kind: "any" },
      { kind: "models", models: ["a"] },
    ]);
    assert.deepEqual(pools, [
      { name: "*", models: [], workers: [4] },
      { name: "a", models: ["a"], workers: [1, 5] },
      { name: "b", models: ["b", "b-lora", "c"], workers: [0, 2] },
    ]);
  });

  test("workers that have not answered are in no pool", () => {
    assert.deepEqual(formPools([{ kind: "unknown" }, { kind: "unknown" }]), []);
  });
});

/** Two pools: one slow worker for the big model (2 slots), one fast one for the small (4 slots). */
async function twoPools(t: Parameters<typeof startFleet>[0], extra: Parameters<typeof startFleet>[1] = {}) {
  return startFleet(t, {
    workers: [
      { model: BIG, strictModels: true, maxRunningRequests: 2 },
      { model: SMALL, strictModels: true, maxRunningRequests: 4 },
    ],
    schedulerYaml: smallSchedulerYaml(),
    adminToken: "admin-secret",
    ...extra,
  });
}

describe("gateway model pools", () => {
  test("two pools form from /v1/models; each request reaches only a worker of its model", async (t) => {
    const fleet = await twoPools(t);
    const pools = fleet.gateway.pools.all;
    assert.deepEqual(
      pools.map((p) => [p.name, p.models, p.capacity.capacity]),
      [
        [BIG, [BIG], 2],
        [SMALL, [SMALL], 4],
      ],
    );
    for (let i = 0; i < 6; i++) {
      assertOk(await fleet.chat({ model: i % 2 === 0 ? BIG : SMALL }));
    }
    assert.deepEqual(fleet.workers[0]!.stats().requestsByModel, { [BIG]: 3 });
    assert.deepEqual(fleet.workers[1]!.stats().requestsByModel, { [SMALL]: 3 });
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_pool_capacity", { model: BIG }), 2);
    assert.equal(metric(s, "sluice_pool_capacity", { model: SMALL }), 4);
    assert.equal(metric(s, "sluice_pool_served_model", { model: SMALL, served: SMALL }), 1);
    // The contract's series are fleet totals: 3 admissions of each model, one fleet capacity.
    assert.equal(metric(s, "sluice_capacity"), 6);
    assert.equal(
      metric(s, "sluice_pool_admissions_total", { model: BIG, class: "default", outcome: "admitted" }),
      3,
    );
    const models = JSON.parse((await fleet.send("/v1/models")).text) as { data: Array<{ id: string }> };
    assert.deepEqual(
      models.data.map((m) => m.id),
      [BIG, SMALL],
    );
  });

  test("a flood of one model leaves the other's admissions unchanged", async (t) => {
    const fleet = await twoPools(t);
    // Fill the big pool and its queue: 2 run (held), 6 wait.
    const held = Array.from({ length: 8 }, () =>
      fleet.hold({ model: BIG, max_tokens: 4 }, { "x-mock-ttft-ms": "60000" }),
    );
    t.after(() => Promise.all(held.map((h) => h.cancel())));
    await waitFor(
      () => fleet.gateway.pools.find(BIG)!.admission.snapshot().queued === 6,
      "the big pool queues",
    );
    // The small pool admits at once, every time, as if the flood were not there.
    for (let i = 0; i < 8; i++) {
      const reply = await fleet.chat({ model: SMALL });
      assertOk(reply);
      assert.equal(reply.headers["x-sluice-admission"], "fast");
      assert.equal(Number(reply.headers["x-sluice-queue-wait-ms"] ?? 0), 0);
    }
    const small = fleet.gateway.pools.find(SMALL)!.admission.snapshot();
    assert.equal(small.queued, 0);
    // Fleet totals: in flight 2 (big), queued 6 (big).
    const fleetSnap = fleet.snapshot();
    assert.equal(fleetSnap.inflight, 2);
    assert.equal(fleetSnap.queued, 6);
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_pool_queued", { model: BIG }), 6);
    assert.equal(metric(s, "sluice_pool_queued", { model: SMALL }), 0);
    assert.equal(
      fleet.workers[1]!.stats().requestsByModel[BIG],
      undefined,
      "no big request on the small worker",
    );
  });

  test("a model no worker serves: 404 model_not_found in the OpenAI shape; no model: 400 param model", async (t) => {
    const fleet = await twoPools(t);
    const missing = await fleet.chat({ model: "gpt-nope" });
    assertError(missing, 404, "model_not_found");
    const body = JSON.parse(missing.text) as { error: { param: string; message: string } };
    assert.equal(body.error.param, "model");
    assert.match(body.error.message, /gpt-nope/);
    const none = await fleet.send("/v1/chat/completions", {
      method: "POST",
      body: { messages: [{ role: "user", content: "hi" }] },
    });
    assertError(none, 400, "invalid_request_body");
    assert.equal((JSON.parse(none.text) as { error: { param: string } }).error.param, "model");
    assert.equal(fleet.workers[0]!.stats().totalRequests + fleet.workers[1]!.stats().totalRequests, 0);
    assert.equal(fleet.snapshot().inflight, 0);
  });

  test("default_model takes a request that names no model", async (t) => {
    const fleet = await twoPools(t, { gateway: { defaultModel: SMALL } });
    const reply = await fleet.send("/v1/chat/completions", {
      method: "POST",
      body: { messages: [{ role: "user", content: "hi" }], max_tokens: 2 },
    });
    assertOk(reply);
    assert.equal(fleet.workers[1]!.stats().totalRequests, 1);
  });

  test("a worker serving aliases puts them in one pool; each alias reaches only a worker serving it", async (t) => {
    const fleet = await startFleet(t, {
      workers: [
        { model: "base", servedModels: ["base", "base-lora"], strictModels: true, maxRunningRequests: 3 },
        { model: "base", strictModels: true, maxRunningRequests: 5 },
      ],
      schedulerYaml: smallSchedulerYaml(),
    });
    const pools = fleet.gateway.pools.all;
    assert.deepEqual(
      pools.map((p) => [p.name, p.models, p.capacity.capacity]),
      [["base", ["base", "base-lora"], 8]],
    );
    for (let i = 0; i < 6; i++) assertOk(await fleet.chat({ model: "base-lora" }));
    assert.equal(fleet.workers[0]!.stats().requestsByModel["base-lora"], 6);
    assert.equal(fleet.workers[1]!.stats().totalRequests, 0);
  });

  test("the pool's last worker leaves: new requests get 503 at once, queued ones at their timeout; the other pool serves on", async (t) => {
    const clock = new ManualClock();
    const fleet = await twoPools(t, {
      gateway: { clock },
      schedulerYaml: smallSchedulerYaml({ classes: { default: { queue_timeout_secs: 120 } } }),
    });
    const running = [0, 1].map(() => fleet.hold({ model: BIG }, { "x-mock-ttft-ms": "60000" }));
    const queued = [0, 1, 2].map(() => fleet.hold({ model: BIG }));
    t.after(() => Promise.all([...running, ...queued].map((h) => h.cancel())));
    await waitFor(() => fleet.gateway.pools.find(BIG)!.admission.snapshot().queued === 3, "three queue");
    fleet.workers[0]!.setHealthy(false);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(
      () => fleet.gateway.pools.find(BIG)!.workers.healthy.length === 0,
      "the big pool lost its worker",
    );
    assertError(await fleet.chat({ model: BIG }), 503, "no_healthy_workers");
    assertOk(await fleet.chat({ model: SMALL }));
    // The queued ones wait for a worker to come back, then get the 503 at their queue timeout
    // (120 s, of which the health round took 60).
    clock.advance(59_000);
    assert.equal(fleet.gateway.pools.find(BIG)!.admission.snapshot().queued, 3);
    clock.advance(1_001);
    for (const h of queued) {
      const reply = await h.result;
      assert.ok(!(reply instanceof Error), String(reply));
      assertError(reply, 503, "no_healthy_workers");
    }
    assert.equal(fleet.workers[1]!.stats().requestsByModel[BIG], undefined, "never sent to the other pool");
  });

  test("a worker that changes its model moves to another pool without a restart", async (t) => {
    const clock = new ManualClock();
    const fleet = await twoPools(t, { gateway: { clock } });
    fleet.workers[1]!.setServedModels(["mistral-7b"]);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(() => fleet.gateway.pools.find("mistral-7b") !== undefined, "the new pool formed");
    assertOk(await fleet.chat({ model: "mistral-7b" }));
    // The old model had a pool: 503 (it may come back), not 404.
    assertError(await fleet.chat({ model: SMALL }), 503, "no_healthy_workers");
    const models = JSON.parse((await fleet.send("/v1/models")).text) as { data: Array<{ id: string }> };
    assert.deepEqual(
      models.data.map((m) => m.id),
      [BIG, "mistral-7b"],
    );
    // A model joining a pool (an adapter named before the base) keeps the pool, its name and queue.
    fleet.workers[0]!.setServedModels([BIG, "a-adapter"]);
    clock.advance(HEALTH_INTERVAL_MS);
    await waitFor(() => fleet.gateway.pools.find("a-adapter") !== undefined, "the adapter joined");
    assert.equal(fleet.gateway.pools.find("a-adapter")!.name, BIG);
    assert.deepEqual(fleet.gateway.pools.find(BIG)!.models, ["a-adapter", BIG]);
  });

  test("a worker without /v1/models is pooled by the served_model_name of /get_server_info", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ model: "sglang-native", modelsEndpoint: false, strictModels: true }, { model: SMALL }],
      schedulerYaml: smallSchedulerYaml(),
    });
    assert.deepEqual(
      fleet.gateway.pools.all.map((p) => p.name),
      [SMALL, "sglang-native"],
    );
    assertOk(await fleet.chat({ model: "sglang-native" }));
    assert.equal(fleet.workers[0]!.stats().totalRequests, 1);
  });

  test("workers[].models in config replaces what the worker reports", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ model: "reported-name" }],
      schedulerYaml: smallSchedulerYaml(),
      workerModels: [["configured-name"]],
    });
    assert.deepEqual(
      fleet.gateway.pools.all.map((p) => p.name),
      ["configured-name"],
    );
    assertError(await fleet.chat({ model: "reported-name" }), 404, "model_not_found");
  });

  test("admin API pins capacity per pool; without model it needs exactly one pool", async (t) => {
    const fleet = await twoPools(t);
    const pin = await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 1, model: SMALL });
    assert.equal(pin.status, 200, pin.text);
    assert.equal(fleet.gateway.pools.find(SMALL)!.capacity.capacity, 1);
    assert.equal(fleet.gateway.pools.find(BIG)!.capacity.capacity, 2);
    const ambiguous = await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 3 });
    assertError(ambiguous, 400, "invalid_capacity");
    assert.match(ambiguous.text, /several model pools/);
    assertError(
      await fleet.admin("PUT", "/api/v1/capacity", { max_in_flight: 3, model: "nope" }),
      404,
      "model_not_found",
    );
    const status = await fleet.status();
    const pools = (
      status as unknown as { pools: Record<string, { capacity: number; pinned_capacity: number | null }> }
    ).pools;
    assert.equal(pools[SMALL]!.pinned_capacity, 1);
    assert.equal(pools[BIG]!.pinned_capacity, null);
    const unpin = await fleet.admin("DELETE", `/api/v1/capacity?model=${SMALL}`);
    assert.equal(unpin.status, 200, unpin.text);
    assert.equal(fleet.gateway.pools.find(SMALL)!.capacity.capacity, 4);
  });

  test("pools.<model>.classes overrides the classes of that pool only", async (t) => {
    const fleet = await twoPools(t, { gateway: { pools: { [BIG]: { default: { queue_size: 1 } } } } });
    const held = Array.from({ length: 3 }, () => fleet.hold({ model: BIG }, { "x-mock-ttft-ms": "60000" }));
    t.after(() => Promise.all(held.map((h) => h.cancel())));
    await waitFor(() => fleet.gateway.pools.find(BIG)!.admission.snapshot().queued === 1, "one queues");
    assertError(await fleet.chat({ model: BIG }), 429, "scheduler_queue_full");
    const smallHeld = Array.from({ length: 6 }, () =>
      fleet.hold({ model: SMALL }, { "x-mock-ttft-ms": "60000" }),
    );
    t.after(() => Promise.all(smallHeld.map((h) => h.cancel())));
    await waitFor(
      () => fleet.gateway.pools.find(SMALL)!.admission.snapshot().queued === 2,
      "two queue in the small pool",
    );
  });
});
