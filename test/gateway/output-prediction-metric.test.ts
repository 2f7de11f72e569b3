/**
 * sluice_output_prediction_error_ratio over real HTTP (the official openai client through the
 * gateway to a mock worker): one observation per answer, |predicted − actual| / actual per choice,
 * labelled by pool and the prediction's source; an answer that stopped at its max_tokens is not
 * observed. The prediction also sets the budget's hold, so the source is checked twice.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import OpenAI from "openai";
import { MIN_SAMPLES } from "../../src/accounting/output-prediction.js";
import { FAST_WORKER, labelNames, labelValues, metric, startFleet } from "../helpers/harness.js";

const NAME = "sluice_output_prediction_error_ratio";

describe("output prediction error metric", () => {
  test("default, then the tenant's history, then a max_tokens cap; capped answers left out", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ ...FAST_WORKER, defaultMaxTokens: 100 }],
      gateway: { defaultOutputTokens: 200 },
    });
    const client = new OpenAI({ baseURL: `${fleet.url}/v1`, apiKey: "x", maxRetries: 0 });
    const ask = (extra: { max_tokens?: number } = {}, headers: Record<string, string> = {}) =>
      client.chat.completions.create(
        { model: "mock-llm", messages: [{ role: "user", content: "hello there" }], ...extra },
        { headers },
      );

    // No history: default_output_tokens (200) predicted, 100 produced: error 1 each.
    for (let i = 0; i < MIN_SAMPLES; i++) {
      const answer = await ask();
      assert.equal(answer.usage?.completion_tokens, 100);
    }
    // Eight answers of 100: the tenant's p95 is 100, error 0.
    await ask();
    // max_tokens 80 below the history's 100: 80 predicted (source max_tokens); 40 produced: error 1.
    const short = await ask({ max_tokens: 80 }, { "x-mock-output-tokens": "40" });
    assert.equal(short.usage?.completion_tokens, 40);
    // max_tokens 30, all of it produced: the model had more to say, so nothing is measured.
    const capped = await ask({ max_tokens: 30 });
    assert.equal(capped.usage?.completion_tokens, 30);

    const start = fleet.logs.find((l) => l.msg === "output-length prediction");
    assert.match(String(start?.chain), /decaying p95 .*then default_output_tokens \(200\)/);

    const s = await fleet.scrape();
    assert.equal(s.families.get(NAME)?.type, "HISTOGRAM");
    assert.deepEqual(labelNames(s, NAME), ["pool", "source"]);
    const pools = labelValues(s, `${NAME}_count`, "pool");
    assert.equal(pools.length, 1, `one pool: ${pools}`);
    const pool = pools[0]!;
    const count = (source: string) => metric(s, `${NAME}_count`, { pool, source });
    const sum = (source: string) => metric(s, `${NAME}_sum`, { pool, source });
    assert.equal(count("default"), MIN_SAMPLES);
    assert.equal(sum("default"), MIN_SAMPLES * 1);
    assert.equal(count("tenant"), 1);
    assert.equal(sum("tenant"), 0);
    assert.equal(count("max_tokens"), 1, "the capped answer is not observed");
    assert.equal(sum("max_tokens"), 1);
    assert.equal(metric(s, `${NAME}_bucket`, { pool, source: "default", le: "0.5" }), 0);
    assert.equal(metric(s, `${NAME}_bucket`, { pool, source: "default", le: "1" }), MIN_SAMPLES);
  });
});
