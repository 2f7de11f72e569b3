/**
 * Routing bench (issue 16): does cache-aware worker choice find the workers' prefix caches, and at
 * what cost in balance and CPU?
 *
 * End to end: 4 mock workers with a prefix cache (each an LRU of 16-token blocks; TTFT grows with the
 * uncached prompt tokens) behind the sluice gateway, all in this process. A seeded multi-turn chat
 * workload: conversations on a few shared system prompts (Zipf popularity), whose context grows turn
 * by turn (each turn resends the whole history, the worker's own answers included), replayed by
 * closed-loop users. Each policy runs on fresh workers (cold caches) with the same conversations:
 * `round_robin`, `power_of_two`, `cache_aware`, and an oracle. The oracle is a routing policy only
 * this bench uses: it asks every worker's cache how many of the prompt's tokens it holds (exactly,
 * at the moment of the choice) and applies cache_aware's rule (threshold, overload gate, else least
 * loaded) to that truth instead of the gateway's approximate tree.
 *
 * Reported per policy: cache hit ratio (cached / prompt tokens, from the workers' usage), TTFT p50 and
 * p99 (client-side, streamed), and load imbalance: max / mean over the workers of their time-averaged
 * in-flight requests (sampled every 10 ms), with the mean of the instantaneous max / mean beside it.
 * Targets: cache_aware >= 90% of the oracle's hit ratio, imbalance < 1.5.
 *
 * Micro: the cost of one choice (prompt text built from the parsed body, tree match and insert) on a
 * warm tree, against power_of_two and round_robin, in ns per choice.
 *
 * Usage: node --import tsx bench/routing.bench.ts [--conversations N] [--users N] [--seed N] [--cache-tokens N]
 *        [--tree-chars N]
 *        [--policies round_robin,power_of_two,cache_aware,oracle] [--micro-only] [--no-micro]
 * It prints markdown; BENCHMARKS.md is the lead's to write.
 */

import { mulberry32 } from "@sluice/scheduler/core/random.js";
import { pino } from "pino";
import { Agent, request } from "undici";
import type { RoutingCandidate, RoutingPolicy, RoutingRequest } from "../src/contracts/routing-policy.js";
import { DEFAULT_HEALTH } from "../src/gateway/options.js";
import { type Gateway, startGateway } from "../src/gateway/server.js";
import { type MockWorker, startMockWorker } from "../src/mock-worker/index.js";
import { promptText } from "../src/mock-worker/prefix-cache.js";
import { createRoutingPolicy } from "../src/routing/create.js";
import { isOverloaded, LeastLoaded, meanLoad } from "../src/routing/load.js";
import { DEFAULT_ROUTING, type PolicyName } from "../src/routing/options.js";
import { BodyRoutingRequest } from "../src/routing/request.js";
import { fmtFixed, fmtInt, median } from "./lib/stats.js";

// --- settings ------------------------------------------------------------------------------------

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i === -1) return fallback;
  const n = Number(process.argv[i + 1]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
}

const SEED = flag("seed", 16);
const CONVERSATIONS = flag("conversations", 256);
const USERS = flag("users", 48);
const WORKERS = 4;
const WORKER = {
  maxRunningRequests: 32,
  prefixCacheTokens: flag("cache-tokens", 32_768),
  ttftMs: 5,
  prefillMsPerToken: 0.04,
  tokenDelayMs: 1,
  batchSlowdown: 0.02,
};
const SYSTEM_PROMPTS = 8;
/** cache_aware's tree bound (`cache_aware_max_tree_size`); the default unless given. */
const TREE_CHARS = flag("tree-chars", DEFAULT_ROUTING.cacheAwareMaxTreeSize);
const policiesArg = process.argv.indexOf("--policies");
const POLICIES: Array<PolicyName | "oracle"> =
  policiesArg === -1
    ? ["round_robin", "power_of_two", "cache_aware", "oracle"]
    : (process.argv[policiesArg + 1]!.split(",") as Array<PolicyName | "oracle">);
const MICRO_ONLY = process.argv.includes("--micro-only");
const NO_MICRO = process.argv.includes("--no-micro");

// --- the workload --------------------------------------------------------------------------------

interface Conversation {
  system: string;
  users: string[];
  maxTokens: number[];
}

function words(rng: () => number, vocabulary: string[], chars: number): string {
  let text = "";
  while (text.length < chars) text += `${vocabulary[Math.floor(rng() * vocabulary.length)]} `;
  return text.trimEnd();
}

/** Seeded: the same conversations, in the same order, for every policy. */
function workload(): Conversation[] {
  const rng = mulberry32(SEED);
  const vocabulary = Array.from({ length: 400 }, () => {
    const n = 3 + Math.floor(rng() * 7);
    let w = "";
    for (let i = 0; i < n; i++) w += String.fromCharCode(97 + Math.floor(rng() * 26));
    return w;
  });
  const systems = Array.from(
    { length: SYSTEM_PROMPTS },
    (_, i) => `You are assistant ${i}. ${words(rng, vocabulary, 2000 + Math.floor(rng() * 4000))}`,
  );
  // Zipf popularity: system prompt k is chosen with weight 1 / (k + 1).
  const weights = systems.map((_, k) => 1 / (k + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const pick = () => {
    let x = rng() * total;
    for (let k = 0; k < weights.length; k++) {
      x -= weights[k]!;
      if (x <= 0) return k;
    }
    return weights.length - 1;
  };
  return Array.from({ length: CONVERSATIONS }, () => {
    const turns = 3 + Math.floor(rng() * 8);
    return {
      system: systems[pick()]!,
      users: Array.from({ length: turns }, () => words(rng, vocabulary, 150 + Math.floor(rng() * 850))),
      maxTokens: Array.from({ length: turns }, () => 16 + Math.floor(rng() * 65)),
    };
  });
}

// --- the oracle ----------------------------------------------------------------------------------

/**
 * cache_aware's rule on the truth: the candidate whose cache holds the most of the prompt (ties: the
 * less loaded), if that share passes the threshold and it is not overloaded; else the least loaded.
 */
class OraclePolicy<W extends RoutingCandidate> implements RoutingPolicy<W> {
  readonly name = "oracle";
  private readonly least = new LeastLoaded();

  constructor(private readonly workers: ReadonlyMap<string, MockWorker>) {}

  choose(candidates: readonly W[], request: RoutingRequest): W | undefined {
    if (candidates.length <= 1) return candidates[0];
    let best: W | undefined;
    let bestCached = -1;
    for (const c of candidates) {
      const cached = this.workers.get(c.url)!.peekCachedTokens(request.json);
      if (cached > bestCached || (cached === bestCached && c.inflight < best!.inflight)) {
        best = c;
        bestCached = cached;
      }
    }
    const promptTokens = Math.max(1, Math.ceil(promptText(request.json).length / 4));
    const o = DEFAULT_ROUTING;
    if (
      bestCached > 0 &&
      bestCached / promptTokens >= o.cacheThreshold &&
      !isOverloaded(best!.inflight, meanLoad(candidates), o.balanceAbsThreshold, o.balanceRelThreshold)
    ) {
      return best;
    }
    return this.least.pick(candidates);
  }

  onWorkerRemoved(): void {}
}

// --- one run -------------------------------------------------------------------------------------

interface RunResult {
  policy: string;
  requests: number;
  errors: number;
  promptTokens: number;
  cachedTokens: number;
  ttftMs: number[];
  imbalance: number;
  instantImbalance: number;
  meanInflight: number;
  wallSecs: number;
  reasons: string;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function run(policy: PolicyName | "oracle", conversations: Conversation[]): Promise<RunResult> {
  const workers: MockWorker[] = [];
  for (let i = 0; i < WORKERS; i++) workers.push(await startMockWorker(WORKER));
  const byUrl = new Map(workers.map((w) => [w.url, w]));
  const gateway: Gateway = await startGateway({
    workers: workers.map((w) => ({ url: w.url })),
    host: "127.0.0.1",
    port: 0,
    policy: policy === "oracle" ? "cache_aware" : policy,
    routingPolicy:
      policy === "oracle" ? <W extends RoutingCandidate>() => new OraclePolicy<W>(byUrl) : undefined,
    routing: { cacheAwareMaxTreeSize: TREE_CHARS },
    priorityScheduler: { enabled: false, defaultMaxClass: "default", tenantMetricTopN: 32 },
    legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
    apiKeys: [],
    trustedTenantHeader: null,
    requireAuth: false,
    maxPayloadSize: 8 * 1024 * 1024,
    requestTimeoutSecs: 60,
    health: { ...DEFAULT_HEALTH, intervalSecs: 3600 },
    logger: pino({ level: "silent" }),
  });
  const agent = new Agent({ connections: USERS * 2, keepAliveTimeout: 10_000 });
  const result: RunResult = {
    policy,
    requests: 0,
    errors: 0,
    promptTokens: 0,
    cachedTokens: 0,
    ttftMs: [],
    imbalance: 0,
    instantImbalance: 0,
    meanInflight: 0,
    wallSecs: 0,
    reasons: "",
  };

  // In-flight per worker, sampled.
  const sums = workers.map(() => 0);
  let samples = 0;
  let instantSum = 0;
  let instantSamples = 0;
  const poolWorkers = gateway.workers.workers;
  const sampler = setInterval(() => {
    let total = 0;
    let max = 0;
    poolWorkers.forEach((w, i) => {
      sums[i]! += w.inflight;
      total += w.inflight;
      if (w.inflight > max) max = w.inflight;
    });
    samples++;
    if (total > 0) {
      instantSum += max / (total / poolWorkers.length);
      instantSamples++;
    }
  }, 10);

  let next = 0;
  const started = performance.now();
  const user = async () => {
    for (let c = next++; c < conversations.length; c = next++) {
      const conv = conversations[c]!;
      const messages: Array<{ role: string; content: string }> = [{ role: "system", content: conv.system }];
      for (let turn = 0; turn < conv.users.length; turn++) {
        messages.push({ role: "user", content: conv.users[turn]! });
        const t0 = performance.now();
        let firstAt = 0;
        let text = "";
        try {
          const res = await request(`${gateway.url}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              model: "mock-llm",
              messages,
              max_tokens: conv.maxTokens[turn],
              stream: true,
              stream_options: { include_usage: true },
            }),
            dispatcher: agent,
          });
          for await (const chunk of res.body) {
            if (firstAt === 0) firstAt = performance.now();
            text += (chunk as Buffer).toString("utf8");
          }
          result.requests++;
          if (res.statusCode !== 200) {
            result.errors++;
            messages.push({ role: "assistant", content: "" });
            continue;
          }
        } catch {
          result.requests++;
          result.errors++;
          messages.push({ role: "assistant", content: "" });
          continue;
        }
        result.ttftMs.push(firstAt - t0);
        let answer = "";
        for (const frame of text.split("\n\n")) {
          if (!frame.startsWith("data: {")) continue;
          const event = JSON.parse(frame.slice(6)) as {
            choices: Array<{ delta?: { content?: string } }>;
            usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
          };
          answer += event.choices[0]?.delta?.content ?? "";
          if (event.usage) {
            result.promptTokens += event.usage.prompt_tokens;
            result.cachedTokens += event.usage.prompt_tokens_details?.cached_tokens ?? 0;
          }
        }
        messages.push({ role: "assistant", content: answer });
      }
    }
  };
  await Promise.all(Array.from({ length: USERS }, () => user()));
  result.wallSecs = (performance.now() - started) / 1000;
  clearInterval(sampler);

  const averages = sums.map((s) => s / Math.max(1, samples));
  const mean = averages.reduce((a, b) => a + b, 0) / averages.length;
  result.meanInflight = mean;
  result.imbalance = mean > 0 ? Math.max(...averages) / mean : Number.NaN;
  result.instantImbalance = instantSamples > 0 ? instantSum / instantSamples : Number.NaN;
  const metrics = await gateway.metrics.metricsText();
  result.reasons = [
    ...metrics.matchAll(/^sluice_routing_choices_total\{policy="([^"]+)",reason="([^"]+)"\} (\d+)/gm),
  ]
    .filter((m) => m[3] !== "0")
    .map((m) => `${m[2]} ${m[3]}`)
    .join(", ");
  await gateway.close();
  await agent.close();
  await Promise.all(workers.map((w) => w.close()));
  result.ttftMs.sort((a, b) => a - b);
  return result;
}

// --- micro: the cost of one choice ---------------------------------------------------------------

interface Candidate {
  url: string;
  inflight: number;
}

function micro(conversations: Conversation[]): Array<[string, number]> {
  const candidates: Candidate[] = Array.from({ length: WORKERS }, (_, i) => ({
    url: `http://10.0.0.${i}:8000`,
    inflight: 0,
  }));
  // Bodies as the gateway holds them after parsing: every turn of the first 64 conversations,
  // each conversation's answers as a fixed text.
  const bodies: Array<Record<string, unknown>> = [];
  for (const conv of conversations.slice(0, 64)) {
    const messages: Array<{ role: string; content: string }> = [{ role: "system", content: conv.system }];
    conv.users.forEach((u, k) => {
      messages.push({ role: "user", content: u });
      bodies.push({ model: "mock-llm", messages: [...messages], max_tokens: conv.maxTokens[k] });
      messages.push({ role: "assistant", content: "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7".repeat(6) });
    });
  }
  const meanChars = bodies.reduce((a, b) => a + promptText(b).length, 0) / bodies.length;
  const out: Array<[string, number]> = [];
  const time = (name: string, policy: RoutingPolicy<Candidate>) => {
    // Warm: the tree holds every prompt once (as in steady state, where most turns extend a path).
    for (const body of bodies) policy.choose(candidates, new BodyRoutingRequest(body, {}));
    const rounds: number[] = [];
    for (let r = 0; r < 7; r++) {
      const t0 = process.hrtime.bigint();
      let n = 0;
      for (let k = 0; k < 20; k++) {
        for (const body of bodies) {
          candidates[n & 3]!.inflight = n & 7;
          policy.choose(candidates, new BodyRoutingRequest(body, {}));
          n++;
        }
      }
      rounds.push(Number(process.hrtime.bigint() - t0) / n);
    }
    out.push([name, median(rounds)]);
  };
  time("round_robin", createRoutingPolicy<Candidate>({ ...DEFAULT_ROUTING, policy: "round_robin" }));
  time("power_of_two", createRoutingPolicy<Candidate>({ ...DEFAULT_ROUTING, policy: "power_of_two" }));
  time("prefix_hash", createRoutingPolicy<Candidate>({ ...DEFAULT_ROUTING, policy: "prefix_hash" }));
  time("cache_aware", createRoutingPolicy<Candidate>({ ...DEFAULT_ROUTING, policy: "cache_aware" }));
  // A tiny tree: every choice evicts, the worst case for the tree's upkeep.
  time(
    "cache_aware (tree of 64 Ki chars, evicting)",
    createRoutingPolicy<Candidate>({
      ...DEFAULT_ROUTING,
      policy: "cache_aware",
      cacheAwareMaxTreeSize: 65_536,
    }),
  );
  out.push(["(mean prompt, characters)", meanChars]);
  // For scale: what admission already spends on the same bodies (cost.ts parses the JSON).
  const texts = bodies.map((b) => JSON.stringify(b));
  const parse: number[] = [];
  for (let r = 0; r < 7; r++) {
    const t0 = process.hrtime.bigint();
    for (const t of texts) JSON.parse(t);
    parse.push(Number(process.hrtime.bigint() - t0) / texts.length);
  }
  out.push(["(JSON.parse of the same bodies, for scale)", median(parse)]);
  // The gateway bench's request ("hi", one worker): the default policy's cost where nothing is cached.
  const hi = { model: "mock-llm", messages: [{ role: "user", content: "hi" }], max_tokens: 1 };
  const one = [candidates[0]!];
  for (const name of ["power_of_two", "cache_aware"] as const) {
    const policy = createRoutingPolicy<Candidate>({ ...DEFAULT_ROUTING, policy: name });
    const rounds: number[] = [];
    for (let r = 0; r < 7; r++) {
      const t0 = process.hrtime.bigint();
      for (let k = 0; k < 100_000; k++) policy.choose(one, new BodyRoutingRequest(hi, {}));
      rounds.push(Number(process.hrtime.bigint() - t0) / 100_000);
    }
    out.push([`${name}, the gateway bench's request ("hi", 1 worker)`, median(rounds)]);
  }
  return out;
}

// --- main ----------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const conversations = workload();
  const turns = conversations.reduce((a, c) => a + c.users.length, 0);
  console.log(
    `# Routing bench\n\nseed ${SEED}: ${CONVERSATIONS} conversations (${turns} turns) on ${SYSTEM_PROMPTS} shared system prompts, ` +
      `${USERS} closed-loop users, ${WORKERS} mock workers (max_running_requests ${WORKER.maxRunningRequests}, ` +
      `prefix cache ${WORKER.prefixCacheTokens} tokens, TTFT ${WORKER.ttftMs} ms + ${WORKER.prefillMsPerToken} ms per uncached token), ` +
      `cache_aware_max_tree_size ${TREE_CHARS}, ` +
      `Node ${process.version}.\n`,
  );
  if (!MICRO_ONLY) {
    const results: RunResult[] = [];
    for (const policy of POLICIES) {
      process.stderr.write(`running ${policy}...\n`);
      results.push(await run(policy, conversations));
    }
    console.log(
      "| policy | hit ratio | TTFT p50 (ms) | TTFT p99 (ms) | imbalance (max/mean) | instant max/mean | mean in flight | requests (errors) | wall (s) |",
    );
    console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of results) {
      console.log(
        `| ${r.policy} | ${fmtFixed((100 * r.cachedTokens) / Math.max(1, r.promptTokens), 1)}% | ${fmtFixed(percentile(r.ttftMs, 50), 1)} | ` +
          `${fmtFixed(percentile(r.ttftMs, 99), 1)} | ${fmtFixed(r.imbalance, 2)} | ${fmtFixed(r.instantImbalance, 2)} | ` +
          `${fmtFixed(r.meanInflight, 1)} | ${fmtInt(r.requests)} (${r.errors}) | ${fmtFixed(r.wallSecs, 1)} |`,
      );
    }
    console.log("");
    for (const r of results) if (r.reasons !== "") console.log(`- ${r.policy} choices: ${r.reasons}`);
    const ca = results.find((r) => r.policy === "cache_aware");
    const oracle = results.find((r) => r.policy === "oracle");
    if (ca !== undefined && oracle !== undefined) {
      const share =
        ca.cachedTokens /
        Math.max(1, ca.promptTokens) /
        (oracle.cachedTokens / Math.max(1, oracle.promptTokens));
      console.log(
        `\nTargets: cache_aware reaches ${fmtFixed(100 * share, 1)}% of the oracle's hit ratio (>= 90%: ${share >= 0.9 ? "yes" : "NO"}), ` +
          `imbalance ${fmtFixed(ca.imbalance, 2)} (< 1.5: ${ca.imbalance < 1.5 ? "yes" : "NO"}).`,
      );
    }
  }
  if (!NO_MICRO) {
    console.log("\n| one choice (4 candidates, warm tree) | ns |\n|---|---:|");
    for (const [name, ns] of micro(conversations)) console.log(`| ${name} | ${fmtInt(ns)} |`);
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
