/**
 * Fuzz (issue 35, item 5): random requests pipelined behind every kind of answer that closes the
 * connection — 400 unsupported_transfer_encoding / missing_host_header / invalid_request_target /
 * malformed_request, 401 before the body, 417, 505, 400 for Transfer-Encoding on HTTP/1.0, 503
 * too_many_connections, a body sent to the gateway's own path, a client's own `Connection: close` —
 * sent in the same packet, split, or while the gateway lingers. Invariants, per case: exactly one
 * answer (the early one), then the close; after every batch: the worker saw none of the pipelined
 * requests, `sluice_http_requests_total` grew by the early answers only, nothing is admitted or
 * queued; at the end, SIGTERM's drain has nothing to wait for. CI runs a bounded number of batches
 * (SLUICE_FUZZ_RUNS, default 40, at most ~15 s); SLUICE_FUZZ_SEED replays a seed.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import {
  answersCounted,
  type Case,
  caseArb,
  type Early,
  earlyArb,
  type PipeFleet,
  plan,
  renderBehind,
  renderEarly,
  startPipeFleet,
} from "./early-answers.js";
import { admissionState } from "./gateway-state.js";
import { type ExchangeResult, exchange, header, printable } from "./raw-http.js";

const RUNS = Number(process.env["SLUICE_FUZZ_RUNS"] ?? 40);
const SEED = process.env["SLUICE_FUZZ_SEED"]
  ? Number(process.env["SLUICE_FUZZ_SEED"])
  : Date.now() % 2_147_483_647;

// --- the property ---------------------------------------------------------------------------------

describe("fuzz: nothing is served behind an answer that closes the connection", { timeout: 120_000 }, () => {
  let fleet: PipeFleet;
  let closed = false;
  let seq = 0;
  const tag = Math.random().toString(36).slice(2, 8);
  before(async () => {
    fleet = await startPipeFleet();
  });
  after(async () => {
    fleet.held.destroy();
    if (!closed) {
      await fleet.capped.close();
      await fleet.gateway.close();
    }
    await fleet.worker.close();
  });

  async function runBatch(batch: Case[]): Promise<void> {
    const countedBefore = [await answersCounted(fleet.gateway), await answersCounted(fleet.capped)];
    const failures: string[] = [];
    const behindIds = new Map<string, string>();
    const earlyIds = new Map<string, Early>();
    let expectCounted = [0, 0];
    const results = await Promise.all(
      batch.map((c) => {
        const earlyId = `${tag}-${++seq}`;
        earlyIds.set(earlyId, c.early);
        const early = renderEarly(c.early, earlyId);
        const behind = c.behind
          .map((b) => {
            const id = `${tag}-${++seq}`;
            behindIds.set(id, `${c.early.kind} ${JSON.stringify(c.timing)}`);
            return renderBehind(b, id);
          })
          .join("");
        const capped = c.early.kind === "over-cap";
        expectCounted = capped
          ? [expectCounted[0]!, expectCounted[1]! + 1]
          : [expectCounted[0]! + early.counted, expectCounted[1]!];
        const all = Buffer.from(early.bytes + behind, "latin1");
        const segments = plan(c.timing, Buffer.from(early.bytes, "latin1"), Buffer.from(behind, "latin1"));
        return exchange(capped ? fleet.capped.port : fleet.gateway.port, {
          segments,
          headFirst: false,
          end: { kind: "wait", answers: 1, graceMs: 250, deadlineMs: 4000 },
        }).then((result) => ({ c, early, result, bytes: all }));
      }),
    );
    for (const { c, early, result, bytes } of results) {
      const why = (what: string, r: ExchangeResult) =>
        `${what}: ${JSON.stringify(c)}\n  sent: ${printable(bytes, 300)}\n  got: ${printable(r.data, 400)}`;
      const answers = result.parsed.responses;
      if (answers.length !== 1) failures.push(why(`${answers.length} answers, exactly 1 owed`, result));
      const first = answers[0];
      if (first !== undefined) {
        if (first.status !== early.status)
          failures.push(why(`status ${first.status}, ${early.status} owed`, result));
        const code = header(first, "x-smg-error-code");
        if (early.codes.length > 0 && !early.codes.includes(code ?? "")) {
          failures.push(why(`code ${code}, one of ${early.codes.join("/")} owed`, result));
        }
      }
      if (!result.closedByServer) failures.push(why("the gateway did not close the connection", result));
    }
    // Give a forward still on its way the time to land, then read the worker's log.
    await new Promise((resolve) => setTimeout(resolve, 30));
    for (const entry of fleet.worker.received()) {
      if (entry.id === undefined) continue;
      const behind = behindIds.get(entry.id);
      if (behind !== undefined)
        failures.push(`the worker ran ${entry.method} ${entry.path} pipelined behind ${behind}`);
      const early = earlyIds.get(entry.id);
      if (early !== undefined && early.kind !== "close") {
        failures.push(`the worker ran a request the gateway answered early: ${JSON.stringify(early)}`);
      }
    }
    fleet.worker.clearReceived();
    const countedAfter = [await answersCounted(fleet.gateway), await answersCounted(fleet.capped)];
    for (const i of [0, 1]) {
      if (countedAfter[i]! - countedBefore[i]! !== expectCounted[i]) {
        failures.push(
          `${i === 0 ? "gateway" : "capped gateway"}: sluice_http_requests_total grew by ` +
            `${countedAfter[i]! - countedBefore[i]!}, ${expectCounted[i]} answers went out`,
        );
      }
    }
    const s = admissionState(fleet.gateway);
    if (s.inflight !== 0 || s.queued !== 0)
      failures.push(`admission holds ${s.inflight} in flight, ${s.queued} queued`);
    if (failures.length > 0)
      throw new Error(`${failures.length} failure(s):\n${failures.slice(0, 5).join("\n")}`);
  }

  test(`random requests pipelined behind every early answer never reach the worker (seed ${SEED})`, {
    timeout: 60_000,
  }, async (t) => {
    t.diagnostic(`replay with SLUICE_FUZZ_SEED=${SEED}`);
    // Every kind once, whatever the generator draws.
    const kinds = fc.sample(earlyArb, { numRuns: 400, seed: SEED });
    const firsts = new Map<string, Early>();
    for (const e of kinds) if (!firsts.has(e.kind)) firsts.set(e.kind, e);
    await runBatch(
      [...firsts.values()].map((early) => ({
        early,
        behind: [{ route: "chat", tenant: 0, chunked: false, stream: false, connection: "keep-alive" }],
        timing: { kind: "together" },
      })),
    );
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(caseArb, { minLength: 1, maxLength: 8 }), async (batch) => {
        cases += batch.length;
        await runBatch(batch);
      }),
      {
        numRuns: RUNS,
        seed: SEED,
        interruptAfterTimeLimit: 15_000,
        markInterruptAsFailure: false,
        includeErrorInReport: true,
      },
    );
    t.diagnostic(`${cases} cases`);
  });

  test("SIGTERM's drain has nothing to wait for afterwards", { timeout: 20_000 }, async () => {
    closed = true;
    for (const gateway of [fleet.gateway, fleet.capped]) {
      const started = performance.now();
      await gateway.close({ drainMs: 5000 });
      const ms = performance.now() - started;
      assert.ok(ms < 1000, `the drain waited ${Math.round(ms)} ms`);
    }
    const waited = fleet.logs.filter((l) => l.msg.startsWith("draining: waiting"));
    assert.deepEqual(
      waited.map((l) => l["requests"]),
      [],
      "requests in the drain count after the pipelining",
    );
  });
});
