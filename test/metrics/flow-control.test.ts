/**
 * The inference extension's flow-control series on /metrics, over real HTTP: the names and types an
 * autoscaler reads (`inference_extension_flow_control_queue_size`, a gauge;
 * `inference_extension_flow_control_request_queue_duration_seconds`, a histogram), their labels,
 * and what they count: requests waiting for a slot now, and how each left admission.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DEFAULT_PRIORITY_THRESHOLDS } from "../../src/config/inference-objectives.js";
import {
  assertError,
  assertOk,
  type Fleet,
  labelNames,
  metric,
  smallSchedulerYaml,
  startFleet,
  waitFor,
} from "../helpers/harness.js";

const QUEUE_SIZE = "inference_extension_flow_control_queue_size";
const QUEUE_DURATION = "inference_extension_flow_control_request_queue_duration_seconds";
const FAIRNESS = "x-gateway-inference-fairness-id";
const OBJECTIVE = "x-gateway-inference-objective";

const TRUSTED = {
  inferenceGateway: { objectives: new Map([["batch", -10]]), classes: DEFAULT_PRIORITY_THRESHOLDS },
};

/** One worker with room for one request, so a second one queues. */
function startOneSlotFleet(t: import("node:test").TestContext, bulkQueueSize?: number): Promise<Fleet> {
  return startFleet(t, {
    workers: [{ maxRunningRequests: 1 }],
    schedulerYaml: smallSchedulerYaml(
      bulkQueueSize === undefined ? {} : { classes: { bulk: { queue_size: bulkQueueSize } } },
    ),
    priorityScheduler: { defaultMaxClass: "system" },
    gateway: TRUSTED,
  });
}

async function holdTheSlot(fleet: Fleet) {
  const held = fleet.hold({}, { "x-mock-ttft-ms": "5000" });
  await waitFor(() => fleet.workers[0]!.stats().running === 1, "the first request holds the only slot");
  return held;
}

const TEAM_A = {
  fairness_id: "fairness:team-a",
  priority: "bulk",
  inference_pool: "mock-llm",
  model_name: "mock-llm",
  target_model_name: "mock-llm",
};

describe("flow-control metrics", () => {
  test("names, types and labels as the extension exports them", async (t) => {
    const fleet = await startOneSlotFleet(t);
    assertOk(await fleet.chat({}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "batch" }));
    const s = await fleet.scrape();
    assert.equal(s.families.get(QUEUE_SIZE)?.type, "GAUGE");
    assert.equal(s.families.get(QUEUE_DURATION)?.type, "HISTOGRAM");
    assert.deepEqual(labelNames(s, QUEUE_DURATION), [
      "fairness_id",
      "inference_pool",
      "model_name",
      "outcome",
      "priority",
      "target_model_name",
    ]);
    assert.equal(metric(s, `${QUEUE_DURATION}_count`, { ...TEAM_A, outcome: "Dispatched" }), 1);
    // The extension's bucket bounds, 100 us to 60 s.
    const bounds = (s.samples.get(`${QUEUE_DURATION}_bucket`) ?? [])
      .filter((m) => m.labels.fairness_id === "fairness:team-a")
      .map((m) => m.labels.le);
    assert.deepEqual(bounds, [
      "0.0001",
      "0.0005",
      "0.001",
      "0.005",
      "0.01",
      "0.025",
      "0.05",
      "0.1",
      "0.25",
      "0.5",
      "1",
      "2.5",
      "5",
      "10",
      "30",
      "60",
      "+Inf",
    ]);
  });

  test("the queue size counts a request while it waits for a slot, and drops it once admitted", async (t) => {
    const fleet = await startOneSlotFleet(t);
    const first = await holdTheSlot(fleet);
    const waiting = fleet.hold({}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "batch" });
    await waitFor(() => fleet.snapshot().classes.bulk.queued === 1, "team-a's request queued");

    let s = await fleet.scrape();
    assert.equal(metric(s, QUEUE_SIZE, TEAM_A), 1);
    assert.deepEqual(labelNames(s, QUEUE_SIZE), [
      "fairness_id",
      "inference_pool",
      "model_name",
      "priority",
      "target_model_name",
    ]);
    // Every queued request is in the sum an autoscaler takes per pool.
    const perPool = (s.samples.get(QUEUE_SIZE) ?? [])
      .filter((m) => m.labels.inference_pool === "mock-llm")
      .reduce((n, m) => n + m.value, 0);
    assert.equal(perPool, 1);

    await first.cancel();
    assertOk(await waiting.result);
    s = await fleet.scrape();
    assert.equal(s.samples.get(QUEUE_SIZE)?.length ?? 0, 0, "nothing waits now");
    assert.equal(metric(s, `${QUEUE_DURATION}_count`, { ...TEAM_A, outcome: "Dispatched" }), 1);
    assert.equal(
      metric(s, `${QUEUE_DURATION}_count`, {
        ...TEAM_A,
        fairness_id: "anonymous",
        priority: "default",
        outcome: "Dispatched",
      }),
      1,
    );
  });

  test("a refusal and a client that leaves are counted under the extension's outcome names", async (t) => {
    const fleet = await startOneSlotFleet(t, 1);
    const first = await holdTheSlot(fleet);
    const waiting = fleet.hold({}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "batch" });
    await waitFor(() => fleet.snapshot().classes.bulk.queued === 1, "team-a's request queued");
    // The bulk queue holds one: the next bulk request is refused at once.
    assertError(
      await fleet.chat({}, { [FAIRNESS]: "team-a", [OBJECTIVE]: "-3" }),
      429,
      "scheduler_queue_full",
    );
    await waiting.cancel();
    await waitFor(() => fleet.snapshot().classes.bulk.queued === 0, "the waiting client left");
    const s = await fleet.scrape();
    assert.equal(metric(s, `${QUEUE_DURATION}_count`, { ...TEAM_A, outcome: "RejectedCapacity" }), 1);
    assert.equal(metric(s, `${QUEUE_DURATION}_count`, { ...TEAM_A, outcome: "EvictedContextCancelled" }), 1);
    assert.equal(metric(s, QUEUE_SIZE, TEAM_A), undefined);
    await first.cancel();
  });
});
