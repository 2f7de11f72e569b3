/**
 * The policies, pure: cache-aware sends repeated prefixes to one worker and falls back to the least
 * loaded when that worker is overloaded or the match is too short; session hashing is stable and
 * moves only the leaving worker's keys; prefix_hash groups by the prompt's head; the simple three.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { mulberry32 } from "@sluice/scheduler/core/random.js";
import type { RoutingObserver, RoutingRequest } from "../../src/contracts/routing-policy.js";
import { CacheAwarePolicy } from "../../src/routing/cache-aware.js";
import { createRoutingPolicy } from "../../src/routing/create.js";
import { isOverloaded } from "../../src/routing/load.js";
import { DEFAULT_ROUTING, POLICY_NAMES, type PolicyName } from "../../src/routing/options.js";
import { PREFIX_HASH_CHARS } from "../../src/routing/prefix-hash.js";
import { BodyRoutingRequest, promptTextOf } from "../../src/routing/request.js";

interface FakeWorker {
  url: string;
  inflight: number;
}

function fleet(n: number): FakeWorker[] {
  return Array.from({ length: n }, (_, i) => ({ url: `http://10.0.0.${i + 1}:8000`, inflight: 0 }));
}

/** Counts choices by reason and collects match ratios. */
function recorder(): RoutingObserver & { reasons: Map<string, number>; ratios: number[] } {
  const reasons = new Map<string, number>();
  const ratios: number[] = [];
  return {
    reasons,
    ratios,
    choices(policy, reason) {
      const key = `${policy}/${reason}`;
      reasons.set(key, reasons.get(key) ?? 0);
      return { inc: () => reasons.set(key, reasons.get(key)! + 1) };
    },
    matchRatio: (r) => ratios.push(r),
  };
}

function chat(messages: Array<[string, string]>, headers: Record<string, string> = {}): RoutingRequest {
  return new BodyRoutingRequest(
    { model: "m", messages: messages.map(([role, content]) => ({ role, content })) },
    headers,
  );
}

const SYSTEM = "You are a meticulous assistant for an online bookshop. Answer in two sentences. ".repeat(6);

function cacheAware(observer: RoutingObserver, overrides: Partial<typeof DEFAULT_ROUTING> = {}) {
  const o = { ...DEFAULT_ROUTING, ...overrides };
  return new CacheAwarePolicy<FakeWorker>(
    {
      cacheThreshold: o.cacheThreshold,
      balanceAbsThreshold: o.balanceAbsThreshold,
      balanceRelThreshold: o.balanceRelThreshold,
      maxTreeSize: o.cacheAwareMaxTreeSize,
    },
    observer,
  );
}

describe("the prompt as policies see it", () => {
  test("chat messages (string and text-part contents), prompt arrays and token ids", () => {
    assert.equal(
      promptTextOf({
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: [{ type: "text", text: "hi " }, { type: "image_url" }, "there"] },
        ],
      }),
      "system\nbe brief\nuser\nhi there\n",
    );
    assert.equal(promptTextOf({ prompt: ["a", "b"] }), "ab");
    assert.equal(promptTextOf({ prompt: [[1, 2], [3]] }), "1,2,3,");
    assert.equal(promptTextOf({ text: "native" }), "native");
    assert.equal(promptTextOf(undefined), "");
    const request = new BodyRoutingRequest({ prompt: "x" }, { "x-session-id": ["s1", "s2"] });
    assert.equal(request.header("x-session-id"), "s1");
    assert.equal(request.header("absent"), undefined);
  });
});

describe("cache_aware", () => {
  test("a conversation's turns follow its first worker; new conversations spread", () => {
    const obs = recorder();
    const policy = cacheAware(obs);
    const workers = fleet(4);
    const homes: FakeWorker[] = [];
    for (let c = 0; c < 8; c++) {
      // Each conversation's first turn: new text, no match; the least loaded (ties in turn) gets it.
      const w = policy.choose(
        workers,
        chat([["user", `conversation ${c}: ${"tell me about books ".repeat(10)}`]]),
      )!;
      homes.push(w);
    }
    assert.equal(new Set(homes).size, 4, "idle workers take new conversations in turn");
    for (let turn = 1; turn <= 5; turn++) {
      for (let c = 0; c < 8; c++) {
        const messages: Array<[string, string]> = [
          ["user", `conversation ${c}: ${"tell me about books ".repeat(10)}`],
        ];
        for (let k = 1; k <= turn; k++)
          messages.push(["assistant", `answer ${k}`], ["user", `follow-up ${k}`]);
        assert.equal(policy.choose(workers, chat(messages)), homes[c], `conversation ${c}, turn ${turn}`);
      }
    }
    assert.equal(obs.reasons.get("cache_aware/cache_hit"), 40);
    assert.equal(obs.reasons.get("cache_aware/cache_miss"), 8);
    assert.ok(
      obs.ratios.slice(8).every((r) => r > 0.8),
      "follow-ups match most of their prompt",
    );
  });

  test("falls back to the least loaded when the matched worker is overloaded, and the prefix gains a home", () => {
    const obs = recorder();
    const policy = cacheAware(obs, { balanceAbsThreshold: 2, balanceRelThreshold: 1.5 });
    const workers = fleet(3);
    const [a, b, c] = workers as [FakeWorker, FakeWorker, FakeWorker];
    const home = policy.choose(
      workers,
      chat([
        ["system", SYSTEM],
        ["user", "first question"],
      ]),
    )!;
    assert.equal(home, a, "the first of three idle workers");
    // Loads 4, 0, 0: mean 1.33; 4 > 2 (1.5x) and 4 > 3.33 (+2): overloaded.
    a.inflight = 4;
    assert.ok(isOverloaded(4, 4 / 3, 2, 1.5));
    const spilled = policy.choose(
      workers,
      chat([
        ["system", SYSTEM],
        ["user", "second question"],
      ]),
    )!;
    assert.notEqual(spilled, a);
    assert.equal(obs.reasons.get("cache_aware/overloaded"), 1);
    // The spill target now holds the shared system prompt too: the least loaded holder gets it.
    a.inflight = 3;
    assert.equal(
      policy.choose(
        workers,
        chat([
          ["system", SYSTEM],
          ["user", "third question"],
        ]),
      ),
      spilled,
    );
    // Loads a 3, spill target 4, the other 0: mean 2.33; a, the least loaded holder, is under
    // 3.5 (1.5x): not overloaded, the match wins over the idle worker.
    spilled.inflight = 4;
    const other = workers.find((w) => w !== a && w !== spilled)!;
    assert.equal(other.inflight, 0);
    assert.equal(
      policy.choose(
        workers,
        chat([
          ["system", SYSTEM],
          ["user", "fourth question"],
        ]),
      ),
      a,
    );
    assert.equal(obs.reasons.get("cache_aware/cache_hit"), 2);
    assert.deepEqual([b, c].includes(spilled), true);
  });

  test("below the threshold the least loaded worker gets it; the threshold is the matched share", () => {
    const obs = recorder();
    const policy = cacheAware(obs, { cacheThreshold: 0.5 });
    const workers = fleet(2);
    const [a, b] = workers as [FakeWorker, FakeWorker];
    assert.equal(policy.choose(workers, new BodyRoutingRequest({ prompt: "x".repeat(100) }, {})), a);
    a.inflight = 1;
    // 100 of 250 characters match: 0.4 < 0.5, the least loaded (b) gets it.
    assert.equal(
      policy.choose(workers, new BodyRoutingRequest({ prompt: "x".repeat(100) + "y".repeat(150) }, {})),
      b,
    );
    assert.equal(obs.ratios.at(-1), 0.4);
    // 100 of 200: 0.5 passes (the x prefix is both workers' now: the less loaded holder gets it).
    b.inflight = 2;
    assert.equal(
      policy.choose(workers, new BodyRoutingRequest({ prompt: "x".repeat(100) + "z".repeat(100) }, {})),
      a,
    );
    assert.equal(obs.ratios.at(-1), 0.5);
  });

  test("when the workers holding the whole match are not candidates, a shorter match still counts", () => {
    const policy = cacheAware(recorder());
    const workers = fleet(3);
    const [a, b, c] = workers as [FakeWorker, FakeWorker, FakeWorker];
    policy.choose(
      [a],
      chat([
        ["system", SYSTEM],
        ["user", "q1"],
      ]),
    );
    policy.choose(
      [b],
      chat([
        ["system", SYSTEM],
        ["user", "q2"],
        ["assistant", "r2"],
        ["user", "q3"],
      ]),
    );
    // The deepest match (the q2 conversation) is b's, but b is full (not a candidate): a holds the
    // system prompt, most of the text, and gets it rather than the idle c.
    c.inflight = 0;
    a.inflight = 1;
    assert.equal(
      policy.choose(
        [a, c],
        chat([
          ["system", SYSTEM],
          ["user", "q2"],
          ["assistant", "r2"],
          ["user", "q4"],
        ]),
      ),
      a,
    );
  });

  test("a worker that leaves takes its entries: its prefixes go to the least loaded", () => {
    const policy = cacheAware(recorder());
    const workers = fleet(2);
    const [a, b] = workers as [FakeWorker, FakeWorker];
    assert.equal(policy.choose(workers, chat([["user", SYSTEM]])), a);
    const size = policy.treeChars;
    assert.ok(size > SYSTEM.length);
    b.inflight = 1;
    assert.equal(policy.choose(workers, chat([["user", SYSTEM]])), a, "a holds it");
    policy.onWorkerRemoved(a);
    assert.equal(policy.treeChars, 0, "a's entries left with it");
    a.inflight = 2;
    assert.equal(policy.choose(workers, chat([["user", SYSTEM]])), b, "no holder: the least loaded");
  });

  test("no prompt: the least loaded, and nothing enters the tree", () => {
    const obs = recorder();
    const policy = cacheAware(obs);
    const workers = fleet(2);
    workers[0]!.inflight = 3;
    assert.equal(policy.choose(workers, new BodyRoutingRequest(undefined, {})), workers[1]);
    assert.equal(policy.treeChars, 0);
    assert.equal(obs.reasons.get("cache_aware/no_prompt"), 1);
    assert.equal(policy.choose([], chat([["user", "x"]])), undefined);
  });
});

describe("session", () => {
  test("the same session always lands on the same worker, on every replica", () => {
    const workers = fleet(5);
    const one = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "session" });
    const another = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "session" });
    for (let s = 0; s < 200; s++) {
      const request = chat([["user", `turn of ${s}`]], { "x-session-id": `session-${s}` });
      const first = one.choose(workers, request);
      workers[s % 5]!.inflight += 3; // load does not move a session
      assert.equal(one.choose(workers, request), first);
      assert.equal(another.choose([...workers].reverse(), request), first, "order and replica do not matter");
    }
  });

  test("a worker that leaves moves only its own sessions, each spread over the rest", () => {
    const workers = fleet(5);
    const policy = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "session" });
    const keys = Array.from({ length: 10_000 }, (_, i) => `user-${i}`);
    const before = keys.map((k) => policy.choose(workers, chat([], { "x-session-id": k }))!);
    const counts = workers.map((w) => before.filter((x) => x === w).length);
    for (const n of counts) assert.ok(n > 1700 && n < 2300, `even spread: ${counts}`);
    const gone = workers[2]!;
    const rest = workers.filter((w) => w !== gone);
    const after = keys.map((k) => policy.choose(rest, chat([], { "x-session-id": k }))!);
    let moved = 0;
    const landed = new Map<FakeWorker, number>();
    for (let i = 0; i < keys.length; i++) {
      if (before[i] === after[i]) continue;
      moved++;
      assert.equal(before[i], gone, "only the leaving worker's sessions move");
      landed.set(after[i]!, (landed.get(after[i]!) ?? 0) + 1);
    }
    assert.equal(moved, counts[2]);
    for (const n of landed.values())
      assert.ok(n > moved / 4 - 150 && n < moved / 4 + 150, "spread over the rest");
  });

  test("a custom header (any case); no header: the less loaded of two random workers", () => {
    const workers = fleet(2);
    const obs = recorder();
    const policy = createRoutingPolicy<FakeWorker>(
      { ...DEFAULT_ROUTING, policy: "session", sessionHeader: "X-User" },
      obs,
      mulberry32(1),
    );
    workers[0]!.inflight = 5;
    for (let i = 0; i < 20; i++) assert.equal(policy.choose(workers, chat([["user", "hi"]])), workers[1]);
    assert.equal(obs.reasons.get("session/no_session"), 20);
    const w = policy.choose(workers, chat([["user", "hi"]], { "x-user": "u1" }));
    assert.equal(policy.choose(workers, chat([["user", "other text"]], { "x-user": "u1" })), w);
    assert.equal(obs.reasons.get("session/session"), 2);
  });
});

describe("prefix_hash", () => {
  test("prompts sharing their head land together; past the head nothing matters; overloaded: least loaded", () => {
    const workers = fleet(4);
    const obs = recorder();
    const policy = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "prefix_hash" }, obs);
    const head = "h".repeat(PREFIX_HASH_CHARS);
    const owner = policy.choose(workers, new BodyRoutingRequest({ prompt: `${head}tail one` }, {}))!;
    assert.equal(policy.choose(workers, new BodyRoutingRequest({ prompt: `${head}other tail` }, {})), owner);
    const owners = new Set<FakeWorker>();
    for (let i = 0; i < 40; i++)
      owners.add(policy.choose(workers, new BodyRoutingRequest({ prompt: `head ${i}` }, {}))!);
    assert.ok(owners.size >= 3, "different heads spread");
    owner.inflight = 10; // mean 2.5: 10 > 3.75 and > 6.5
    const fallback = policy.choose(workers, new BodyRoutingRequest({ prompt: `${head}tail one` }, {}));
    assert.notEqual(fallback, owner);
    assert.equal(fallback!.inflight, 0);
    assert.equal(obs.reasons.get("prefix_hash/overloaded"), 1);
  });
});

describe("the simple policies", () => {
  test("round_robin rotates, power_of_two prefers the less loaded, random stays in range", () => {
    const workers = fleet(3);
    const rr = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: "round_robin" });
    const seen = [0, 1, 2, 3, 4, 5].map(() => rr.choose(workers, chat([]))!);
    assert.deepEqual(
      seen
        .slice(0, 3)
        .map((w) => w.url)
        .sort(),
      workers.map((w) => w.url).sort(),
    );
    assert.deepEqual(seen.slice(3), seen.slice(0, 3));
    const p2c = createRoutingPolicy<FakeWorker>(
      { ...DEFAULT_ROUTING, policy: "power_of_two" },
      undefined,
      mulberry32(7),
    );
    workers[0]!.inflight = 9;
    workers[1]!.inflight = 9;
    const picks = Array.from({ length: 300 }, () => p2c.choose(workers, chat([]))!);
    // The idle worker wins every pair it is in: 2/3 of the draws.
    const idle = picks.filter((w) => w === workers[2]).length;
    assert.ok(idle > 170 && idle < 230, `${idle}`);
    for (const name of [
      "random",
      "round_robin",
      "power_of_two",
      "session",
      "prefix_hash",
      "cache_aware",
    ] as PolicyName[]) {
      const p = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: name });
      assert.equal(p.name, name);
      assert.equal(p.choose([workers[1]!], chat([["user", "x"]])), workers[1]);
      assert.equal(p.choose([], chat([["user", "x"]])), undefined);
    }
  });

  test("every policy counts a lone candidate as only_candidate, and nothing for no candidate", () => {
    const workers = fleet(2);
    for (const name of POLICY_NAMES) {
      const observer = recorder();
      const p = createRoutingPolicy<FakeWorker>({ ...DEFAULT_ROUTING, policy: name }, observer);
      assert.equal(
        observer.reasons.get(`${name}/only_candidate`),
        0,
        `${name}: the count exists from the start`,
      );
      p.choose([], chat([["user", "x"]]));
      p.choose([workers[0]!], chat([["user", "x"]]));
      p.choose([workers[1]!], chat([["user", "x"]]));
      const counted = [...observer.reasons].filter(([, n]) => n > 0);
      assert.deepEqual(counted, [[`${name}/only_candidate`, 2]], name);
    }
  });
});
