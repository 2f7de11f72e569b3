/**
 * Fuzz: generated raw HTTP requests against a real gateway (auth on, three tenants, the priority
 * scheduler, capacity 4), in concurrent batches, with the invariants of test/fuzz/fleet.ts checked
 * after every batch. CI runs a bounded number of batches (SLUICE_FUZZ_RUNS, default 40, and at most
 * ~20 s); SLUICE_FUZZ_SEED replays a seed. `npm run fuzz -- --runs 100000` is the long version.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import fc from "fast-check";
import { batchArb, type FuzzCase, render, TENANT_KEYS } from "./cases.js";
import { FuzzFleet, summarizeViolations } from "./fleet.js";
import { KNOWN, line, valid } from "./known.js";
import { exchange } from "./raw-http.js";

const RUNS = Number(process.env["SLUICE_FUZZ_RUNS"] ?? 40);
const SEED = process.env["SLUICE_FUZZ_SEED"]
  ? Number(process.env["SLUICE_FUZZ_SEED"])
  : Date.now() % 2_147_483_647;

describe("fuzz: raw requests against the gateway", { timeout: 120_000 }, () => {
  let fleet: FuzzFleet;
  before(async () => {
    fleet = await FuzzFleet.start();
  });
  after(async () => {
    await fleet.close();
  });

  /** Runs one batch; on a violation, replaces the fleet (so shrinking starts clean) and throws. */
  async function check(batch: FuzzCase[]): Promise<void> {
    const report = await fleet.runBatch(batch);
    if (report.violations.length === 0 && !report.poisoned) return;
    const errors = fleet.errorLogs.slice(0, 3);
    await fleet.close().catch(() => {});
    fleet = await FuzzFleet.start();
    throw new Error(
      `${report.violations.length} violation(s) in a batch of ${batch.length}:\n${summarizeViolations(report.violations, 1)}` +
        (errors.length > 0 ? `\ngateway errors:\n${errors.join("")}` : ""),
    );
  }

  test("every known finding of issues 8 and 18 keeps the invariants", { timeout: 30_000 }, async () => {
    // Every batch runs, so one report lists every finding that is back.
    const failures: string[] = [];
    for (const batch of KNOWN) await check(batch).catch((err: Error) => failures.push(err.message));
    assert.equal(failures.length, 0, failures.join("\n\n"));
  });

  test(`generated batches keep the invariants (seed ${SEED})`, { timeout: 60_000 }, async (t) => {
    t.diagnostic(`replay with SLUICE_FUZZ_SEED=${SEED}`);
    const started = performance.now();
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(batchArb(10), async (batch) => {
        cases += batch.length;
        await check(batch);
      }),
      {
        numRuns: RUNS,
        seed: SEED,
        interruptAfterTimeLimit: 20_000,
        markInterruptAsFailure: false,
        includeErrorInReport: true,
      },
    );
    t.diagnostic(`${cases} cases in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  });

  test("no run of asterisk- and absolute-form requests stops the gateway serving (issue 18, finding 1)", {
    timeout: 30_000,
  }, async () => {
    // More than the 256 that wedged d323dbc (its upstream pool's connection count).
    const targets = ["*", "ftp://host/x", "*?x", "ftp://host/y"];
    const statuses = new Map<string, number>();
    let sent = 0;
    while (sent < 320) {
      const wave = Array.from({ length: 16 }, (_, i) => {
        const c = valid({
          line: line(i % 5 === 0 ? "OPTIONS" : "POST", targets[(sent + i) % targets.length]!),
        });
        return exchange(fleet.gateway.port, render(c, `wedge-${sent + i}`).plan);
      });
      for (const r of await Promise.all(wave)) {
        const status = String(r.parsed.responses[0]?.status ?? "no answer");
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
      sent += wave.length;
    }
    // First what matters most: the gateway still serves.
    const violations: Parameters<FuzzFleet["probe"]>[0] = [];
    assert.ok(await fleet.probe(violations), summarizeViolations(violations));
    for (const key of TENANT_KEYS) {
      const body = JSON.stringify({
        model: "mock-llm",
        messages: [{ role: "user", content: "x" }],
        max_tokens: 1,
      });
      const r = await exchange(fleet.gateway.port, {
        segments: [
          {
            bytes: Buffer.from(
              `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\n` +
                `content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
            ),
            delayMs: 0,
          },
        ],
        headFirst: false,
        end: { kind: "wait", answers: 1, graceMs: 0, deadlineMs: 5000 },
      });
      assert.equal(r.parsed.responses[0]?.status, 200);
    }
    // Then: each was refused by the gateway itself (400), and none reached the worker.
    assert.deepEqual(
      [...statuses.keys()],
      ["400"],
      `answers: ${JSON.stringify(Object.fromEntries(statuses))}`,
    );
    assert.equal(
      fleet.worker.received().filter((e) => e.id?.startsWith("wedge-")).length,
      0,
      "the worker received none of them",
    );
  });
});
