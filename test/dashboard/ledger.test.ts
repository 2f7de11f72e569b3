/**
 * The dashboard's last hour, from the ledger's per-minute rollups: read through the DuckDB sink's
 * thread (the one instance that holds the file) and PostgreSQL's pool, in the background, and equal
 * to the outcome records the gateway emitted; the admin status names the ledger's state; in
 * Chromium, the page shows the last hour.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, type TestContext, test } from "node:test";
import type { DashboardSnapshot } from "../../src/dashboard/snapshot.js";
import type { LedgerTarget } from "../../src/ledger/target.js";
import { assertOk, type Fleet, waitFor } from "../helpers/harness.js";
import { postgresSchema, tempDir } from "../ledger/services.js";
import { dashboardFleet, launchChromium, snapshotOf, TOKEN } from "./helpers.js";

async function ledgerFleet(t: TestContext, target: LedgerTarget): Promise<Fleet> {
  return dashboardFleet(t, { gateway: { ledger: { target, replica: "replica-a" } } });
}

/** Some served requests and some refused ones (etl crosses its budget), all written and rolled up. */
async function traffic(fleet: Fleet): Promise<void> {
  for (let i = 0; i < 3; i++) assertOk(await fleet.chatAs("acme"));
  for (let i = 0; i < 8; i++) await fleet.chatAs("etl");
  await fleet.gateway.ledger!.flush();
}

/** Polls the snapshot until its last hour counts every request (the read runs in the background). */
async function lastHour(fleet: Fleet): Promise<DashboardSnapshot["last_hour"]> {
  let hour: DashboardSnapshot["last_hour"] | undefined;
  await waitFor(
    async () => {
      hour = (await snapshotOf(fleet)).last_hour;
      // Until the rollups are read the gateway's own count stands in for them: wait for the read.
      return (
        hour.read_at_ms !== null &&
        hour.totals.requests === fleet.outcomes.length &&
        hour.minutes.every((m) => m.source === "ledger")
      );
    },
    "the last hour counts every request, read from the rollups",
    { timeoutMs: 10_000, intervalMs: 100 },
  );
  return hour!;
}

function assertMatchesOutcomes(fleet: Fleet, hour: DashboardSnapshot["last_hour"]): void {
  const outcomes = fleet.outcomes;
  assert.equal(hour.error, null);
  assert.ok(hour.read_at_ms !== null, "the rollups were read");
  const sum = (f: (o: (typeof outcomes)[number]) => number | undefined) =>
    outcomes.reduce((a, o) => a + (f(o) ?? 0), 0);
  assert.deepEqual(hour.totals, {
    requests: outcomes.length,
    rejected: outcomes.filter((o) => o.admission === "rejected").length,
    input_tokens: sum((o) => o.inputTokens),
    output_tokens: sum((o) => o.outputTokens),
    cost_usd: 0,
  });
  assert.ok(hour.totals.rejected >= 1, "etl was refused");
  const minutes = new Set(outcomes.map((o) => Math.floor(o.tsMs / 60_000) * 60_000));
  assert.deepEqual(
    hour.minutes.map((m) => m.minute_ms),
    [...minutes].sort((a, b) => a - b),
  );
  const okCount = outcomes.filter((o) => o.outcome === "ok").length;
  assert.equal(
    hour.minutes.reduce((a, m) => a + (m.by_outcome.ok ?? 0), 0),
    okCount,
  );
  for (const tenant of ["auth:acme", "auth:etl"]) {
    const mine = outcomes.filter((o) => o.tenantId === tenant);
    const row = hour.tenants.find((r) => r.tenant === tenant);
    assert.deepEqual(row, {
      tenant,
      requests: mine.length,
      rejected: mine.filter((o) => o.admission === "rejected").length,
      input_tokens: mine.reduce((a, o) => a + (o.inputTokens ?? 0), 0),
      output_tokens: mine.reduce((a, o) => a + (o.outputTokens ?? 0), 0),
      cost_usd: 0,
    });
  }
}

describe("dashboard: the last hour from the ledger", () => {
  test("DuckDB: read through the sink's thread, equal to the outcome records; the status names the ledger", async (t) => {
    const dir = await tempDir(t);
    const path = join(dir, "ledger.duckdb");
    const fleet = await ledgerFleet(t, { kind: "duckdb", path });
    await traffic(fleet);
    const hour = await lastHour(fleet);
    assertMatchesOutcomes(fleet, hour);
    const s = await snapshotOf(fleet);
    assert.deepEqual(s.ledger, {
      sink: `duckdb:${path}`,
      up: true,
      buffered_rows: 0,
      written_rows: fleet.outcomes.length,
      dropped_rows: 0,
    });
    const status = await fleet.status();
    assert.deepEqual(status.ledger, s.ledger);
  });

  test("PostgreSQL: read through its pool, equal to the outcome records", async (t) => {
    const url = await postgresSchema(t);
    if (url === undefined) return;
    const fleet = await ledgerFleet(t, { kind: "postgres", url });
    await traffic(fleet);
    assertMatchesOutcomes(fleet, await lastHour(fleet));
  });

  test("a ledger that cannot be opened: the page's section says so, the request path is untouched", async (t) => {
    const dir = await tempDir(t);
    // A directory that does not exist: the sink cannot open, the writer retries every 10 s.
    const fleet = await ledgerFleet(t, { kind: "duckdb", path: join(dir, "missing", "ledger.duckdb") });
    assertOk(await fleet.chatAs("acme"));
    await waitFor(async () => (await snapshotOf(fleet)).ledger?.up === false, "the ledger is down");
    const s = await snapshotOf(fleet);
    assert.equal(s.ledger?.buffered_rows, 1);
    assert.equal(s.last_hour.read_at_ms, null, "nothing was read");
    // The rollups cannot be read, so the last hour is the gateway's own count: the request is there.
    assert.equal(s.last_hour.totals.requests, 1);
    assert.deepEqual(
      s.last_hour.minutes.map((m) => m.source),
      ["live"],
    );
  });

  test("in Chromium, the page shows the last hour", async (t) => {
    const context = await launchChromium(t);
    if (context === undefined) return;
    const dir = await tempDir(t);
    const fleet = await ledgerFleet(t, { kind: "duckdb", path: join(dir, "ledger.duckdb") });
    await traffic(fleet);
    const hour = await lastHour(fleet);
    const page = await context.newPage();
    await page.goto(`${fleet.gateway.adminServer!.url}/dashboard`);
    await page.locator('[data-testid="token-input"]').fill(TOKEN);
    await page.locator('[data-testid="token-submit"]').click();
    const section = page.locator('[data-testid="ledger-hour"]');
    await section.waitFor({ state: "visible" });
    const shown = async (id: string) => (await page.locator(`[data-testid="${id}"]`).textContent())?.trim();
    assert.equal(await shown("ledger-hour-requests"), String(fleet.outcomes.length));
    assert.equal(await shown("ledger-hour-rejected"), String(hour.totals.rejected));
    assert.equal(await shown("ledger-hour-input-tokens"), String(hour.totals.input_tokens));
    assert.equal(await shown("ledger-hour-output-tokens"), String(hour.totals.output_tokens));
    assert.equal(await shown("ledger-hour-minutes"), String(hour.minutes.length));
    for (const row of hour.tenants) {
      assert.equal(await shown(`ledger-tenant-${row.tenant}-requests`), String(row.requests));
      assert.equal(await shown(`ledger-tenant-${row.tenant}-rejected`), String(row.rejected));
    }
    assert.equal(await shown("ledger-state"), "up");
    assert.match((await shown("ledger-sink")) ?? "", /^duckdb:.*ledger\.duckdb$/);
    assert.equal(await page.locator('[data-testid="ledger-chart"] canvas').count(), 1, "the hour is charted");
  });
});
