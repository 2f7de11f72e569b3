/**
 * Worker choice through the gateway, with real mock workers on loopback: cache_aware keeps a
 * conversation on the worker whose prefix cache holds it (the worker reports the cached tokens) and
 * sends it elsewhere when that worker is overloaded; session keeps a session on one worker; the
 * choices and match ratios reach /metrics.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Doc, metric, type Reply, smallSchedulerYaml, startFleet, waitFor } from "../helpers/harness.js";

const SYSTEM = "You are the support assistant of a bicycle shop. Be precise and kind. ".repeat(8);

function conversation(turns: number, tag: string): Doc {
  const messages = [{ role: "system", content: SYSTEM }];
  for (let k = 0; k < turns; k++) {
    messages.push({ role: "user", content: `${tag} question ${k}: my gears slip on the climb, what now?` });
    if (k < turns - 1)
      messages.push({ role: "assistant", content: `answer ${k}: check the cable tension first.` });
  }
  return { messages, max_tokens: 2 };
}

function usage(reply: Reply): { prompt: number; cached: number | undefined } {
  const u = JSON.parse(reply.text).usage as {
    prompt_tokens: number;
    prompt_tokens_details?: { cached_tokens: number };
  };
  return { prompt: u.prompt_tokens, cached: u.prompt_tokens_details?.cached_tokens };
}

describe("routing through the gateway", () => {
  test("cache_aware: a conversation stays where its prefix is cached; an overloaded worker sends it to the least loaded", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{ prefixCacheTokens: 8192 }, { prefixCacheTokens: 8192 }, { prefixCacheTokens: 8192 }],
      schedulerYaml: smallSchedulerYaml(),
      gateway: {
        policy: "cache_aware",
        // Overloaded: more than 1 request above the mean and more than 1.5 times it.
        routing: { balanceAbsThreshold: 1, balanceRelThreshold: 1.5 },
      },
    });
    const workerOf = () => fleet.outcomes.at(-1)!.worker;

    const first = await fleet.chat(conversation(1, "A"));
    assert.equal(first.status, 200, first.text);
    const home = workerOf()!;
    assert.deepEqual(usage(first).cached, 0, "a cold cache");
    let previousPrompt = usage(first).prompt;
    for (let turns = 2; turns <= 5; turns++) {
      const reply = await fleet.chat(conversation(turns, "A"));
      assert.equal(reply.status, 200, reply.text);
      assert.equal(workerOf(), home, `turn ${turns} goes where the conversation is cached`);
      const u = usage(reply);
      // The worker found the previous turn's prompt (its full 16-token blocks) in its cache.
      assert.ok(u.cached! >= previousPrompt - 16 - 4, `turn ${turns}: ${u.cached} cached of ${u.prompt}`);
      previousPrompt = u.prompt;
    }

    // Two turns that hang hold the home worker: 2 in flight, the others idle (mean 2/3).
    const held = [fleet.hold(conversation(6, "A"), { "x-mock-fail": "hang" })];
    const homeWorker = fleet.gateway.workers.workers.find((w) => w.url === home)!;
    await waitFor(() => homeWorker.inflight === 1, "the first hanging turn on the home worker");
    held.push(fleet.hold(conversation(6, "A"), { "x-mock-fail": "hang" }));
    await waitFor(() => homeWorker.inflight === 2, "the second hanging turn on the home worker");
    const spilled = await fleet.chat(conversation(6, "A"));
    assert.equal(spilled.status, 200);
    assert.notEqual(workerOf(), home, "overloaded: the least loaded worker gets it");
    for (const h of held) await h.cancel();

    const s = await fleet.scrape();
    const choice = (reason: string) =>
      metric(s, "sluice_routing_choices_total", { policy: "cache_aware", reason });
    assert.equal(choice("overloaded"), 1);
    assert.equal(choice("cache_hit"), 6);
    assert.equal(choice("cache_miss"), 1);
    assert.equal(metric(s, "sluice_routing_cache_match_ratio_count"), 8);
    assert.equal(
      metric(s, "sluice_routing_cache_match_ratio_bucket", { le: "0" }),
      1,
      "the first turn matched nothing",
    );
    assert.ok(metric(s, "sluice_routing_cache_tree_chars")! > SYSTEM.length);
  });

  test("session: every request of a session on one worker; sessions spread", async (t) => {
    const fleet = await startFleet(t, {
      workers: [{}, {}, {}],
      schedulerYaml: smallSchedulerYaml(),
      gateway: { policy: "session", routing: { sessionHeader: "x-conversation" } },
    });
    const homes = new Set<string>();
    for (let s = 0; s < 12; s++) {
      const seen = new Set<string>();
      for (let i = 0; i < 3; i++) {
        const reply = await fleet.chat({}, { "x-conversation": `c-${s}` });
        assert.equal(reply.status, 200);
        seen.add(fleet.outcomes.at(-1)!.worker!);
      }
      assert.equal(seen.size, 1, `session c-${s} stays on one worker`);
      homes.add([...seen][0]!);
    }
    assert.ok(homes.size >= 2, "sessions spread over the workers");
    const s = await fleet.scrape();
    assert.equal(metric(s, "sluice_routing_choices_total", { policy: "session", reason: "session" }), 36);
  });
});
