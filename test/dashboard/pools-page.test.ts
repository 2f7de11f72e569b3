/**
 * The dashboard of a two-pool fleet in real headless Chromium at 1280x800, after traffic in both
 * pools and fifty identical refusals: each pool shows under its name (the `model` label of
 * sluice_pool_*) with its own per-class rows equal to /metrics, a class with nothing in flight is
 * 0% busy; the fifty refusals are one row with a count of fifty and the page does not grow with
 * them; no two visible sibling elements overlap, nor do the charts' axis labels; table headers sit
 * over their columns; every time shown is 24-hour; the last hour has points after a few seconds.
 * A screenshot is written under a temp dir (and test-output/dashboard-pools.png).
 *
 * Skipped with how to install Chromium when /usr/bin/chromium is missing (fails in CI instead).
 */
import assert from "node:assert/strict";
import { copyFile, mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { Page } from "playwright-core";
import {
  assertError,
  assertOk,
  type Fleet,
  type Held,
  metric,
  schedulerDoc,
  startFleet,
  waitFor,
} from "../helpers/harness.js";
import { launchChromium, TOKEN } from "./helpers.js";

const BIG = "llama-70b";
const SMALL = "llama-8b";
const CLASSES = ["system", "interactive", "default", "bulk"] as const;
const OUTPUT_DIR = new URL("../../test-output/", import.meta.url).pathname;
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const SLOW = { "x-mock-ttft-ms": "120000" };

/** Two pools: the big model's one worker has 2 slots, the small model's 4; bulk queues hold 1. */
function twoPools(t: Parameters<typeof startFleet>[0]): Promise<Fleet> {
  return startFleet(t, {
    workers: [
      { model: BIG, strictModels: true, maxRunningRequests: 2 },
      { model: SMALL, strictModels: true, maxRunningRequests: 4 },
    ],
    schedulerYaml: schedulerDoc({ classes: { bulk: { queue_size: 1 } } }),
    tenants: ["acme", "etl"],
    adminToken: TOKEN,
  });
}

const byTestId = (page: Page, id: string) => page.locator(`[data-testid="${id}"]`);

async function shown(page: Page, id: string): Promise<number> {
  const t = ((await byTestId(page, id).textContent()) ?? "").trim();
  assert.match(t, /^\d+$/, `${id} shows a whole number, got ${JSON.stringify(t)}`);
  return Number(t);
}

async function updatedAt(page: Page): Promise<number> {
  return Number((await byTestId(page, "last-update").getAttribute("data-value")) ?? 0);
}

/** Waits for a page update that started after now. */
async function nextUpdate(page: Page): Promise<void> {
  const after = Date.now();
  await waitFor(async () => (await updatedAt(page)) > after, "a page update", {
    timeoutMs: 5000,
    intervalMs: 50,
  });
}

interface AxisReport {
  chart: string;
  axis: number;
  values: string[];
  problems: string[];
}

const PROBES = new URL("./layout-probes.js", import.meta.url);

/** Runs one of layout-probes.js's probes in the page (loaded into it once). */
async function probe<T>(page: Page, call: string): Promise<T> {
  if (!(await page.evaluate("typeof window.sluiceProbes === 'object'")))
    await page.evaluate(await readFile(PROBES, "utf8"));
  return (await page.evaluate(`window.sluiceProbes.${call}`)) as T;
}

describe("dashboard of a two-pool fleet in Chromium", () => {
  test("per pool, grouped rejections, nothing overlaps, aligned headers, 24-hour times, the last hour from the start", async (t) => {
    const context = await launchChromium(t, { width: 1280, height: 800 });
    if (context === undefined) return;
    const fleet = await twoPools(t);
    assert.deepEqual(
      fleet.gateway.pools.all.map((p) => p.name),
      [BIG, SMALL],
    );

    // Traffic in both pools, and requests held: the big pool full of default, one bulk queued; the
    // small pool running one interactive.
    for (let i = 0; i < 3; i++) {
      assertOk(await fleet.chatAs("acme", { model: BIG }));
      assertOk(await fleet.chatAs("etl", { model: SMALL }));
    }
    const held: Held[] = [
      fleet.holdAs("acme", { model: BIG }, SLOW),
      fleet.holdAs("acme", { model: BIG }, SLOW),
      fleet.holdAs("etl", { model: SMALL }, { ...SLOW, "x-smg-priority": "interactive" }),
    ];
    t.after(async () => {
      for (const h of held) await h.cancel();
    });
    const big = () => fleet.gateway.pools.find(BIG)!.admission.snapshot().classes!;
    const small = () => fleet.gateway.pools.find(SMALL)!.admission.snapshot().classes!;
    await waitFor(
      () => big().default.inflight === 2 && small().interactive.inflight === 1,
      "requests in flight",
    );
    held.push(fleet.holdAs("acme", { model: BIG }, { ...SLOW, "x-smg-priority": "bulk" }));
    await waitFor(() => big().bulk.queued === 1, "one bulk request queued in the big pool");
    assertError(
      await fleet.chatAs("acme", { model: BIG }, { "x-smg-priority": "bulk" }),
      429,
      "scheduler_queue_full",
    );

    const page = await context.newPage();
    const problems: string[] = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(`console: ${m.text()}`);
    });
    await page.goto(`${fleet.gateway.adminServer!.url}/dashboard`);
    await byTestId(page, "token-input").fill(TOKEN);
    await byTestId(page, "token-submit").click();
    await byTestId(page, "dashboard").waitFor({ state: "visible" });
    await nextUpdate(page);
    const heightBefore = (await page.evaluate("document.documentElement.scrollHeight")) as number;

    // Forty-nine more of the same refusal: fifty in all, one group.
    for (let i = 0; i < 49; i++)
      assertError(
        await fleet.chatAs("acme", { model: BIG }, { "x-smg-priority": "bulk" }),
        429,
        "scheduler_queue_full",
      );

    // A few seconds of samples, then the page against /metrics, within one update.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const scrape = await fleet.scrape();
    await nextUpdate(page);

    // 1. Each pool under its name, its own class rows equal to sluice_pool_*{model}.
    for (const pool of [BIG, SMALL]) {
      assert.equal(((await byTestId(page, `pool-${pool}-name`).textContent()) ?? "").trim(), pool);
      assert.equal(
        await shown(page, `pool-${pool}-capacity`),
        metric(scrape, "sluice_pool_capacity", { model: pool }),
      );
      assert.equal(
        await shown(page, `pool-${pool}-inflight`),
        metric(scrape, "sluice_pool_inflight", { model: pool }),
      );
      assert.equal(
        await shown(page, `pool-${pool}-queued`),
        metric(scrape, "sluice_pool_queued", { model: pool }),
      );
      for (const cls of CLASSES) {
        const labels = { model: pool, class: cls };
        const inflight = metric(scrape, "sluice_pool_class_inflight", labels)!;
        assert.equal(
          await shown(page, `pool-${pool}-class-${cls}-inflight`),
          inflight,
          `${pool} ${cls} in flight`,
        );
        assert.equal(
          await shown(page, `pool-${pool}-class-${cls}-queued`),
          metric(scrape, "sluice_pool_class_queued", labels),
          `${pool} ${cls} queued`,
        );
        // Busy is the class's own in flight against its pool's capacity: none in flight, 0%.
        const busy = ((await byTestId(page, `pool-${pool}-class-${cls}-busy`).textContent()) ?? "").trim();
        const capacity = metric(scrape, "sluice_pool_capacity", { model: pool })!;
        assert.match(
          busy,
          new RegExp(`^${Math.round((inflight / capacity) * 100)}% busy`),
          `${pool} ${cls}: ${busy}`,
        );
      }
    }
    assert.equal(await shown(page, `pool-${BIG}-class-default-inflight`), 2);
    assert.equal(await shown(page, `pool-${BIG}-class-bulk-queued`), 1);
    assert.equal(await shown(page, `pool-${SMALL}-class-interactive-inflight`), 1);
    assert.equal(
      await shown(page, `pool-${SMALL}-class-default-inflight`),
      0,
      "the big pool's queue is not the small one's",
    );
    // The fleet totals are still there.
    assert.equal(
      await shown(page, "class-default-inflight"),
      metric(scrape, "smg_scheduler_inflight", { class: "default" }),
    );
    assert.match((await byTestId(page, "fleet-title").textContent()) ?? "", /All 2 pools/);

    // 2. Fifty identical refusals are one row with a count of fifty; the page did not grow by them.
    const groups = page.locator('[data-testid="rejection-group"]');
    assert.equal(await groups.count(), 1);
    assert.equal(await groups.getAttribute("data-code"), "scheduler_queue_full");
    assert.equal(await groups.getAttribute("data-pool"), BIG);
    assert.equal(await groups.getAttribute("data-tenant"), "auth:acme");
    assert.equal(
      ((await groups.locator('[data-testid="rejection-count"]').textContent()) ?? "").trim(),
      "50",
    );
    const height = (await page.evaluate("document.documentElement.scrollHeight")) as number;
    t.diagnostic(`page height ${heightBefore} px after one refusal, ${height} px after fifty`);
    assert.ok(height - heightBefore < 40, `fifty refusals grew the page by ${height - heightBefore} px`);
    assert.ok(height < 3000, `the page is ${height} px tall`);

    // 3. Nothing overlaps: sibling boxes, and each chart's axis labels.
    assert.deepEqual(await probe<string[]>(page, "overlappingSiblings()"), []);
    const axes = await probe<AxisReport[]>(page, "axisLabels()");
    assert.equal(axes.length, 4, "two charts, two axes each");
    for (const a of axes) {
      assert.ok(a.values.length >= 2, `${a.chart} axis ${a.axis} has labels: ${a.values.join(" ")}`);
      assert.deepEqual(a.problems, [], `${a.chart} axis ${a.axis}: ${a.values.join(" | ")}`);
    }

    // 4. Headers over their columns.
    assert.deepEqual(await probe<string[]>(page, "misalignedColumns()"), []);

    // 5. Every time is 24-hour HH:MM or HH:MM:SS.
    const times = await probe<string[]>(page, "timesShown()");
    assert.ok(times.length >= 5, `times shown: ${times.join(" ")}`);
    for (const time of times)
      assert.match(time, /^\d{2}:\d{2}(:\d{2})?$/, `a time shown: ${JSON.stringify(time)}`);
    assert.doesNotMatch((await page.locator("body").innerText()) ?? "", /\d\s?(am|pm)\b/i);

    // 6. The last hour has points from the first request on (no ledger here: the gateway's own count).
    assert.ok((await shown(page, "ledger-hour-requests")) >= 56, "every finished request so far");
    assert.ok((await shown(page, "ledger-hour-minutes")) >= 1);
    const charted = await probe<number>(page, 'pointsAboveZero("ledger-chart")');
    assert.ok(charted >= 1, `the last hour's chart has points (${charted})`);

    // 7. A screenshot: a PNG, looked at by a person when the layout changes.
    const dir = await mkdtemp(join(tmpdir(), "sluice-dashboard-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const file = join(dir, "dashboard-pools.png");
    await page.screenshot({ path: file, fullPage: true });
    const png = await readFile(file);
    assert.ok(png.length > 10_000, `a screenshot of ${png.length} bytes`);
    assert.deepEqual(png.subarray(0, 8), PNG_SIGNATURE);
    await mkdir(OUTPUT_DIR, { recursive: true });
    await copyFile(file, join(OUTPUT_DIR, "dashboard-pools.png"));

    assert.deepEqual(problems, [], "no script error, no CSP violation");
  });
});
