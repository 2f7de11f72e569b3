/**
 * The dashboard in real headless Chromium (Debian's `chromium`, driven by playwright-core): without
 * a token the page asks for one and shows no data; a wrong token is refused on the page; with the
 * token it updates live, and after load (served requests, a tenant over its budget, a full queue,
 * requests held in flight and queued) the numbers it shows are /metrics' within one update, and its
 * rejections carry the codes and request ids the clients got. The token is kept for the tab
 * (a reload keeps it, a new tab asks again). A screenshot goes to test-output/dashboard.png.
 *
 * Skipped with how to install Chromium when /usr/bin/chromium is missing (fails in CI instead).
 */
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { Page } from "playwright-core";
import { type Fleet, metric, type Scrape, waitFor } from "../helpers/harness.js";
import { dashboardFleet, driveLoad, launchChromium, requestIdOf, TOKEN } from "./helpers.js";

const OUTPUT_DIR = new URL("../../test-output/", import.meta.url).pathname;

/** A page of its own (a new tab) that records what it asked for and anything that went wrong. */
async function openTab(context: NonNullable<Awaited<ReturnType<typeof launchChromium>>>) {
  const page = await context.newPage();
  const requests: string[] = [];
  const problems: string[] = [];
  page.on("request", (r) => requests.push(new URL(r.url()).pathname));
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // A refused token is a 401 the browser logs as a failed resource; anything else is a problem.
    if (m.type() === "error" && !/status of 401/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return { page, requests, problems };
}

const byTestId = (page: Page, id: string) => page.locator(`[data-testid="${id}"]`);

async function text(page: Page, id: string): Promise<string> {
  return (await byTestId(page, id).textContent())?.trim() ?? "";
}

/** A whole number the page shows (its text, not a hidden attribute). */
async function shown(page: Page, id: string): Promise<number> {
  const t = await text(page, id);
  assert.match(t, /^\d+$/, `${id} shows a whole number, got ${JSON.stringify(t)}`);
  return Number(t);
}

/** The snapshot time of the page's last update. */
async function updatedAt(page: Page): Promise<number> {
  return Number((await byTestId(page, "last-update").getAttribute("data-value")) ?? 0);
}

/** Scrapes /metrics, then waits for the page's next update after it. */
async function scrapeThenUpdate(fleet: Fleet, page: Page): Promise<Scrape> {
  const scrape = await fleet.scrape();
  const scrapedAt = Date.now();
  await waitFor(async () => (await updatedAt(page)) > scrapedAt, "a page update after the scrape", {
    timeoutMs: 5000,
    intervalMs: 50,
  });
  return scrape;
}

describe("dashboard in Chromium", () => {
  test("asks for the token, refuses a wrong one, and shows live numbers that match /metrics", async (t) => {
    const context = await launchChromium(t);
    if (context === undefined) return;
    const fleet = await dashboardFleet(t);
    const pageUrl = `${fleet.gateway.adminServer!.url}/dashboard`;

    // 1. No token: the prompt, no data, and no data call made.
    const first = await openTab(context);
    const { page } = first;
    await page.goto(pageUrl);
    await byTestId(page, "token-form").waitFor({ state: "visible" });
    assert.equal(await byTestId(page, "dashboard").isVisible(), false);
    assert.equal(await byTestId(page, "gateway-capacity").count(), 0, "no data without a token");
    assert.deepEqual(
      first.requests.filter((p) => p.startsWith("/api/")),
      [],
      "the page asks the API nothing before it has a token",
    );

    // 2. A wrong token: refused on the page, asked again, nothing kept.
    await byTestId(page, "token-input").fill("not-the-token");
    await byTestId(page, "token-submit").click();
    await byTestId(page, "token-error").waitFor({ state: "visible" });
    assert.match(await text(page, "token-error"), /refused.*401 invalid_admin_token/);
    assert.equal(await byTestId(page, "connection-state").getAttribute("data-state"), "refused");
    assert.equal(await byTestId(page, "dashboard").isVisible(), false);
    assert.equal(await byTestId(page, "token-form").isVisible(), true);
    assert.equal(await page.evaluate("sessionStorage.length"), 0, "no token kept");

    // 3. The token: live numbers.
    await byTestId(page, "token-input").fill(TOKEN);
    await byTestId(page, "token-submit").click();
    await byTestId(page, "dashboard").waitFor({ state: "visible" });
    await waitFor(
      async () => (await byTestId(page, "connection-state").getAttribute("data-state")) === "live",
      "the page streams live",
    );
    assert.equal(await byTestId(page, "token-form").isVisible(), false);
    const before = await updatedAt(page);
    await waitFor(async () => (await updatedAt(page)) > before, "the page updates by itself", {
      timeoutMs: 5000,
      intervalMs: 50,
    });
    assert.equal(await text(page, "gateway-admission-mode"), "priority scheduler");

    // 4. Load, then every number against /metrics, within one update.
    const load = await driveLoad(fleet);
    const scrape = await scrapeThenUpdate(fleet, page);
    assert.equal(await shown(page, "gateway-capacity"), metric(scrape, "sluice_capacity"));
    assert.equal(await shown(page, "gateway-healthy-workers"), metric(scrape, "sluice_workers_healthy"));
    for (const cls of ["system", "interactive", "default", "bulk"]) {
      const labels = { class: cls };
      assert.equal(
        await shown(page, `class-${cls}-inflight`),
        metric(scrape, "smg_scheduler_inflight", labels),
      );
      assert.equal(
        await shown(page, `class-${cls}-queued`),
        metric(scrape, "smg_scheduler_queue_depth", labels),
      );
      assert.equal(
        await shown(page, `class-${cls}-queue-limit`),
        metric(scrape, "smg_scheduler_queue_size_limit", labels),
      );
      assert.equal(
        await shown(page, `wait-${cls}-total-count`),
        metric(scrape, "smg_scheduler_queue_wait_seconds_count", labels),
      );
    }
    assert.equal(await shown(page, "class-default-inflight"), 2);
    assert.equal(await shown(page, "class-bulk-queued"), 1);
    const statuses = scrape.samples.get("sluice_http_requests_total") ?? [];
    assert.deepEqual(statuses.map((s) => s.labels.status).sort(), ["200", "403", "429"]);
    for (const s of statuses) {
      assert.equal(
        await shown(page, `outcome-status-${s.labels.status}-total`),
        s.value,
        `status ${s.labels.status}`,
      );
    }
    assert.equal(await shown(page, "outcome-status-200-total"), load.served);
    assert.equal(await shown(page, "outcome-code-tenant_budget_exhausted-total"), 1);
    assert.equal(await shown(page, "outcome-code-scheduler_queue_full-total"), 1);
    for (const tenant of ["auth:acme", "auth:etl"]) {
      const tokens =
        (metric(scrape, "sluice_tenant_tokens_total", { tenant, direction: "input" }) ?? 0) +
        (metric(scrape, "sluice_tenant_tokens_total", { tenant, direction: "output" }) ?? 0);
      assert.equal(await shown(page, `tenant-${tenant}-tokens-total`), tokens, `${tenant} tokens`);
    }
    // Both tenants used tokens in the window: their weight shares are 3:1.
    assert.equal(await text(page, "tenant-auth:acme-weight-share"), "75.0%");
    assert.equal(await text(page, "tenant-auth:etl-weight-share"), "25.0%");
    const remaining = metric(scrape, "sluice_budget_remaining", {
      tenant: "auth:etl",
      budget: "budget_tokens",
    })!;
    const limit = await shown(page, "tenant-auth:etl-budget-budget_tokens-limit");
    assert.equal(await shown(page, "tenant-auth:etl-budget-budget_tokens-used"), limit - remaining);
    assert.match(await text(page, "tenant-auth:etl-budget-budget_tokens-state"), /100% used up/);

    // The rejections, grouped by code, tenant and pool (one each here), last seen first, with the
    // last request id the clients got.
    const rows = page.locator('[data-testid="rejection-group"]');
    assert.equal(await rows.count(), 2);
    const seen = [];
    for (let i = 0; i < 2; i++) {
      const row = rows.nth(i);
      seen.push([
        (await row.locator('[data-testid="rejection-request-id"]').textContent())?.trim(),
        (await row.locator('[data-testid="rejection-code"]').textContent())?.trim(),
        (await row.locator('[data-testid="rejection-status"]').textContent())?.trim(),
      ]);
    }
    assert.deepEqual(seen, [
      [requestIdOf(load.queueFull), "scheduler_queue_full", "429 refused"],
      [requestIdOf(load.overBudget), "tenant_budget_exhausted", "403 refused"],
    ]);

    // Every colour has words beside it: no badge without a label.
    const badges = page.locator(".badge");
    assert.ok((await badges.count()) > 10, "the page has status badges");
    for (const label of await badges.locator(".label").allTextContents())
      assert.ok(label.trim().length > 0, "a badge has words");
    assert.equal(await badges.count(), await badges.locator(".label").count());

    await mkdir(OUTPUT_DIR, { recursive: true });
    const screenshot = join(OUTPUT_DIR, "dashboard.png");
    await page.screenshot({ path: screenshot, fullPage: true });
    t.diagnostic(`dashboard screenshot: ${screenshot}`);

    // 5. The token is kept for the tab: a reload streams at once; a new tab asks again.
    await page.reload();
    await byTestId(page, "dashboard").waitFor({ state: "visible" });
    assert.equal(await byTestId(page, "token-form").isVisible(), false);
    const other = await openTab(context);
    await other.page.goto(pageUrl);
    await byTestId(other.page, "token-form").waitFor({ state: "visible" });
    assert.equal(await byTestId(other.page, "dashboard").isVisible(), false);

    // 6. Forgetting the token stops the stream.
    await byTestId(page, "forget-token").click();
    await byTestId(page, "token-form").waitFor({ state: "visible" });
    await waitFor(() => fleet.gateway.dashboard!.watchers === 0, "the stream closed");

    assert.deepEqual([...first.problems, ...other.problems], [], "no script error, no CSP violation");
    for (const held of load.held) await held.cancel();
  });
});
