/**
 * The official `openai` client against the gateway's rate limits, side by side over real loopback
 * HTTP: two tenants with the same small tokens_per_minute bucket; one client keeps the SDK's
 * default retries (it waits the Retry-After the gateway sends), the other has maxRetries 0 and
 * resends at once in a loop. Each runs until it has had a few successes after its first refusal.
 * The one that honours the headers is refused far less per successful request. Work is counted,
 * not time; the bucket is small (a refill every ~2 s) so the run takes seconds.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";
import { keyOf, schedulerDoc, startFleet } from "../helpers/harness.js";

const PARAMS = {
  model: "mock-llm",
  messages: [{ role: "user" as const, content: "Say something." }],
  max_tokens: 16,
};

/** Successes each client must have after its first refusal: the refill-bound part of its run. */
const AFTER_FIRST_REFUSAL = 3;

interface Tally {
  successes: number;
  refusals: number;
  /** Successes so far when the first refusal came; undefined before it. */
  successesAtFirstRefusal: number | undefined;
  /** The headers of the last 429 the client saw. */
  last429: Headers | undefined;
}

/** A fetch that counts the answers the SDK receives, retries included. */
function countingFetch(tally: Tally): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    if (response.status === 429) {
      tally.refusals++;
      tally.successesAtFirstRefusal ??= tally.successes;
      tally.last429 = response.headers;
    }
    return response;
  };
}

function done(tally: Tally): boolean {
  return (
    tally.successesAtFirstRefusal !== undefined &&
    tally.successes >= tally.successesAtFirstRefusal + AFTER_FIRST_REFUSAL
  );
}

/** Calls until done; a call the SDK gives up on (its retries spent) is tried again at once. */
async function run(client: OpenAI, tally: Tally): Promise<void> {
  while (!done(tally)) {
    try {
      await client.chat.completions.create(PARAMS);
      tally.successes++;
    } catch (err) {
      if (!(err instanceof OpenAI.RateLimitError)) throw err;
    }
  }
}

test("a client that honours Retry-After is refused less per success than one that resends at once", {
  timeout: 60_000,
}, async (t) => {
  // 600 tokens a minute, 10 a second: with ~20-token requests a burst of ~30, then one every ~2 s.
  const bucket = { tokens_per_minute: 600 };
  const fleet = await startFleet(t, {
    workers: [{ maxRunningRequests: 8 }],
    schedulerYaml: schedulerDoc({
      tenant_policies: { "auth:patient": bucket, "auth:eager": bucket },
    }),
    tenants: ["patient", "eager"],
  });
  const patientTally: Tally = {
    successes: 0,
    refusals: 0,
    successesAtFirstRefusal: undefined,
    last429: undefined,
  };
  const eagerTally: Tally = {
    successes: 0,
    refusals: 0,
    successesAtFirstRefusal: undefined,
    last429: undefined,
  };
  // The SDK's defaults: 2 retries, waiting what retry-after says.
  const patient = new OpenAI({
    baseURL: `${fleet.url}/v1`,
    apiKey: keyOf("patient"),
    fetch: countingFetch(patientTally),
  });
  const eager = new OpenAI({
    baseURL: `${fleet.url}/v1`,
    apiKey: keyOf("eager"),
    maxRetries: 0,
    fetch: countingFetch(eagerTally),
  });

  await Promise.all([run(patient, patientTally), run(eager, eagerTally)]);

  // Both were refused at the same bucket's edge and got the headers a client needs.
  for (const tally of [patientTally, eagerTally]) {
    const headers = tally.last429!;
    assert.match(headers.get("retry-after") ?? "", /^[1-9]\d*$/);
    assert.equal(headers.get("x-ratelimit-limit-tokens"), "600");
    assert.match(headers.get("x-ratelimit-remaining-tokens") ?? "", /^\d+$/);
    assert.match(headers.get("x-ratelimit-reset-tokens") ?? "", /^(\d+ms|[\d.]+s|\d+m[\d.]+s)$/);
    assert.equal(headers.get("x-smg-error-code"), "token_budget_exceeded");
  }
  const patientRate = patientTally.refusals / patientTally.successes;
  const eagerRate = eagerTally.refusals / eagerTally.successes;
  t.diagnostic(
    `patient: ${patientTally.refusals} refusals / ${patientTally.successes} successes; ` +
      `eager: ${eagerTally.refusals} / ${eagerTally.successes}`,
  );
  // The patient client waits out each refusal: about one refusal per refill-bound success.
  assert.ok(
    patientTally.refusals <= 2 * AFTER_FIRST_REFUSAL + 1,
    `patient client refused ${patientTally.refusals} times`,
  );
  assert.ok(patientRate < eagerRate, `patient ${patientRate} vs eager ${eagerRate} refusals per success`);
  // Resending at once hits an empty bucket over and over until it refills.
  assert.ok(
    eagerTally.refusals >= 5 * patientTally.refusals,
    `${eagerTally.refusals} vs ${patientTally.refusals}`,
  );
});
