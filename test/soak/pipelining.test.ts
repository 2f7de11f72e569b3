/**
 * The pipelining soak (issue 35, item 5): for SLUICE_PIPELINING_SOAK_SECS seconds (default 15),
 * clients keep opening connections that get an early answer (every kind of test/fuzz/early-answers.ts)
 * with random requests pipelined behind it, beside steady valid traffic on the same gateway. On
 * 40ea629, 4,000 such connections left 116,000 requests in the drain count. Checks at the end:
 * - the worker never saw a pipelined request, nor an early-answered one;
 * - every attacking connection got exactly its one answer, then the close; every valid request 200;
 * - `sluice_http_requests_total` counted exactly the answers that went out;
 * - nothing admitted, queued or open at the worker; no client connection left;
 * - heap after GC at the end within 25% (+4 MB) of the mark a quarter in (no per-connection state
 *   kept);
 * - SIGTERM's drain has nothing to wait for: the close with a 10 s drain takes under a second.
 * SLUICE_SOAK_SEED replays a seed.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import fc from "fast-check";
import { Agent, request } from "undici";
import { TENANT_KEYS } from "../fuzz/cases.js";
import {
  answersCounted,
  caseArb,
  plan,
  renderBehind,
  renderEarly,
  startPipeFleet,
} from "../fuzz/early-answers.js";
import { gatewaySockets } from "../fuzz/fleet.js";
import { admissionState } from "../fuzz/gateway-state.js";
import { exchange, header } from "../fuzz/raw-http.js";

const SECS = Number(process.env["SLUICE_PIPELINING_SOAK_SECS"] ?? 15);
const SEED = process.env["SLUICE_SOAK_SEED"]
  ? Number(process.env["SLUICE_SOAK_SEED"])
  : Date.now() % 2_147_483_647;
/** Connections at once that pipeline behind early answers, and valid clients beside them. */
const ATTACKERS = 24;
const VALID_CLIENTS = 4;

function gcFunction(): () => void {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (existing) return existing;
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

function heapMb(gc: () => void): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

test(`soak: ${SECS} s of requests pipelined behind early answers, beside valid traffic (seed ${SEED})`, {
  timeout: SECS * 1000 + 60_000,
}, async (t) => {
  t.diagnostic(`replay with SLUICE_SOAK_SEED=${SEED}`);
  const gc = gcFunction();
  const fleet = await startPipeFleet({ workerCapacity: 16 });
  let closed = false;
  t.after(async () => {
    fleet.held.destroy();
    if (!closed) {
      await fleet.capped.close();
      await fleet.gateway.close();
    }
    await fleet.worker.close();
  });

  const failures: string[] = [];
  const fail = (what: string) => {
    if (failures.length < 20) failures.push(what);
  };
  const early = new Map<string, string>();
  const behind = new Map<string, string>();
  let seq = 0;
  let connections = 0;
  let pipelined = 0;
  let expected = [0, 0];
  let valid = 0;
  const started = performance.now();
  const running = () => performance.now() - started < SECS * 1000;

  // Ids of finished exchanges: forgotten one audit later (a forward would have landed by then), so
  // the soak's own memory stays flat.
  let settled: string[] = [];
  let settledBefore: string[] = [];
  /** Reads the worker's log: none of the early-answered or pipelined requests may be in it. */
  const audit = () => {
    for (const entry of fleet.worker.received()) {
      if (entry.id === undefined) continue;
      const b = behind.get(entry.id);
      if (b !== undefined) fail(`the worker ran ${entry.method} ${entry.path} pipelined behind ${b}`);
      const e = early.get(entry.id);
      if (e !== undefined) fail(`the worker ran a request answered early: ${e}`);
    }
    fleet.worker.clearReceived();
    for (const id of settledBefore) {
      early.delete(id);
      behind.delete(id);
    }
    settledBefore = settled;
    settled = [];
  };

  async function attacker(n: number): Promise<void> {
    for (let i = 0; running(); i++) {
      const [c] = fc.sample(caseArb, { numRuns: 1, seed: SEED + n * 1_000_003 + i });
      const earlyId = `e-${++seq}`;
      const rendered = renderEarly(c!.early, earlyId);
      const ids = [earlyId];
      // A request that itself said Connection: close is served: the worker sees it, once.
      if (c!.early.kind !== "close") early.set(earlyId, c!.early.kind);
      const bytes = c!.behind
        .map((b) => {
          const id = `b-${++seq}`;
          ids.push(id);
          behind.set(id, c!.early.kind);
          pipelined++;
          return renderBehind(b, id);
        })
        .join("");
      const capped = c!.early.kind === "over-cap";
      expected = capped ? [expected[0]!, expected[1]! + 1] : [expected[0]! + rendered.counted, expected[1]!];
      connections++;
      const r = await exchange(capped ? fleet.capped.port : fleet.gateway.port, {
        segments: plan(c!.timing, Buffer.from(rendered.bytes, "latin1"), Buffer.from(bytes, "latin1")),
        headFirst: false,
        end: { kind: "wait", answers: 1, graceMs: 100, deadlineMs: 5000 },
      });
      settled.push(...ids);
      const answers = r.parsed.responses;
      const code = answers[0] === undefined ? undefined : header(answers[0], "x-smg-error-code");
      if (
        answers.length !== 1 ||
        answers[0]!.status !== rendered.status ||
        (rendered.codes.length > 0 && !rendered.codes.includes(code ?? "")) ||
        !r.closedByServer
      ) {
        fail(
          `${JSON.stringify(c)}: ${answers.map((a) => a.status).join(",") || "no answer"} ${code ?? ""}` +
            `${r.closedByServer ? "" : ", not closed"}; owed ${rendered.status} ${rendered.codes.join("/")}`,
        );
      }
    }
  }

  const agent = new Agent({ connections: VALID_CLIENTS, keepAliveTimeout: 1000 });
  async function validClient(n: number): Promise<void> {
    while (running()) {
      const res = await request(`${fleet.gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${TENANT_KEYS[n % TENANT_KEYS.length]}`,
          "x-fuzz-id": `v-${++seq}`,
        },
        body: JSON.stringify({
          model: "mock-llm",
          messages: [{ role: "user", content: "soak" }],
          max_tokens: 4,
        }),
        dispatcher: agent,
      });
      await res.body.dump();
      valid++;
      expected = [expected[0]! + 1, expected[1]!];
      if (res.statusCode !== 200) fail(`a valid request got ${res.statusCode}`);
    }
  }

  let mark: number | undefined;
  const timer = setInterval(() => {
    audit();
    if (mark === undefined && performance.now() - started > (SECS * 1000) / 4) mark = heapMb(gc);
  }, 1000);
  await Promise.all([
    ...Array.from({ length: ATTACKERS }, (_, n) => attacker(n)),
    ...Array.from({ length: VALID_CLIENTS }, (_, n) => validClient(n)),
  ]);
  clearInterval(timer);
  await agent.close();
  await new Promise((resolve) => setTimeout(resolve, 100));
  audit();
  audit();

  // The clients are gone: nothing left anywhere.
  const deadline = performance.now() + 5000;
  while (gatewaySockets(fleet.gateway.port) > 0 && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const left = gatewaySockets(fleet.gateway.port);
  if (left > 0) fail(`${left} client connections left at the gateway`);
  const s = admissionState(fleet.gateway);
  if (s.inflight !== 0 || s.queued !== 0) fail(`admission in flight ${s.inflight}, queued ${s.queued}`);
  if (fleet.worker.stats().open !== 0) fail(`${fleet.worker.stats().open} requests open at the worker`);
  const counted = [await answersCounted(fleet.gateway), await answersCounted(fleet.capped)];
  if (counted[0] !== expected[0] || counted[1] !== expected[1]) {
    fail(`sluice_http_requests_total ${counted.join("/")}, answers that went out ${expected.join("/")}`);
  }
  const end = heapMb(gc);
  if (mark !== undefined && end > mark * 1.25 + 4) {
    fail(`heap after GC ${end.toFixed(1)} MB at the end, ${mark.toFixed(1)} MB a quarter in`);
  }

  // SIGTERM after all that: nothing to wait for.
  closed = true;
  const drainStarted = performance.now();
  await fleet.gateway.close({ drainMs: 10_000 });
  await fleet.capped.close({ drainMs: 10_000 });
  const drainMs = performance.now() - drainStarted;
  if (drainMs > 1000) fail(`the drain took ${Math.round(drainMs)} ms`);
  for (const line of fleet.logs.filter((l) => l.msg.startsWith("draining: waiting"))) {
    fail(`the drain waited for ${String(line["requests"])} requests`);
  }

  t.diagnostic(
    `${connections} connections answered early with ${pipelined} requests pipelined behind them, ` +
      `${valid} valid requests beside them; heap ${mark?.toFixed(1)} -> ${end.toFixed(1)} MB; drain ${Math.round(drainMs)} ms`,
  );
  assert.deepEqual(failures, [], `replay with SLUICE_SOAK_SEED=${SEED}:\n${failures.join("\n")}`);
});
