/** Tokens per SSE event: seeded from the worker's report, learned from finished streams, 1 near 1. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  MIN_TOKEN_EVENTS,
  streamTokensPerEvent,
  TokensPerEvent,
} from "../../src/gateway/fleet/tokens-per-event.js";

test("one token an event by default; a stream that reads a little over 1 (framing events) stays 1", () => {
  const t = new TokensPerEvent();
  assert.equal(t.value, 1);
  t.learn(64, 62); // 64 tokens, 62 events taken as tokens: two framing events more than assumed
  assert.equal(t.value, 1);
  t.learn(64, 66);
  assert.equal(t.value, 1);
  assert.equal(t.learnedFrom, 2);
});

test("several tokens an event are learned, and followed as an average over streams", () => {
  const t = new TokensPerEvent();
  t.learn(256, 64);
  assert.equal(t.value, 4);
  t.learn(128, 64); // speculative decoding accepted fewer this time
  assert.ok(t.value > 3.5 && t.value < 4, `${t.value}`);
  for (let i = 0; i < 40; i++) t.learn(128, 64);
  assert.ok(Math.abs(t.value - 2) < 0.01, `${t.value}`);
});

test("short streams teach nothing (one miscounted event would move the estimate too far)", () => {
  const t = new TokensPerEvent();
  t.learn(60, MIN_TOKEN_EVENTS - 1);
  t.learn(5, 0);
  t.learn(0, 40);
  t.learn(Number.NaN, 40);
  assert.equal(t.value, 1);
  assert.equal(t.learnedFrom, 0);
});

test("the worker's reported interval is used until a stream teaches; a bad report is ignored", () => {
  const t = new TokensPerEvent();
  for (const bad of [0, -2, 2.5, "4", null, undefined, Number.POSITIVE_INFINITY]) t.seed(bad);
  assert.equal(t.value, 1);
  t.seed(4);
  assert.equal(t.value, 4);
  t.seed(1e9);
  assert.equal(t.value, 64, "capped: no server sends more an event");
  t.learn(200, 50);
  assert.equal(t.value, 4);
  t.seed(8);
  assert.equal(t.value, 4, "a stream's count wins over a later report");
});

test("ratios outside [1, 64] are clamped: more events than tokens is one token an event", () => {
  const t = new TokensPerEvent();
  t.learn(20, 40);
  assert.equal(t.value, 1);
  const u = new TokensPerEvent();
  u.learn(1_000_000, 16);
  assert.equal(u.value, 64);
});

test("one stream's own ratio (for its tail after the last mark): exact, 1 near 1, none when too short", () => {
  assert.equal(streamTokensPerEvent(512, 128), 4);
  assert.equal(streamTokensPerEvent(512, 129), 512 / 129);
  assert.equal(streamTokensPerEvent(64, 66), 1);
  assert.equal(streamTokensPerEvent(64, 60), 1);
  assert.equal(streamTokensPerEvent(60, MIN_TOKEN_EVENTS - 1), undefined);
  assert.equal(streamTokensPerEvent(0, 40), undefined);
  assert.equal(streamTokensPerEvent(1e9, 20), 64);
});
