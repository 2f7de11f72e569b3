/**
 * The dashboard's HTTP side on the admin listener: the data endpoints need the admin token (401
 * invalid_admin_token otherwise) while the page and its assets need none and forbid inline script;
 * the snapshot's numbers are /metrics' numbers and its rejections are the outcome records'; the event
 * stream sends history, then a snapshot about every second, drops a client that leaves, and ends
 * when the gateway closes, which returns promptly with a stream open.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { startGatewayWithDashboard } from "../../src/dashboard/gateway-with-dashboard.js";
import { startMockWorker } from "../../src/mock-worker/index.js";
import { assertError, captureLogger, FAST_WORKER, metric, sendTo, waitFor } from "../helpers/harness.js";
import { rawExchange } from "../security/raw.js";
import {
  dashboardFleet,
  driveLoad,
  ETL_BUDGET_TOKENS,
  openEvents,
  requestIdOf,
  snapshotOf,
  snapshotsIn,
  TOKEN,
} from "./helpers.js";

const DATA_PATHS = ["/api/v1/dashboard/snapshot", "/api/v1/dashboard/events"];

describe("dashboard endpoints", () => {
  test("the data endpoints refuse a missing or wrong token with 401 invalid_admin_token", async (t) => {
    const fleet = await dashboardFleet(t);
    const refused = [null, "", "Bearer", "Bearer wrong", `Bearer ${TOKEN}x`, TOKEN, `Basic ${TOKEN}`];
    for (const path of DATA_PATHS) {
      for (const authorization of refused) {
        const reply = await fleet.admin("GET", path, undefined, authorization);
        assertError(reply, 401, "invalid_admin_token", "authentication_error");
        assert.doesNotMatch(reply.text, /"gateway"|"classes"/, "a refusal carries no data");
      }
    }
    const ok = await fleet.admin("GET", "/api/v1/dashboard/snapshot");
    assert.equal(ok.status, 200);
    assert.match(String(ok.headers["content-type"]), /^application\/json/);
  });

  test("the page and its assets need no token, have their content types and a strict CSP; nothing else is served", async (t) => {
    const fleet = await dashboardFleet(t);
    const base = fleet.gateway.adminServer!.url;
    const page = await sendTo(base, "/dashboard");
    assert.equal(page.status, 200);
    assert.equal(page.headers["content-type"], "text/html; charset=utf-8");
    const csp = String(page.headers["content-security-policy"]);
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.match(csp, /connect-src 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/);
    assert.equal(page.headers["x-content-type-options"], "nosniff");
    // No inline script, handler or style in the page: everything comes from the assets.
    assert.doesNotMatch(page.text, /<script(?![^>]*\bsrc=)[^>]*>/i);
    assert.doesNotMatch(page.text, /\son[a-z]+=|\sstyle=|<style/i);
    // Its assets are served from this origin, with no CDN anywhere.
    assert.doesNotMatch(page.text, /https?:\/\//);
    const assets: Array<[string, string, RegExp]> = [
      ["/dashboard/dashboard.js", "text/javascript; charset=utf-8", /sessionStorage/],
      ["/dashboard/dashboard.css", "text/css; charset=utf-8", /\.badge/],
      ["/dashboard/uplot.js", "text/javascript; charset=utf-8", /uPlot/],
      ["/dashboard/uplot.css", "text/css; charset=utf-8", /\.uplot/],
      ["/dashboard/favicon.svg", "image/svg+xml", /<svg/],
    ];
    for (const [path, type, body] of assets) {
      const reply = await sendTo(base, path);
      assert.equal(reply.status, 200, path);
      assert.equal(reply.headers["content-type"], type, path);
      assert.match(reply.text, body, path);
      assert.ok(page.text.includes(`"${path.slice(1)}"`), `the page links ${path} relatively`);
    }
    const head = await sendTo(base, "/dashboard", { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.text, "");
    assert.equal(Number(head.headers["content-length"]), Buffer.byteLength(page.text));
    const slash = await sendTo(base, "/dashboard/");
    assert.equal(slash.status, 308);
    assert.equal(slash.headers.location, "../dashboard");
    const post = await sendTo(base, "/dashboard", { method: "POST", body: "x" });
    assertError(post, 405, "method_not_allowed");
    assert.equal(post.headers.allow, "GET, HEAD");
    assertError(await sendTo(base, "/dashboard/nope.js"), 404, "not_found");
    // Paths that would climb out of the asset folder are just unknown paths: nothing is read.
    for (const path of [
      "/dashboard/../package.json",
      "/dashboard/..%2f..%2fpackage.json",
      "/dashboard/%2e%2e/%2e%2e/package.json",
      "/dashboard//etc/passwd",
      "/dashboard/dashboard.js/../../package.json",
    ]) {
      const raw = await rawExchange(
        fleet.gateway.adminServer!.port,
        `GET ${path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n`,
      );
      assert.equal(raw.responses.length, 1, path);
      assert.equal(raw.responses[0]!.status, 404, path);
      assert.equal(raw.responses[0]!.headers["x-smg-error-code"], "not_found", path);
      assert.doesNotMatch(raw.raw, /"name": "sluice"|root:/, path);
    }
    // The admin API beside the page still needs the token.
    assertError(await sendTo(base, "/api/v1/status"), 401, "invalid_admin_token");
  });

  test("the snapshot's numbers are /metrics' numbers, and its rejections carry the codes and request ids the clients got", async (t) => {
    const fleet = await dashboardFleet(t);
    const load = await driveLoad(fleet);
    const scrape = await fleet.scrape();
    const s = await snapshotOf(fleet);

    assert.equal(s.gateway.admission_mode, "scheduler");
    assert.equal(s.gateway.capacity, metric(scrape, "sluice_capacity"));
    assert.equal(s.gateway.capacity, 2);
    assert.equal(s.gateway.healthy_workers, metric(scrape, "sluice_workers_healthy"));
    assert.equal(s.gateway.inflight, 2);
    assert.equal(s.gateway.queued, 1);
    assert.ok(s.classes, "scheduler mode has classes");
    for (const row of s.classes) {
      const labels = { class: row.class };
      assert.equal(row.inflight, metric(scrape, "smg_scheduler_inflight", labels), `${row.class} in flight`);
      assert.equal(row.queued, metric(scrape, "smg_scheduler_queue_depth", labels), `${row.class} queued`);
      assert.equal(row.queue_limit, metric(scrape, "smg_scheduler_queue_size_limit", labels));
      const pressure = metric(scrape, "smg_scheduler_class_capacity_pressure", labels)!;
      assert.equal(row.pressure, Math.round(pressure * 1e4) / 1e4);
    }
    assert.deepEqual(
      s.classes.map((c) => [c.class, c.inflight, c.queued, c.queue_limit, c.reserved]),
      [
        ["system", 0, 0, 64, 0],
        ["interactive", 0, 0, 256, 0],
        ["default", 2, 0, 512, 0],
        ["bulk", 0, 1, 1, 0],
      ],
    );

    // Outcomes by status: the totals are sluice_http_requests_total's.
    const byStatus = new Map(s.outcomes.by_status.map((r) => [r.status, r.total]));
    for (const sample of scrape.samples.get("sluice_http_requests_total") ?? []) {
      assert.equal(byStatus.get(sample.labels.status!), sample.value, `status ${sample.labels.status}`);
    }
    assert.equal(byStatus.get("200"), load.served);
    assert.equal(byStatus.get("403"), 1);
    assert.equal(byStatus.get("429"), 1);
    const byCode = new Map(s.outcomes.by_code.map((r) => [r.code, r]));
    assert.deepEqual(byCode.get("tenant_budget_exhausted"), {
      code: "tenant_budget_exhausted",
      status: 403,
      rate: byCode.get("tenant_budget_exhausted")!.rate,
      total: 1,
    });
    assert.equal(byCode.get("scheduler_queue_full")?.total, 1);
    assert.equal(byCode.get("scheduler_queue_full")?.status, 429);

    // Queue waits: the counts are the histogram's.
    for (const row of s.queue_wait.rows) {
      const count =
        row.class === "all"
          ? (scrape.samples.get("smg_scheduler_queue_wait_seconds_count") ?? []).reduce(
              (a, m) => a + m.value,
              0,
            )
          : metric(scrape, "smg_scheduler_queue_wait_seconds_count", { class: row.class });
      assert.equal(row.total.count, count, `${row.class} queue waits`);
    }

    // Tenants: tokens are sluice_tenant_tokens_total's, budgets sluice_budget_remaining's, weights the policy's.
    const tenants = new Map(s.tenants.rows.map((r) => [r.tenant, r]));
    for (const tenant of ["auth:acme", "auth:etl"]) {
      const tokens =
        (metric(scrape, "sluice_tenant_tokens_total", { tenant, direction: "input" }) ?? 0) +
        (metric(scrape, "sluice_tenant_tokens_total", { tenant, direction: "output" }) ?? 0);
      assert.ok(tokens > 0, `${tenant} used tokens`);
      assert.equal(tenants.get(tenant)?.tokens_total, tokens, `${tenant} tokens`);
    }
    assert.equal(tenants.get("auth:acme")?.weight, 3);
    assert.equal(tenants.get("auth:etl")?.weight, 1);
    assert.equal(tenants.get("auth:acme")?.inflight, 2);
    assert.equal(tenants.get("auth:acme")?.queued, 1);
    const etlBudget = tenants.get("auth:etl")?.budgets.find((b) => b.budget === "budget_tokens");
    const remaining = metric(scrape, "sluice_budget_remaining", {
      tenant: "auth:etl",
      budget: "budget_tokens",
    });
    assert.deepEqual(etlBudget, {
      budget: "budget_tokens",
      limit: ETL_BUDGET_TOKENS,
      used: ETL_BUDGET_TOKENS - remaining!,
      remaining,
    });
    assert.equal(remaining, 0, "etl used its budget up");
    assert.deepEqual(tenants.get("auth:acme")?.budgets, [], "acme has no budget");

    // The latest rejections, newest first, with the request ids the clients got.
    assert.equal(s.rejections.total, 2);
    assert.deepEqual(
      s.rejections.rows.map((r) => [r.request_id, r.status, r.code, r.tenant, r.class]),
      [
        [requestIdOf(load.queueFull), 429, "scheduler_queue_full", "auth:acme", "bulk"],
        [requestIdOf(load.overBudget), 403, "tenant_budget_exhausted", "auth:etl", "default"],
      ],
    );
    const fromRecords = fleet.outcomes.filter((o) => o.errorCode !== undefined);
    assert.deepEqual(
      s.rejections.rows.map((r) => r.ts_ms),
      fromRecords.map((o) => Math.round(o.tsMs)).reverse(),
    );
    assert.equal(s.ledger, null);
    // No ledger: the last hour is this gateway's own count, every request of this test in it.
    assert.equal(s.last_hour.from_ledger, false);
    assert.equal(s.last_hour.totals.requests, fleet.outcomes.length);
    assert.ok(s.last_hour.minutes.every((m) => m.source === "live"));
    const status = await fleet.status();
    assert.equal(status.ledger, null, "no ledger: the admin status says so");
  });

  test("the event stream sends history, then a snapshot about every second; a client that leaves is dropped", async (t) => {
    const fleet = await dashboardFleet(t);
    const dashboard = fleet.gateway.dashboard!;
    const url = `${fleet.gateway.adminServer!.url}/api/v1/dashboard/events`;
    const refused = await openEvents(url, "Bearer nope");
    assert.equal(refused.status, 401);
    await refused.ended;
    assert.equal(refused.events.length, 0);

    const stream = await openEvents(url, `Bearer ${TOKEN}`);
    assert.equal(stream.status, 200);
    assert.equal(stream.headers["content-type"], "text/event-stream; charset=utf-8");
    assert.equal(stream.headers["cache-control"], "no-cache, no-store");
    await waitFor(() => snapshotsIn(stream).length >= 4, "four snapshots", { timeoutMs: 10_000 });
    assert.equal(stream.events[0]!.event, "history", "the chart's history comes first");
    assert.equal(dashboard.watchers, 1);
    // Requests made while the stream is open show up in it.
    await fleet.chatAs("acme");
    await waitFor(
      () =>
        snapshotsIn(stream).some((s) =>
          s.outcomes.by_status.some((r) => r.status === "200" && r.total === 1),
        ),
      "a snapshot with the request",
      { timeoutMs: 5000 },
    );
    const ticks = stream.events.filter((e) => e.event === "snapshot").slice(1);
    for (let i = 1; i < ticks.length; i++) {
      const gap = ticks[i]!.at - ticks[i - 1]!.at;
      assert.ok(gap > 400 && gap < 5000, `snapshots about a second apart (${gap.toFixed(0)} ms)`);
    }
    assert.ok(stream.comments.length >= 1, "a comment opens the stream");
    stream.close();
    await stream.ended;
    await waitFor(() => dashboard.watchers === 0, "the dashboard dropped the client");
  });

  test("close() with a stream open ends the stream and returns promptly", async (t) => {
    const worker = await startMockWorker(FAST_WORKER);
    t.after(() => worker.close());
    const { logger } = captureLogger();
    const gateway = await startGatewayWithDashboard({
      workers: [{ url: worker.url }],
      host: "127.0.0.1",
      port: 0,
      policy: "round_robin",
      priorityScheduler: { enabled: false, defaultMaxClass: "default", tenantMetricTopN: 32 },
      legacy: { maxConcurrentRequests: -1, queueSize: 100, queueTimeoutSecs: 60 },
      apiKeys: [],
      requireAuth: false,
      maxPayloadSize: 1024 * 1024,
      requestTimeoutSecs: 30,
      health: {
        intervalSecs: 60,
        timeoutSecs: 1,
        failureThreshold: 1,
        successThreshold: 1,
        endpoint: "/health",
      },
      admin: { host: "127.0.0.1", port: 0, token: TOKEN },
      logger,
    });
    const stream = await openEvents(`${gateway.adminServer!.url}/api/v1/dashboard/events`, `Bearer ${TOKEN}`);
    await waitFor(() => snapshotsIn(stream).length >= 1, "a snapshot");
    // Legacy admission: no classes, the totals still come.
    const first = snapshotsIn(stream)[0]!;
    assert.equal(first.gateway.admission_mode, "legacy");
    assert.equal(first.classes, null);
    const started = performance.now();
    await gateway.close();
    const closeMs = performance.now() - started;
    await stream.ended;
    assert.ok(closeMs < 5000, `close() returned in ${closeMs.toFixed(0)} ms with a stream open`);
    assert.equal(gateway.dashboard!.watchers, 0);
    const count = stream.events.length;
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal(stream.events.length, count, "nothing is sent after close");
  });
});
