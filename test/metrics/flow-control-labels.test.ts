/**
 * The flow-control series' bounded labels, without a gateway: a tenant pushed out of the top N has
 * its queue-duration series removed (as every tenant-labelled series does), and the queue-size
 * gauge keeps only label sets with requests waiting.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Registry } from "prom-client";
import { FLOW_CONTROL_METRIC_NAMES, registerFlowControlMetrics } from "../../src/metrics/flow-control.js";
import { TenantLabeler } from "../../src/metrics/tenant-labels.js";
import { metric, parseScrape } from "../helpers/harness.js";

const place = (tenant: string) => ({ tenant, priority: "default", pool: "m", model: "m" });
const labels = (fairness: string) => ({
  fairness_id: fairness,
  priority: "default",
  inference_pool: "m",
  model_name: "m",
  target_model_name: "m",
});

test("a demoted tenant's queue-duration series go; what waits stays counted under its label", async () => {
  const registry = new Registry();
  const tenants = new TenantLabeler({ topN: 1, tableSize: 4, hysteresis: 0 });
  const flow = registerFlowControlMetrics(registry, tenants);
  tenants.record("a");
  flow.enter(place("a")).leave("Dispatched", 0.01);
  const stillWaiting = flow.enter(place("a"));
  let s = parseScrape(await registry.metrics());
  const duration = `${FLOW_CONTROL_METRIC_NAMES.queueDuration}_count`;
  assert.equal(metric(s, duration, { ...labels("a"), outcome: "Dispatched" }), 1);
  assert.equal(metric(s, FLOW_CONTROL_METRIC_NAMES.queueSize, labels("a")), 1);

  // b's traffic takes the one label: a is demoted.
  for (let i = 0; i < 50; i++) tenants.record("b");
  assert.equal(tenants.label("a"), "other");
  s = parseScrape(await registry.metrics());
  assert.equal(metric(s, duration, { ...labels("a"), outcome: "Dispatched" }), undefined);
  // The request that entered under a's label leaves under it: the gauge never goes negative.
  assert.equal(metric(s, FLOW_CONTROL_METRIC_NAMES.queueSize, labels("a")), 1);
  stillWaiting.leave("EvictedTTL", 2);
  stillWaiting.leave("EvictedTTL", 2);
  s = parseScrape(await registry.metrics());
  assert.equal(s.samples.get(FLOW_CONTROL_METRIC_NAMES.queueSize)?.length ?? 0, 0);
  // Its duration counts under the label the tenant has now, once.
  assert.equal(metric(s, duration, { ...labels("other"), outcome: "EvictedTTL" }), 1);
});
